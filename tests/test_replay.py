"""`bridge replay`: the CLI over transcripts (SPEC §6), and the fixtures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.readers.replay import replay
from tests.conftest import FIXTURES, SEED, TOOLS

CORE = sorted((FIXTURES / "core").glob("*.jsonl"))


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=60)


def test_there_are_fixtures():
    assert len(CORE) >= 40


@pytest.mark.parametrize("path", CORE, ids=[p.stem for p in CORE])
def test_fixture_replays_to_its_expected_output(path: Path):
    expected = json.loads(path.with_suffix("").with_suffix(".expected.json").read_text())
    assert replay(str(path)).to_json() == expected


def test_replay_json_prints_one_line_per_file():
    a, b = CORE[0], CORE[1]
    p = bridge("replay", "--json", str(a), str(b))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == ["observations", "overlaps", "working", "settled", "receipts"]


def test_replay_table_is_readable():
    p = bridge("replay", str(FIXTURES / "core" / "o1_no_slot_held.jsonl"))
    assert p.returncode == 0
    assert "O1" in p.stdout and "no slot held" in p.stdout and "receipts:" in p.stdout


def test_replay_of_an_invalid_transcript_exits_2_naming_file_and_line(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"transcript":"pi-bridge","version":1}\n{"wat":1}\n')
    p = bridge("replay", "--json", str(bad))
    assert p.returncode == 2
    assert f'{bad}:2: unknown entry kind "wat"' in p.stderr


def test_replay_json_of_several_files_gives_a_failed_one_its_line(tmp_path: Path):
    """One line per file, in order, also when one of them cannot be read."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = bridge("replay", "--json", str(CORE[0]), str(empty), str(CORE[1]))
    assert p.returncode == 2
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert [list(x)[0] for x in lines] == ["observations", "file", "observations"]
    assert lines[1]["file"] == str(empty) and lines[1]["error"] in p.stderr


def test_replay_of_a_missing_file_exits_2(tmp_path: Path):
    p = bridge("replay", str(tmp_path / "nope.jsonl"))
    assert p.returncode == 2 and f"bridge replay: {tmp_path / 'nope.jsonl'}: cannot open: No such file" in p.stderr


def test_replay_of_a_newer_version_exits_2(tmp_path: Path):
    f = tmp_path / "new.jsonl"
    f.write_text('{"transcript":"pi-bridge","version":9}\n')
    p = bridge("replay", str(f))
    assert p.returncode == 2 and "newer" in p.stderr


def test_pending_when_the_story_is_unfinished():
    result = replay(str(FIXTURES / "core" / "ends_mid_run.jsonl"))
    assert [r.state for r in result.receipts] == ["pending"]


def test_recorded_give_up_is_taken_at_release(tmp_path: Path):
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"transcript":"pi-bridge","version":1}\n'
        '{"send":{"type":"prompt","id":"p1","message":"x"}}\n'
        '{"receipt":{"request":"p1","state":"delivery-unknown","reason":"no-ack"}}\n'
        '{"release":"p1"}\n'
        '{"receipt":{"request":"q9","state":"rejected","reason":"queue-full"}}\n'
    )
    result = replay(str(f))
    assert [(r.request, r.state, r.reason) for r in result.receipts] == [
        ("p1", "delivery-unknown", "no-ack"),
        ("q9", "rejected", "queue-full"),
    ]


# -- differential: the seed tracker itself ----------------------------------------

needs_seed = pytest.mark.skipif(
    not SEED.exists() or shutil.which("node") is None,
    reason=f"the reference tracker needs node and the seed at {SEED} (set PI_BRIDGE_SEED)",
)


def reference(paths: list[str]) -> list[dict]:
    p = subprocess.run(
        ["node", str(TOOLS / "reference" / "replay.mjs"), "--seed", str(SEED), "--batch"],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def tracker_part(path: str) -> dict:
    got = replay(path).to_json()
    del got["receipts"]
    return got


@needs_seed
def test_fixtures_agree_with_the_seed_tracker():
    paths = [str(p) for p in CORE]
    for path, want in zip(paths, reference(paths)):
        assert tracker_part(path) == want, path


@needs_seed
def test_generated_transcripts_agree_with_the_seed_tracker(tmp_path: Path):
    """1,500 transcripts of 3..90 entries from the generator, run as a script (file k from
    ``random.Random(f"ci:{k}")``)."""
    gen = [sys.executable, str(TOOLS / "reference" / "gen.py"), "--seed", "ci", "--count", "1500"]
    p = subprocess.run(
        [*gen, "--steps-range", "3", "90", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    paths = sorted(str(f) for f in tmp_path.glob("gen_ci_*.jsonl"))
    assert len(paths) == 1500, p.stderr
    mismatches = [p for p, want in zip(paths, reference(paths)) if tracker_part(p) != want]
    assert mismatches == [], f"{len(mismatches)} transcripts differ from the seed, e.g. {mismatches[:3]}"


def test_replay_skipping_updates_equals_reading_every_line(tmp_path: Path):
    """Replay skips parsing update lines; the result is what line-by-line reading gives."""
    from bridge.core.session import Session
    from bridge.readers.replay import Driver
    from bridge.transcript import open_transcript

    paths = [*CORE, *sorted((FIXTURES / "pi-1.6.0").glob("*.jsonl"))]
    assert len(paths) > 50
    for path in paths:
        stream, reader = open_transcript(str(path))
        with stream:
            driver = Driver(Session(reader.header.clearing, collect=True))
            for entry in reader:
                driver.feed(entry)
        s = driver.session
        got = replay(str(path))
        assert got.observations == s.observations, path
        assert got.overlaps == [o.to_json() for o in s.overlaps], path
        assert got.settled == [x.to_json() for x in s.settled], path


@pytest.mark.parametrize("command", ["replay", "diagnose"])
def test_a_file_with_no_line_end_is_refused_in_one_line_not_read_whole(command: str):
    """``bridge replay /dev/zero`` (or a huge sparse file, a disk image): the header is read up to
    a bound, so the file is refused at once; before, the first line was read to its end, eating
    memory until a MemoryError (a traceback, exit 70; here under a 2 GiB address-space limit)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    p = subprocess.run(
        [sys.executable, "-m", "bridge", command, "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr == (
        f"bridge {command}: /dev/zero:1: not a pi-bridge transcript (no header: its first line runs past 1 MiB)\n"
    )


def test_a_path_with_a_line_break_keeps_each_error_on_one_line(tmp_path: Path):
    """A file name holding a newline is quoted in the message (``"a\\nb.jsonl"``), so the error
    stays the one line the docs promise (docs: guide/troubleshooting.md); before, it was split in two."""
    odd = str(tmp_path / "two\nlines.jsonl")
    quoted = json.dumps(odd)
    for args, says in (
        (["replay", odd], f"bridge replay: {quoted}: cannot open: No such file or directory"),
        (["diagnose", odd], f"bridge diagnose: {quoted}: cannot open: No such file or directory"),
        (["conform", odd], f"bridge conform: {quoted} is not a folder"),
    ):
        p = bridge(*args)
        assert p.returncode == 2 and p.stderr == says + "\n", p.stderr
    page = str(tmp_path / "the\npage.html")
    p = bridge("diagnose", "--html", page, str(CORE[0]))
    assert p.returncode == 0 and p.stderr == f"bridge diagnose: timeline written to {json.dumps(page)}\n", p.stderr
    assert Path(page).is_file()


def _many_prompts(path: Path, n: int = 3000) -> None:
    """A transcript whose replay and diagnosis are long: n prompts sent, none answered."""
    lines = ['{"transcript":"pi-bridge","version":1}']
    lines += [json.dumps({"send": {"type": "prompt", "id": f"p{k}", "message": "x"}}) for k in range(n)]
    lines += [json.dumps({"recv_raw": f"garbage {k}", "i": k + 1}) for k in range(n)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("args", [["replay", "--json"], ["replay"], ["diagnose"], ["diagnose", "--json"]], ids=" ".join)
def test_a_report_cut_short_by_a_full_disk_or_a_closed_pipe_is_not_exit_0(tmp_path: Path, args: list[str]):
    """A long report whose write is cut short: CPython's ``BufferedWriter.write`` then returns
    the partial count without an error, and the rest was dropped: a cut report and exit 0. Now
    the rest is written, and what stops it is the exit status: a file-size limit (EFBIG, as a
    full disk) exit 1 with one line; a reader gone mid-write (``| head``) 141."""
    import resource

    journal = tmp_path / "long.jsonl"
    _many_prompts(journal)
    whole = bridge(*args, str(journal))
    assert whole.returncode == 0 and len(whole.stdout) > 64 << 10, (whole.returncode, len(whole.stdout))

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, 32 << 10))

    with open(tmp_path / "out", "wb") as out:
        p = subprocess.run(
            [sys.executable, "-m", "bridge", *args, str(journal)],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            preexec_fn=small_files,
        )
    assert p.returncode == 1 and p.stderr == f"bridge {args[0]}: cannot write its output (File too large)\n", p.stderr

    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", *args, str(journal)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)  # the report is being written (it is larger than the pipe holds)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""
