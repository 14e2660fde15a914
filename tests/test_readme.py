"""The README's Python API example runs as written (against the fake engine)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_python_api_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has no python example"
    p = subprocess.run([sys.executable, "-c", blocks[0]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "finished" in p.stdout and "ok: hello" in p.stdout


def test_the_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("```")[1]
    assert "tools/demo" in head and "tools/test" in head
