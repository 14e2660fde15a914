"""Conformance across Pi versions (issue 16): the committed matrix, and the oldest version live.

- ``fixtures/matrix/matrix.json`` (written by ``tools/record --matrix``) covers at least nine
  versions, every scenario on each, and every version's features are the ones
  :mod:`bridge.profiles.pi_versions` gives it (the table the start-up refusal relies on).
- ``bridge conform`` passes over every committed version's recordings.
- On the oldest version of the matrix (installed by ``tools/test`` into
  ``tools/pi-matrix/``; this module installs it too, and fails -- never skips -- if it
  cannot): the bridge refuses it at start-up naming the first version with each missing
  feature; with ``--allow-other-pi-version`` its receipts say what is unknown.
- ``tools/record --matrix`` end to end on the pin and the oldest version: the rows it writes
  agree with the committed ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.profiles.pi import PI_PACKAGE, PI_PIN
from bridge.profiles.pi_versions import FEATURES, NEEDED, features_of, lacking, parse_version
from tests.conftest import FIXTURES, ROOT, TOOLS
from tests.shared import pi_scenarios as sc
from tests.shared.pi_scenarios.runner import TAINT_GRACE_MAX

#: Marked ``pi`` (tests/conftest.py): the real Pi, pinned and the oldest version, end to end.
pytestmark = pytest.mark.pi

MATRIX = FIXTURES / "matrix"


#: Where ``tools/pi_matrix.py`` installs every version but the pin (``tools/pi``).
MATRIX_DIR = TOOLS / "pi-matrix"
#: A sibling the registry lacks at the version: the package.json's ``pi-bridge-matrix`` note
#: naming the override ``tools/pi_matrix.py`` used instead (its ``FALLBACKS``).
FALLBACK_NOTE = re.compile(r"(\S+) \S+ is not on the registry \(not installable as published\): overridden to (\S+)")
DATA: dict[str, Any] = json.loads((MATRIX / "matrix.json").read_text())
ROWS = {r["version"]: r for r in DATA["versions"]}
OLDEST = min(ROWS, key=lambda v: parse_version(v) or (0, 0, 0))


# --------------------------------------------------------------------------- the committed table


def test_the_matrix_covers_nine_versions_over_the_range_and_every_scenario_on_each() -> None:
    assert len(ROWS) >= 9 and PI_PIN in ROWS and OLDEST == "0.74.0"
    assert set(DATA["scenarios"]) == set(sc.SCENARIOS)
    for version, row in ROWS.items():
        assert set(row["scenarios"]) == set(sc.SCENARIOS), version
        assert "error" not in row["probe"], (version, row["probe"])
        for name, cell in row["scenarios"].items():
            assert cell["status"] in ("as 1.6.0", "differs", "error", "cannot run"), (version, name, cell)


def test_the_pin_row_is_as_recorded_everywhere() -> None:
    cells = ROWS[PI_PIN]["scenarios"]
    assert {n: c["status"] for n, c in cells.items()} == {n: "as 1.6.0" for n in sc.SCENARIOS}


@pytest.mark.parametrize("version", sorted(ROWS, key=lambda v: parse_version(v) or (0, 0, 0)))
def test_each_version_showed_exactly_the_features_pi_versions_gives_it(version: str) -> None:
    shown = ROWS[version]["features"]
    have = features_of(version)
    assert {f.name: shown[f.name] for f in FEATURES} == {f.name: f.name in have for f in FEATURES}


def test_a_scenario_needing_a_missing_command_is_marked_not_failed() -> None:
    for version, row in ROWS.items():
        cell = row["scenarios"]["clear_queue_unsealed"]
        if "clear_queue" in features_of(version):
            assert cell["status"] != "cannot run", version
        else:
            assert cell == {"status": "cannot run", "detail": f"Pi {version} has no clear_queue"}


def test_versions_lacking_what_the_tracker_needs_never_finish_a_prompt() -> None:
    for version, row in ROWS.items():
        if not lacking(version):
            continue
        states = {
            (r["state"], r["reason"]) for c in row["scenarios"].values() for r in (c.get("receipts") or {}).values()
        }
        assert states and all(s != "finished" for s, _ in states), (version, states)


def _matrix_dirs() -> list[Path]:
    return sorted(p for p in MATRIX.glob("pi-*") if p.is_dir())


def test_every_version_has_recordings() -> None:
    assert {p.name for p in _matrix_dirs()} == {f"pi-{v}" for v in ROWS}


@pytest.mark.parametrize("folder", _matrix_dirs(), ids=lambda p: p.name)
def test_bridge_conform_passes_on_each_versions_recordings(folder: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "conform", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pass" in p.stdout and "FAIL" not in p.stdout


def test_the_lock_files_pin_every_sibling_to_the_version() -> None:
    """Every sibling at the version, but for the ones the registry lacks there: each of those
    named, with its override, in the package.json's note (0.99.1's and 1.0.3's chord)."""
    assert json.loads((TOOLS / "pi" / "package.json").read_text())["dependencies"][PI_PACKAGE] == PI_PIN
    assert not (MATRIX_DIR / PI_PIN).exists(), "the pin is tools/pi, with its own lock"
    fallbacks = {}
    for version in set(ROWS) - {PI_PIN}:
        package = json.loads((MATRIX_DIR / version / "package.json").read_text())
        lock = json.loads((MATRIX_DIR / version / "package-lock.json").read_text())
        assert package["dependencies"] == {PI_PACKAGE: version}
        noted = dict(m.groups() for m in map(FALLBACK_NOTE.fullmatch, package["pi-bridge-matrix"]) if m)
        assert len(noted) == len(package["pi-bridge-matrix"]), (version, package["pi-bridge-matrix"])
        fallbacks.update({(version, name): pinned for name, pinned in noted.items()})
        for name, pinned in package["overrides"].items():
            assert pinned == noted.get(name, version), (version, name)
            assert lock["packages"][f"node_modules/{name}"]["version"] == pinned, (version, name)
        assert lock["packages"][f"node_modules/{PI_PACKAGE}"]["version"] == version
    assert fallbacks == {
        ("0.99.1", "@earendil-works/chord"): "0.87.1",
        ("1.0.3", "@earendil-works/chord"): "0.87.1",
    }


# --------------------------------------------------------------------------- the oldest version, live


@pytest.fixture(scope="module")
def oldest() -> Path:
    """The oldest version of the matrix, installed (``npm ci`` from its lock; a no-op when done)."""
    p = subprocess.run(
        [sys.executable, str(TOOLS / "pi_matrix.py"), "install", OLDEST],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    if p.returncode != 0:
        pytest.fail(
            f"cannot install Pi {OLDEST} into {MATRIX_DIR / OLDEST} (run tools/test: it does):\n{p.stderr[-3000:]}"
        )
    return MATRIX_DIR / OLDEST


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Any]:
    from bridge.demo.model_server import start_server

    server = start_server([{"text": "a reply nobody can be sure of"}, {"text": "and another"}])
    try:
        server.models = server.write_models(str(tmp_path / "models"))
        yield server
    finally:
        server.close()


def _bridge_run(oldest: Path, *extra: str, models: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bridge", "run", "--pi-dir", str(oldest), "--no-journal", "--json", *extra]
    if models is not None:
        argv += ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_startup_refuses_the_oldest_version_naming_the_first_version_with_each_need(oldest: Path) -> None:
    p = _bridge_run(oldest, "hello")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert f"version {OLDEST}, which lacks what the overlap tracker needs" in lines[0]
    assert "agent_settled (first in Pi 0.80.6)" in lines[0] and "disposition (first in Pi 0.99.1)" in lines[0]
    assert "--allow-other-pi-version" in lines[0]
    assert [f.name for f in lacking(OLDEST)] == list(NEEDED)


def test_the_oldest_version_allowed_gives_receipts_that_say_what_is_unknown(oldest: Path, scripted: Any) -> None:
    p = _bridge_run(oldest, "--allow-other-pi-version", "--taint-grace", "1", "hello", "again", models=scripted.models)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"running Pi {OLDEST} anyway" in p.stderr and "no prompt can finish" in p.stderr
    receipts = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(r["request"], r["state"], r["reason"]) for r in receipts] == [
        ("p1", "outcome-unknown", "disposition"),
        ("p2", "outcome-unknown", "disposition"),
    ]
    for r in receipts:
        assert r["disposition"] is None and r["settleIdx"] is None
        # The engine accepted each prompt (its answer is the ack): delivered, so unknown, not rejected.
        assert r["ackIdx"] is not None and r["times"]["acked"] is not None
        assert [s["signal"] for s in r["signals"]] == ["disposition"]
    assert receipts[1]["generation"] == 2, "the unsealed engine was not replaced before the next prompt"
    # Whether Pi reached the model inside the 1 s grace depends on the machine's load (stop 37's CI
    # run saw none reach it), so only this is certain: no prompt went to the model twice.
    assert len(scripted.requests) <= 2, "a prompt was sent again after its engine was replaced"


def test_the_matrix_command_end_to_end_on_the_pin_and_the_oldest(oldest: Path, tmp_path: Path) -> None:
    # The two versions side by side. The oldest sends no agent_settled, so it spent most of its
    # time waiting out every prompt's 3 s taint grace in full: there it is 1 s (the scenarios
    # that ask for a taint grace ask for 1 s), which changes none of its receipts or statuses.
    assert "agent_settled" not in features_of(OLDEST)
    runs = {
        version: subprocess.Popen(
            [sys.executable, str(TOOLS / "record"), "--matrix", version, "--out", str(tmp_path / version)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env={**os.environ, TAINT_GRACE_MAX: "1"} if version == OLDEST else None,
        )
        for version in (PI_PIN, OLDEST)
    }
    try:
        outputs = {version: proc.communicate(timeout=600)[0] for version, proc in runs.items()}
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for version, proc in runs.items():
        output = outputs[version]
        assert proc.returncode == 0, output
        out = tmp_path / version
        rows = json.loads((out / "matrix.json").read_text())["versions"]
        assert [r["version"] for r in rows] == [version]
        assert _comparable(rows[0]) == _comparable(ROWS[version]), output
        assert (out / f"pi-{version}" / "plain.jsonl").is_file()
        assert "| scenario |" in (out / "README.md").read_text()
        c = subprocess.run([sys.executable, "-m", "bridge", "conform", str(out)], capture_output=True, text=True)
        assert c.returncode == 0, c.stdout


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """What a row says that does not depend on timing: features, and per scenario its status and receipts."""
    features = {k: v for k, v in row["features"].items() if k != "duplicate_response_ids"}
    cells = {
        name: (c["status"], sorted((k, r["state"], r["reason"]) for k, r in (c.get("receipts") or {}).items()))
        for name, c in row["scenarios"].items()
    }
    return {"features": features, "scenarios": cells, "install": row["install"], "probe": row["probe"]}


def test_an_install_that_is_not_the_version_it_says_is_refused_once(
    oldest: Path, scripted: Any, tmp_path: Path
) -> None:
    """The oldest Pi with a package.json that says it is the pin: taken for the pin, it refused
    the seal's flags (``Unknown options: --no-mcp, …``) at every start and was retried as a
    crash up to the limit (exit 1). Now: one start, one line, exit 2."""
    fake_pin = tmp_path / "pi"
    subprocess.run(["cp", "-al", str(oldest), str(fake_pin)], check=True)
    meta_path = fake_pin / "node_modules" / "@earendil-works" / "pi-coding-agent" / "package.json"
    meta = json.loads(meta_path.read_text())
    meta["version"] = PI_PIN
    meta_path.unlink()  # a hard link into the real install: a new file, not an edit
    meta_path.write_text(json.dumps(meta))
    p = _bridge_run(fake_pin, "hello", models=scripted.models)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the seal's flags: Unknown options" in lines[0], p.stderr
    assert "is the install the Pi version its package.json says?" in lines[0]
