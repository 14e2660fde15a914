"""Engine lines nested as deep as the bridge reads them (SPEC §8: nothing the engine prints can
crash the bridge or corrupt the journal; SPEC §6: a live journal is a valid transcript).

orjson reads a line nested 1,024 levels deep, past the interpreter's recursion limit (~1,000)
and orjson's own writer (254 levels), so the live bridge takes such a line as the object it is.
Every path that carries it on must then cope: the journal's ``recv`` entry (one level deeper),
a full journal, ``--events`` (a tool's arguments, its result), ``replay``, ``diagnose`` and its
HTML report, and ``conform``. Found by a new user's trial (exit 70 from every reader; a crash of
``bridge serve --events`` after the receipt).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import ROOT

FAKE = [sys.executable, str(ROOT / "tools" / "fake_engine.py")]


def deep(depth: int) -> str:
    """A JSON value ``depth`` levels deep: lists in a list, with a string at the bottom."""
    return "[" * depth + '"bottom"' + "]" * depth


def lines(depth: int) -> list[str]:
    """Engine lines whose nesting, as a whole, is ``depth`` + 2 or 3: a tool's start with
    such arguments, its update and its end with such a result, an unknown line type."""
    v = deep(depth)
    return [
        '{"type":"tool_execution_start","toolCallId":"c1","toolName":"bash","args":{"a":' + v + "}}",
        '{"type":"tool_execution_update","toolCallId":"c1","toolName":"bash","partialResult":' + v + "}",
        '{"type":"tool_execution_end","toolCallId":"c1","toolName":"bash","result":{"content":' + v + "},"
        '"isError":false}',
        '{"type":"something_new","x":' + v + "}",
    ]


def bridge(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("full", [False, True], ids=["lean", "full"])
def test_lines_nested_as_deep_as_the_bridge_reads_pass_every_path(tmp_path: Path, full: bool) -> None:
    depth = 1019  # the deepest line here is 1,022 levels; its journal entry 1,023
    scenario = {"prompts": [{"insert_at": {"3": lines(depth)}}]}
    journal = tmp_path / "j.jsonl"
    engine = [*FAKE, "--scenario-json", json.dumps(scenario)]
    prompt = json.dumps({"type": "prompt", "id": "a", "message": "hi", "events": True})
    served = bridge(
        "serve", "--journal", str(journal), *(["--journal-full"] if full else []), "--", *engine, stdin=prompt + "\n"
    )
    assert served.returncode == 0, served.stderr[-3000:]
    assert "Traceback" not in served.stderr, served.stderr[-3000:]
    out = [json.loads(line) for line in served.stdout.splitlines()]
    receipts = [o["receipt"] for o in out if o["type"] == "receipt"]
    assert [(r["request"], r["state"]) for r in receipts] == [("a", "finished")], receipts
    assert out[-1]["type"] == "bye"
    events = [o for o in out if o["type"] == "event"]
    start = next(e for e in events if e.get("event") == "tool-start")
    # The arguments are cut at the events' depth, and say so.
    assert start["argsTruncated"] >= 1, start
    assert "…" in json.dumps(start["args"], ensure_ascii=False)

    again = bridge("replay", "--json", str(journal))
    assert again.returncode == 0, again.stderr[-3000:]
    (replayed,) = [r for r in json.loads(again.stdout)["receipts"] if r.get("request") == "a"]
    assert (replayed["state"], replayed["reason"]) == ("finished", receipts[0]["reason"])

    diagnosed = bridge("diagnose", "--html", str(tmp_path / "r.html"), str(journal))
    assert diagnosed.returncode == 0, diagnosed.stderr[-3000:]
    assert (tmp_path / "r.html").stat().st_size > 0

    folder = tmp_path / "fixtures"
    folder.mkdir()
    (folder / "deep.jsonl").write_bytes(journal.read_bytes())
    assert bridge("conform", "--update", str(folder)).returncode == 0
    checked = bridge("conform", str(folder))
    assert checked.returncode == 0 and "1 pass" in checked.stdout, checked.stdout + checked.stderr


def test_a_line_nested_1024_deep_is_read_and_its_journal_reads_back(tmp_path: Path) -> None:
    """The deepest line orjson reads: its ``recv`` entry is 1,025 deep, which neither parser
    reads whole; the reader takes the entry's line on its own."""
    line = '{"type":"x","a":' + deep(1023) + "}"  # the object and 1,023 lists
    assert _depth(orjson.loads(line)) == 1024  # json.loads gives up sooner
    journal = tmp_path / "j.jsonl"
    engine = [*FAKE, "--scenario-json", json.dumps({"prompts": [{"insert_at": {"3": line}}]})]
    ran = bridge("run", "--journal", str(journal), "hi", "--", *engine)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert b'{"recv":{"type":"x"' in journal.read_bytes()  # read as the object it is, not a gap
    for args in (("replay", str(journal)), ("diagnose", str(journal))):
        p = bridge(*args)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert "finished" in p.stdout


def _depth(value: Any) -> int:
    n = 0
    while isinstance(value, (list, dict)):
        n += 1
        value = value["a"] if isinstance(value, dict) else value[0]
    return n


def test_an_integer_longer_than_python_reads_is_a_number_not_a_gap(tmp_path: Path) -> None:
    """``JSON.parse`` reads a 4,400-digit integer (as Infinity); CPython's int() refuses past
    4,300 digits and orjson past a double. The line is an object, live and in replay alike."""
    line = '{"type":"something_new","n":' + "7" * 4400 + "}"
    journal = tmp_path / "j.jsonl"
    engine = [*FAKE, "--scenario-json", json.dumps({"prompts": [{"insert_at": {"3": line}}]})]
    ran = bridge("run", "--json", "--journal", str(journal), "hi", "--", *engine)
    assert ran.returncode == 0, ran.stderr[-3000:]
    (live,) = [json.loads(x) for x in ran.stdout.splitlines() if x.startswith('{"request"')]
    assert (live["state"], live["signals"]) == ("finished", []), live
    again = bridge("replay", "--json", str(journal))
    assert again.returncode == 0, again.stderr[-3000:]
    (replayed,) = json.loads(again.stdout)["receipts"]
    assert (replayed["state"], replayed["signals"]) == ("finished", [])
