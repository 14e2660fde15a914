"""The documentation site builds with no broken link, page or reference: ``mkdocs build --strict``
over ``docs/mkdocs.yml``, as the docs' README tells a user to build it (the ``docs`` extra, which
``tools/setup`` installs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "docs" / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert p.returncode == 0, p.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    for name in ("open_bridge", "query", "Receipt"):
        assert f'id="bridge.{name}"' in api, name
