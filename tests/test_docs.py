"""The documentation tells the truth where a test can check it.

- The site builds with no broken link, page or reference: ``mkdocs build --strict`` over
  ``docs/mkdocs.yml``, as README "Documentation" tells a user to build it (the ``docs`` extra,
  which ``tools/setup/setup`` installs).
- Every ```` ```python ```` block in the README and in ``docs/pages/**/*.md`` runs as written,
  each as its own program in a fresh folder outside the checkout (the package importable, a
  ``models.json`` there naming a scripted model server, the journals kept apart). A block that
  cannot run standalone says so on the line before it, ``<!-- not run: REASON -->``, and
  :data:`NOT_RUN` counts those marks page by page, so a new one is a decision, not a slip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = ROOT / "docs" / "pages"

#: ``<!-- not run: REASON -->`` marks, by page (relative to docs/pages, or README.md).
NOT_RUN: dict[str, int] = {"guide/python-api.md": 1, "guide/extension-dialogs.md": 1, "guide/ray.md": 2}

_BLOCK = re.compile(r"^(?:<!-- not run: (?P<why>[^\n]*?) -->\n)?```python\n(?P<code>.*?)^```", re.M | re.S)


def documents() -> list[tuple[str, Path]]:
    """Every page a reader reads: the README, then the site's pages in path order."""
    return [("README.md", ROOT / "README.md")] + [
        (str(path.relative_to(PAGES)), path) for path in sorted(PAGES.rglob("*.md"))
    ]


def python_blocks() -> Iterator[tuple[str, int, str, str | None]]:
    """(page, n, code, why not run) for each python block, n counting from 1 on its page."""
    for name, path in documents():
        for n, m in enumerate(_BLOCK.finditer(path.read_text(encoding="utf-8")), start=1):
            yield name, n, m.group("code"), m.group("why")


def _runnable() -> list[pytest.param]:
    return [pytest.param(code, id=f"{page}:{n}") for page, n, code, why in python_blocks() if why is None]


def run_block(
    code: str, folder: Path, *, cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``code`` as a program of its own, run from ``folder`` (or ``cwd``) with the package on
    PYTHONPATH, as a user's script runs; journals and state under ``folder``."""
    program = folder / "example.py"
    program.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_STATE_HOME": str(folder / "state"),
        "PI_BRIDGE_JOURNAL_DIR": str(folder / "journals"),
    }
    return subprocess.run(
        [sys.executable, str(program)],
        cwd=cwd or folder,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


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
    api = (tmp_path / "site" / "reference" / "api.html").read_text()
    for name in ("open_bridge", "query", "Receipt"):
        assert f'id="bridge.{name}"' in api, name


def test_the_blocks_not_run_are_the_ones_counted() -> None:
    """Each mark gives its reason, and the marks are the ones :data:`NOT_RUN` counts."""
    marks = [(page, why) for page, _, _, why in python_blocks() if why is not None]
    assert all(why.strip() for _, why in marks), marks
    assert Counter(page for page, _ in marks) == Counter(NOT_RUN), marks


def test_the_docs_have_python_examples() -> None:
    """The collection below is not empty by accident (a changed fence would run nothing)."""
    pages = {page for page, _, _, why in python_blocks() if why is None}
    assert {"README.md", "guide/python-api.md"} <= pages, pages


@pytest.fixture
def scripted_folder(tmp_path: Path, pinned_pi: object) -> Iterator[Path]:
    """A fresh folder outside the checkout holding ``models.json`` for a scripted model server
    that answers every request with a short text."""
    from bridge.demo.model_server import start_server

    with start_server(default={"text": "Hello from the scripted model."}) as server:
        server.write_models(str(tmp_path))
        yield tmp_path


@pytest.mark.parametrize("code", _runnable())
def test_every_python_example_runs_as_written(code: str, scripted_folder: Path) -> None:
    done = run_block(code, scripted_folder)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert "Traceback" not in done.stderr, done.stderr[-4000:]


# -- issue 42, point 12: what a new user's docs left broken -------------------------------------------


def test_the_built_sites_links_are_pages_not_folders(tmp_path: Path) -> None:
    """Opened from disk (``file://…/.site/``), a link to ``guide/run/`` opened a folder
    listing: the site is built with ``use_directory_urls: false`` (``guide/run.html``)."""
    config = (ROOT / "docs" / "mkdocs.yml").read_text()
    assert re.search(r"^use_directory_urls: false$", config, re.M)


def test_the_otel_extra_installs_what_the_trace_example_imports() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~ ]", r, maxsplit=1)[0] for r in extras["otel"]}
    guide = (PAGES / "guide" / "budgets-and-traces.md").read_text()
    imported = set(re.findall(r"^from (opentelemetry(?:\.\w+)?)", guide, re.M))
    assert imported, "the traces guide imports OpenTelemetry"
    for module in imported:
        package = "opentelemetry-sdk" if module.startswith("opentelemetry.sdk") else "opentelemetry-api"
        assert package in names, f"{module} is imported by the guide but the otel extra lacks {package}"


def test_the_install_page_names_every_extra_tools_setup_installs() -> None:
    setup = (ROOT / "tools" / "setup" / "setup").read_text()
    found = re.search(r'-e "\$root\[([a-z,]+)\]"', setup)
    assert found, "tools/setup/setup installs the package with its extras"
    page = (PAGES / "guide" / "install.md").read_text()
    assert f"pip install -e '.[{found.group(1)}]'" in page


def test_the_api_reference_shows_open_bridge_as_a_context_manager_and_lists_the_helpers() -> None:
    """The reference showed ``open_bridge`` returning an ``AsyncIterator`` (the generator under
    ``@asynccontextmanager``); ``remove_conversation`` and ``use_tracer_provider`` were neither
    exported nor in it."""
    import inspect

    import bridge

    assert "AbstractAsyncContextManager" in str(inspect.signature(bridge.open_bridge).return_annotation)
    for name in ("remove_conversation", "list_conversations", "use_tracer_provider"):
        assert name in bridge.__all__ and callable(getattr(bridge, name))


def test_the_testing_guides_examples_pass_a_users_mypy_strict(tmp_path: Path) -> None:
    """The testing guide's asyncio example failed ``mypy --strict`` (its steps a
    ``list[object]``): every example of the guide is checked as a user's own file would be."""
    for page, n, code, why in python_blocks():
        if why is None and page == "guide/testing.md":
            (tmp_path / f"example_{n}.py").write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPY_CACHE_DIR": str(tmp_path / ".mypy_cache")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
