"""The ``pi`` mark: the tests that start the real pinned Pi, which the fast loop leaves out
(``tools/test -m "not pi"``; docs: guide/developing.md#tests).

It cannot drift: ``tests/conftest.py`` marks every test that requests the ``pinned_pi``
fixture, and fails a test that starts the real Pi unmarked (its own compile cache, in which the
confined Pi's first start fills its install's folder). Checked here: the mark is registered and
misspellings are errors; a test that starts the Pi unmarked fails, naming the fix, and the same
test marked passes -- each run as a user's pytest would run it, with the suite's conftest as
its plugin.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import PI_MARK, ROOT

pytestmark = pytest.mark.pi  # its runs start the real pinned Pi


def test_the_mark_is_registered_and_a_misspelt_one_is_an_error() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert [m.split(":")[0] for m in options["markers"]] == [PI_MARK]
    assert "--strict-markers" in options["addopts"].split()


#: A test module run with the suite's conftest as its plugin: it starts the real pinned Pi
#: (the profile's start-up work, which runs the confined ``pi --version`` once per cache).
STARTS_PI = """\
import pytest

from bridge.profiles.pi import scripted_profile

MODELS = (
    '{"providers": {"scripted": {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions",'
    ' "apiKey": "dummy", "models": [{"id": "scripted-model"}]}}}'
)


def start(tmp_path):
    models = tmp_path / "models.json"
    models.write_text(MODELS)
    scripted_profile(str(models)).prepare().run_cleanup()


def test_unmarked(tmp_path):
    start(tmp_path)


@pytest.mark.pi
def test_marked(tmp_path):
    start(tmp_path)


def test_requests_the_fixture(tmp_path, pinned_pi):
    start(tmp_path)


def test_starts_nothing():
    pass
"""


def test_a_test_that_starts_the_real_pi_unmarked_fails_and_marked_passes(tmp_path: Path) -> None:
    module = tmp_path / "test_user.py"
    module.write_text(STARTS_PI)
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", str(tmp_path / "none.ini")]
    argv += ["-o", "markers=pi", "-p", "no:cacheprovider", "-rA", "-q", str(module)]
    (tmp_path / "none.ini").write_text("[pytest]\n")
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert "started the real pinned Pi but is not marked 'pi'" in out, out
    outcomes = sorted(
        (line.split()[1].split("::")[-1], line.split()[0])
        for line in out.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    )
    assert outcomes == [
        ("test_marked", "PASSED"),
        ("test_requests_the_fixture", "PASSED"),
        ("test_starts_nothing", "PASSED"),
        ("test_unmarked", "ERROR"),  # at its teardown, the fixture that saw it fails it
        ("test_unmarked", "PASSED"),  # (its call itself passed)
    ], out
    # Deselected by the fast loop: the marked one and the one requesting pinned_pi.
    p = subprocess.run([*argv, "--collect-only", "-m", "not pi"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "test_unmarked" in p.stdout and "test_starts_nothing" in p.stdout, p.stdout + p.stderr
    assert "test_marked" not in p.stdout and "test_requests_the_fixture" not in p.stdout, p.stdout
