"""The docs' Reference pages say what the program does: ``reference/cli.md`` holds every
subcommand's ``--help`` exactly as ``python -m bridge SUB --help`` prints it, and
``reference/api.md`` has an entry (``::: bridge.NAME``) for every name in ``bridge.__all__``.
When a ``--help`` changes, rewrite the page with ``.venv/bin/python tests/test_docs_reference.py``.
The design pages stand alone: none points at the contract's or the seeds' files outside the
repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bridge

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "pages"
CLI_PAGE = PAGES / "reference" / "cli.md"
API_PAGE = PAGES / "reference" / "api.md"

#: Every subcommand, in the order the page gives them ("" is ``bridge --help`` itself).
SUBCOMMANDS = ("", "demo", "run", "serve", "acp", "models", "replay", "diagnose", "conform", "receipts")
#: argparse wraps at the terminal's width; the page is written at this one.
COLUMNS = "100"

_INTRO = """# CLI

Every subcommand's `--help`, exactly as the program prints it (at 100 columns).
`tests/test_docs_reference.py` runs each one and compares it with this page, so the two cannot
drift. The exit statuses are the same for every subcommand: [Exit codes](../guide/exit-codes.md).
"""


def live_help(sub: str) -> str:
    """What ``python -m bridge SUB --help`` prints (at :data:`COLUMNS` columns, no colour)."""
    env = {**os.environ, "COLUMNS": COLUMNS, "NO_COLOR": "1", "PYTHON_COLORS": "0"}
    argv = [sys.executable, "-m", "bridge", *([sub] if sub else []), "--help"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _title(sub: str) -> str:
    return f"## `bridge {sub} --help`" if sub else "## `bridge --help`"


def page_blocks() -> dict[str, str]:
    """Subcommand -> the text of its ``--help`` block on the page."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    blocks = {}
    for m in re.finditer(r"^## `bridge (?:(\S+) )?--help`\n\n````text\n(.*?)````\n", text, re.M | re.S):
        blocks[m.group(1) or ""] = m.group(2)
    return blocks


def render_page() -> str:
    parts = [_INTRO]
    for sub in SUBCOMMANDS:
        parts.append(f"{_title(sub)}\n\n````text\n{live_help(sub)}````\n")
    return "\n".join(parts)


def test_the_cli_page_has_every_subcommand_and_only_those() -> None:
    listed = re.findall(r"^    (\w+) {2,}", live_help(""), re.M)
    assert set(listed) == set(SUBCOMMANDS) - {""}, "a subcommand was added or removed: update SUBCOMMANDS"
    assert list(page_blocks()) == list(SUBCOMMANDS)


@pytest.mark.parametrize("sub", SUBCOMMANDS, ids=[s or "bridge" for s in SUBCOMMANDS])
def test_each_help_block_is_what_the_program_prints(sub: str) -> None:
    assert page_blocks().get(sub) == live_help(sub), (
        f"docs/pages/reference/cli.md differs from `bridge {sub} --help`: "
        "rewrite it with .venv/bin/python tests/test_docs_reference.py"
    )


def test_every_public_name_has_an_api_entry() -> None:
    entries = set(re.findall(r"^::: bridge\.(\w+)\s*$", API_PAGE.read_text(encoding="utf-8"), re.M))
    missing = sorted(set(bridge.__all__) - entries)
    assert not missing, f"reference/api.md has no `::: bridge.NAME` for: {', '.join(missing)}"


def test_the_asyncio_types_have_entries_too() -> None:
    text = API_PAGE.read_text(encoding="utf-8")
    for name in ("bridge.live.aio.AsyncioBridge", "bridge.live.aio.AsyncioPromptHandle"):
        assert f"::: {name}\n" in text, name


def test_no_page_points_outside_the_repository_for_the_contract() -> None:
    for page in PAGES.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        for outside in ("shared/SPEC.md", "shared/seeds", "../shared"):
            assert outside not in text, f"{page.relative_to(ROOT)} points at {outside}"


if __name__ == "__main__":
    CLI_PAGE.write_text(render_page(), encoding="utf-8")
    print(f"wrote {CLI_PAGE.relative_to(ROOT)}")
