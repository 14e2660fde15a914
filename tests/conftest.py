from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
TOOLS = ROOT / "tools"
#: The reference tracker (seed 003). CI lays shared/ beside the clone.
SEED = Path(os.environ.get("PI_BRIDGE_SEED", ROOT.parent / "shared" / "seeds" / "003_759e674e4a12ce5b.txt"))


@pytest.fixture
def bridge_argv() -> list[str]:
    """The bridge CLI as a subprocess argv (the venv's interpreter)."""
    return [sys.executable, "-m", "bridge"]
