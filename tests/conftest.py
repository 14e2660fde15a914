from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis' per-example deadline is a wall-clock assertion, and these machines are shared:
# a busy neighbour made examples "too slow" that take 30 ms alone. Speed is the benchmark's job.
settings.register_profile("pi-bridge", deadline=None)
settings.load_profile("pi-bridge")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
TOOLS = ROOT / "tools"
#: The reference tracker (seed 003). CI lays shared/ beside the clone.
SEED = Path(os.environ.get("PI_BRIDGE_SEED", ROOT.parent / "shared" / "seeds" / "003_759e674e4a12ce5b.txt"))


@pytest.fixture
def bridge_argv() -> list[str]:
    """The bridge CLI as a subprocess argv (the venv's interpreter)."""
    return [sys.executable, "-m", "bridge"]
