"""``bridge conform DIR``: every fixture against its expected replay output.

A fixture is ``NAME.jsonl`` (a transcript) beside ``NAME.expected.json`` (the
object ``bridge replay --json`` printed for it, pretty-printed). Conform
replays each, compares, and prints a table of pass / FAIL with the first
difference (a JSON path, expected and got). ``--update`` rewrites the expected
files that differ (or are missing), showing each difference first; without it
nothing is written. An expected file that is not valid JSON is a FAIL row
saying so (``--update`` rewrites it; an expected file it cannot write stays a FAIL row,
or ``missing``, saying why); a transcript that cannot be read is an
``error`` row. Exit 0 when all pass (or were updated), 1 when any fixture
failed, was missing its expected output or could not be read, 2 when nothing
could be checked (not a folder, no fixture, or no transcript readable).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import attrs

from bridge.readers.replay import replay
from bridge.transcript import TranscriptError, shown_path


@attrs.frozen
class Outcome:
    name: str
    status: str  # "pass" | "FAIL" | "missing" | "error" | "updated"
    detail: str = ""


def expected_path(fixture: Path) -> Path:
    return fixture.with_name(fixture.name[: -len(".jsonl")] + ".expected.json")


def first_difference(want: Any, got: Any, path: str = "$") -> str | None:
    """The first place two JSON values differ, in words; None when equal."""
    if type(want) is not type(got) and not (isinstance(want, (int, float)) and isinstance(got, (int, float))):
        return f"{path}: expected {_short(want)}, got {_short(got)}"
    if isinstance(want, dict):
        for key in list(want) + [k for k in got if k not in want]:
            if key not in got:
                return f"{path}.{key}: expected {_short(want[key])}, missing"
            if key not in want:
                return f"{path}.{key}: unexpected {_short(got[key])}"
            d = first_difference(want[key], got[key], f"{path}.{key}")
            if d:
                return d
        return None
    if isinstance(want, list):
        for i, (a, b) in enumerate(zip(want, got)):
            d = first_difference(a, b, f"{path}[{i}]")
            if d:
                about = _about(a) or _about(b)
                return f"{d} ({about})" if about and "(" not in d else d
        if len(want) != len(got):
            extra, which = (got[len(want)], "unexpected") if len(got) > len(want) else (want[len(got)], "missing")
            about = _about(extra)
            return f"{path}: expected {len(want)} items, got {len(got)}" + (
                f"; first {which}: {about}" if about else ""
            )
        return None
    return None if want == got else f"{path}: expected {_short(want)}, got {_short(got)}"


def _about(item: Any) -> str:
    """Which prompt and observation a replay item is about (a signal, a settlement, a receipt), in
    words: ``O1 at #16 for p2``; empty for anything else."""
    if not isinstance(item, dict):
        return ""
    what = item.get("signal") or item.get("state") or ""
    idx = next((item[k] for k in ("idx", "settleIdx", "ackIdx") if isinstance(item.get(k), int)), None)
    words = str(what)
    if idx is not None:
        words += f" at #{idx}"
    if "request" in item:
        words += f" for {item['request']}"
    return words.strip()


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:157] + "..."


def dump_expected(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, ensure_ascii=True) + "\n"


def conform(folder: Path, *, update: bool = False) -> Iterator[Outcome]:
    for fixture in sorted(folder.rglob("*.jsonl")):
        name = str(fixture.relative_to(folder))
        try:
            # Compared as JSON (what an expected file holds): the vocabulary's enums are their words.
            got = json.loads(dump_expected(replay(str(fixture)).to_json()))
        except TranscriptError as e:
            yield Outcome(name, "error", str(e))
            continue
        exp = expected_path(fixture)
        if not exp.exists():
            if update:
                failed = _write(exp, got)
                if failed:
                    yield Outcome(name, "missing", failed)
                else:
                    yield Outcome(name, "updated", "expected output written (it was missing)")
            else:
                yield Outcome(name, "missing", f"no {exp.name}")
            continue
        try:
            want = json.loads(exp.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:
            why = (
                f"{exp.name} is not valid JSON ({e})"
                if isinstance(e, ValueError)
                else f"cannot read {exp.name}: {e.strerror}"
            )
            if update:
                failed = _write(exp, got)
                yield (
                    Outcome(name, "FAIL", f"{why}; {failed}")
                    if failed
                    else Outcome(name, "updated", f"{why}: rewritten")
                )
            else:
                yield Outcome(name, "FAIL", why)
            continue
        diff = first_difference(want, got)
        if diff is None:
            yield Outcome(name, "pass")
        elif update:
            failed = _write(exp, got)
            yield Outcome(name, "FAIL", f"{diff}; {failed}") if failed else Outcome(name, "updated", diff)
        else:
            yield Outcome(name, "FAIL", diff)


def _write(exp: Path, got: Any) -> str | None:
    """Write an expected output; what went wrong, in words (a row's detail), or None."""
    try:
        exp.write_text(dump_expected(got))
    except OSError as e:
        return f"cannot write {exp.name}: {e.strerror or e}"
    return None


def run(folder: str, update: bool, out: TextIO, err: TextIO | None = None) -> int:
    err = err if err is not None else sys.stderr
    root = Path(folder)
    if not root.is_dir():
        print(f"bridge conform: {shown_path(folder)} is not a folder", file=err)
        return 2
    outcomes = list(conform(root, update=update))
    if not outcomes:
        print(f"bridge conform: no fixtures (*.jsonl) under {shown_path(folder)}", file=err)
        return 2
    width = max(len(o.name) for o in outcomes)
    for o in outcomes:
        line = f"{o.status:<8} {o.name:<{width}}"
        if o.detail:
            line += f"  {o.detail}"
        print(line, file=out)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), file=out)
    if all(o.status == "error" for o in outcomes):
        return 2
    return 1 if any(o.status in ("FAIL", "missing", "error") for o in outcomes) else 0
