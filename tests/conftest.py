from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis' per-example deadline is a wall-clock assertion, and these machines are shared:
# a busy neighbour made examples "too slow" that take 30 ms alone. Speed is the benchmark's job.
settings.register_profile("pi-bridge", deadline=None)
settings.load_profile("pi-bridge")

# The confined Pi's compile cache (bridge.profiles.sandbox.compile_cache) lives under
# $XDG_CACHE_HOME, one per install: the fake installs of the tests would leave theirs in the
# user's ~/.cache. One folder for the session, the bridges started by the tests included.
_CACHE = tempfile.mkdtemp(prefix="pi-bridge-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
TOOLS = ROOT / "tools"
#: The reference tracker (seed 003). CI lays shared/ beside the clone.
SEED = Path(os.environ.get("PI_BRIDGE_SEED", ROOT.parent / "shared" / "seeds" / "003_759e674e4a12ce5b.txt"))


@pytest.fixture
def bridge_argv() -> list[str]:
    """The bridge CLI as a subprocess argv (the venv's interpreter)."""
    return [sys.executable, "-m", "bridge"]


@pytest.fixture(scope="module")
def pinned_pi() -> object:
    """The pinned Pi's install (tools/pi, set up by tools/setup); a test that needs it fails --
    it is not skipped -- when it is missing, naming the fix."""
    from bridge.profiles.command import ProfileError
    from bridge.profiles.pi import PI_PIN, find_install

    try:
        return find_install()
    except ProfileError as e:
        pytest.fail(
            f"these tests need the pinned Pi {PI_PIN}: {e}. Run tools/setup (tools/test runs it before the suite).",
            pytrace=False,
        )
