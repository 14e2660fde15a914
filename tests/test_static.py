"""Static checks, run with the suite (so CI and ``tools/test`` run them): ``mypy --strict`` over
``bridge/`` and ruff's lint and format over the Python the project writes.

The settings are pyproject.toml's (``[tool.mypy]``, ``[tool.ruff]``); the tools' versions are
pinned in the ``test`` extra. A failure prints the tools' own findings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What ruff looks at: the package, the tests and the tools' modules (the extensionless
#: scripts in tools/ are Python too, and are linted by name).
RUFF_PATHS = [
    "bridge",
    "tests",
    "tools",
    "tools/bench/bench",
    "tools/bench/bench_ray",
    "tools/bench/bench_startup",
    "tools/fuzz",
    "tools/record",
    "tools/soak/soak",
]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_strict_is_clean() -> None:
    p = run("mypy", "--no-error-summary")
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_lint_is_clean() -> None:
    p = run("ruff", "check", "--output-format", "concise", *RUFF_PATHS)
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_format_is_clean() -> None:
    p = run("ruff", "format", "--check", *RUFF_PATHS)
    assert p.returncode == 0, "run `.venv/bin/ruff format bridge tests tools`:\n" + p.stdout + p.stderr


def test_mypy_would_catch_a_misspelt_word(tmp_path: Path) -> None:
    """The typed vocabulary is checked, not decoration: a receipt with a state that is not a
    :class:`~bridge.core.words.State` is a type error."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from bridge.core.receipts import Receipt\n"
        "from bridge.core.words import State\n"
        "ok = Receipt('p-1', State.FINISHED)\n"
        "wrong = Receipt('p-1', 'finised')\n"
    )
    p = run("mypy", "--strict", "--no-error-summary", "--no-incremental", str(bad))
    assert p.returncode == 1 and 'incompatible type "str"; expected "State"' in p.stdout, p.stdout + p.stderr
    assert "bad.py:4:" in p.stdout and "bad.py:3:" not in p.stdout, p.stdout


#: How a wait's docstring says what ends it (trio's style: ``Process.wait``, "Block until the
#: process exits.").
WAIT_WORDS = ("ends", "until", "returns at once", "does not wait", "raises")


def test_every_wait_says_what_ends_it() -> None:
    import ast

    missing = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AsyncFunctionDef):
                doc = " ".join((ast.get_docstring(node) or "").lower().split())
                if not any(word in doc for word in WAIT_WORDS):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not missing, "async defs whose docstring does not say what ends the wait:\n" + "\n".join(missing)
