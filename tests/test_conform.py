"""`bridge conform`: every fixture against its expected output (issue 5)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES


def conform(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "conform", *args], capture_output=True, text=True, timeout=120
    )


def test_every_fixture_in_the_repo_conforms():
    p = conform(str(FIXTURES))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FAIL" not in p.stdout and "pass" in p.stdout


def test_a_difference_fails_with_its_first_place_and_update_rewrites_only_when_asked(tmp_path: Path):
    for name in ("o1_no_slot_held", "classify_finished_stop"):
        for suffix in (".jsonl", ".expected.json"):
            shutil.copy(FIXTURES / "core" / (name + suffix), tmp_path / (name + suffix))
    expected = tmp_path / "o1_no_slot_held.expected.json"
    expected.write_text(expected.read_text().replace('"no slot held"', '"something else"'))
    p = conform(str(tmp_path))
    assert p.returncode == 1
    assert "FAIL" in p.stdout and "$.overlaps[0].why" in p.stdout and '"something else"' in p.stdout
    assert '"something else"' in expected.read_text()  # nothing written without --update
    p = conform("--update", str(tmp_path))
    assert p.returncode == 0 and "updated" in p.stdout and "$.overlaps[0].why" in p.stdout
    assert conform(str(tmp_path)).returncode == 0


def test_missing_expected_output_and_empty_folder(tmp_path: Path):
    shutil.copy(FIXTURES / "core" / "o1_no_slot_held.jsonl", tmp_path / "x.jsonl")
    p = conform(str(tmp_path))
    assert p.returncode == 1 and "missing" in p.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert conform(str(empty)).returncode == 2
    p = conform(str(empty))
    assert "no fixtures" in p.stderr and p.stdout == ""
    p = conform(str(tmp_path / "x.jsonl"))
    assert p.returncode == 2 and "is not a folder" in p.stderr and p.stdout == ""


def test_a_broken_expected_file_is_a_fail_row_and_a_bad_transcript_an_error_row(tmp_path: Path):
    for name in ("o1_no_slot_held", "classify_finished_stop", "classify_failed_interrupted"):
        for suffix in (".jsonl", ".expected.json"):
            shutil.copy(FIXTURES / "core" / (name + suffix), tmp_path / (name + suffix))
    (tmp_path / "o1_no_slot_held.expected.json").write_text('{"observations": 7,')
    (tmp_path / "broken.jsonl").write_text('{"transcript":"pi-bridge","version":99}\n')
    p = conform(str(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr  # some fixtures were checked: 1, not 2
    assert "Traceback" not in p.stderr
    row = next(line for line in p.stdout.splitlines() if "o1_no_slot_held" in line)
    assert row.startswith("FAIL") and "is not valid JSON" in row
    assert next(line for line in p.stdout.splitlines() if "broken.jsonl" in line).startswith("error")
    assert "2 pass" in p.stdout
    p = conform("--update", str(tmp_path))
    assert "rewritten" in p.stdout
    (tmp_path / "broken.jsonl").unlink()
    assert conform(str(tmp_path)).returncode == 0


def test_update_that_cannot_write_an_expected_file_says_so_in_its_row(tmp_path: Path):
    """``--update`` where an expected file cannot be written (a folder in its place, a disk
    that refuses the write: here RLIMIT_FSIZE, EFBIG) is that fixture's row, FAIL or missing,
    with why, and exit 1 -- before, the OSError was a traceback (exit 70)."""
    import resource

    for name in ("o1_no_slot_held", "classify_finished_stop"):
        shutil.copy(FIXTURES / "core" / (name + ".jsonl"), tmp_path / (name + ".jsonl"))
    (tmp_path / "o1_no_slot_held.expected.json").mkdir()
    p = conform("--update", str(tmp_path))
    assert "Traceback" not in p.stderr and p.returncode == 1, p.stdout + p.stderr
    rows = p.stdout.splitlines()
    assert any(
        r.startswith("FAIL")
        and "o1_no_slot_held" in r
        and "cannot write o1_no_slot_held.expected.json: Is a directory" in r
        for r in rows
    ), p.stdout
    assert any(r.startswith("updated") and "classify_finished_stop" in r for r in rows), p.stdout

    (tmp_path / "o1_no_slot_held.expected.json").rmdir()
    stale = tmp_path / "classify_finished_stop.expected.json"
    stale.write_text(stale.read_text().replace('"finished"', '"failed"', 1))

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    p = subprocess.run(
        [sys.executable, "-m", "bridge", "conform", "--update", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,
    )
    assert "Traceback" not in p.stderr and p.returncode == 1, p.stdout + p.stderr
    rows = p.stdout.splitlines()
    assert any(r.startswith("missing") and "cannot write o1_no_slot_held.expected.json" in r for r in rows), p.stdout
    assert any(
        r.startswith("FAIL") and "$." in r and "cannot write classify_finished_stop.expected.json" in r for r in rows
    ), p.stdout
