from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary folder the profile makes its private folders in (the bridges' per-user
    root, bridge/profiles/orphans.py, and ``TMPDIR``): a test lists it afterwards to see that
    nothing was left behind. In ``/var/tmp``, not under ``tmp_path``: the root must lie beneath
    no folder the tools may write, ``/tmp`` among them (``PiProfile._root_out_of_reach``)."""
    from bridge.profiles import orphans

    tmp = Path(tempfile.mkdtemp(prefix="pi-bridge-test-tmp-", dir=private_base()))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(orphans, "ROOT", str(tmp))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def private_left(folder: Path) -> list[Path]:
    """What a bridge left in the private root ``folder`` (:func:`private_tmp`), less this test
    process's own register of the folders its sandboxes hide (``pi-bridge-hides-PID``: kept
    while the process lives, bridge/profiles/orphans.py rule 3)."""
    return [p for p in folder.iterdir() if p.name != f"pi-bridge-hides-{os.getpid()}"]


def private_base() -> str:
    """Where a test's own temporary folder goes when the engine's config folder must be in it."""
    return "/var/tmp"


@pytest.fixture(scope="module")
def pinned_pi() -> object:
    """The pinned Pi's install (tools/pi, set up by tools/setup/setup); a test that needs it fails --
    it is not skipped -- when it is missing, naming the fix."""
    from bridge.profiles.command import ProfileError
    from bridge.profiles.pi import PI_PIN, find_install

    try:
        return find_install()
    except ProfileError as e:
        pytest.fail(
            f"these tests need the pinned Pi {PI_PIN}: {e}. Run tools/setup/setup (tools/test runs it before the suite).",
            pytrace=False,
        )


#: The mark of a test that starts the real pinned Pi (registered in pyproject.toml): the fast
#: loop runs without them, ``tools/test -m "not pi"`` (docs: guide/developing.md#tests). A test
#: reaches the Pi through :func:`pinned_pi` (marked by it) or carries the mark itself; one that
#: starts the Pi unmarked fails (:func:`_the_real_pi_only_when_marked`).
PI_MARK = "pi"


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that requests :func:`pinned_pi` (itself or through a fixture built on it) is
    marked ``pi``: the fixture is the way to the real Pi, so its mark cannot be forgotten."""
    if "pinned_pi" in getattr(item, "fixturenames", ()):
        item.add_marker(PI_MARK)


@functools.cache
def _pinned_argv() -> tuple[str, tuple[str, str]] | None:
    """The pinned Pi's version and the argv its compile cache is keyed by; None when it is not
    installed (every test that needs it fails through :func:`pinned_pi` then)."""
    from bridge.profiles.command import ProfileError
    from bridge.profiles.pi import find_install

    try:
        install = find_install()
    except ProfileError:
        return None
    return install.version, (install.node, install.cli)


@pytest.fixture(autouse=True)
def _the_real_pi_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test not marked ``pi`` that starts the real pinned Pi anyway (in this process or in a
    subprocess: ``bridge run``, ``serve``, ``acp``, a tool) fails, naming the fix. It runs with
    a compile cache of its own (``$XDG_CACHE_HOME``, which subprocesses inherit), and the
    confined Pi's first start fills its install's folder there
    (:func:`bridge.profiles.sandbox.compile_cache_folder`). (An unconfined start, or one in a
    fixture shared by several tests, is not seen.)"""
    pinned = _pinned_argv()
    if pinned is None or request.node.get_closest_marker(PI_MARK) is not None:
        yield
        return
    from bridge.profiles.sandbox import compile_cache_folder

    cache = tempfile.mkdtemp(prefix="unmarked-", dir=_CACHE)
    monkeypatch.setenv("XDG_CACHE_HOME", cache)
    try:
        yield
        folder = compile_cache_folder(pinned[0], pinned[1])
        if folder is not None and folder.exists():
            pytest.fail(
                f"{request.node.nodeid} started the real pinned Pi but is not marked {PI_MARK!r}: request the "
                f"pinned_pi fixture (which marks it) or mark it @pytest.mark.{PI_MARK}",
                pytrace=False,
            )
    finally:
        shutil.rmtree(cache, ignore_errors=True)


#: The suite's longest tests, longest first (``--durations=0`` on this 2-core machine), run at
#: the start of each worker's share: ``tools/test``'s ``--dist worksteal`` gives each of its two
#: workers a contiguous half of the collection and lets an idle one take the end of the other's
#: queue, so a long test late in file order ran alone at the end (the fast path's run property
#: once did, for its last 8 minutes). An entry is a test (all its parameters) or a whole file,
#: whose tests stay together, in file order, in one half: test_wheel.py's module fixture builds
#: and installs the wheel once per worker, and test_pi_matrix.py's end-to-end run comes after
#: the live runs of the oldest Pi that warm its compile cache (as in file order).
STARTED_FIRST = (
    "tests/test_soak.py::test_soak_ci",
    "tests/test_pi_matrix.py",
    "tests/test_wheel.py",
    "tests/test_ray.py",
    "tests/test_fuzz.py::test_the_fast_path_decides_what_a_full_parse_decides",
    "tests/test_fuzz.py::test_the_fast_path_observes_exactly_what_line_by_line_does",
    "tests/test_bench.py::test_quick_bench_prints_the_table_and_the_targets",
    "tests/test_bounds.py::test_a_live_session_forgets_settled_runs_and_keeps_flat_memory",
    "tests/test_confinement.py::test_another_pi_versions_flag_probe_runs_confined",
    "tests/test_diagnose.py::test_a_200_mb_journal_streams_in_bounded_memory",
    "tests/test_fuzz.py::test_the_session_takes_any_engine_lines",
    "tests/test_confinement.py::test_the_passwd_home_is_hidden_whatever_home_says",
    "tests/test_confinement.py::test_a_writable_folder_inside_what_pi_runs_from_is_refused",
    "tests/test_static.py::test_mypy_strict_is_clean",
    "tests/test_soak.py::test_soak_json_and_only_seed",
    "tests/test_diagnose.py::test_html_renders_in_headless_chromium",
    "tests/test_lifecycle.py::TestLifecycleMachine",
    "tests/test_fuzz.py::test_controller_lines_get_a_command_or_a_named_error",
    # One Ray test cluster for the module (~45 s): its tests together, in one worker.
)


def _rank(nodeid: str) -> int:
    """Where a test goes: its entry's place in :data:`STARTED_FIRST`, or after them all."""
    for n, entry in enumerate(STARTED_FIRST):
        if nodeid == entry or nodeid.startswith((entry + "[", entry + "::")):
            return n
    return len(STARTED_FIRST)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The entries of :data:`STARTED_FIRST` in turn at the head of each worker's share (the rest
    in file order after them): the same order in every xdist worker, as it must be. The shares
    are cut as ``--dist worksteal`` cuts them, for any ``-n`` (two halves without xdist)."""
    last = len(STARTED_FIRST)
    ranks = {item.nodeid: _rank(item.nodeid) for item in items}
    parts = int(getattr(config, "workerinput", {}).get("workercount", 2))
    heads: list[list[pytest.Item]] = [[] for _ in range(parts)]
    for n in range(last):
        heads[n % parts].extend(item for item in items if ranks[item.nodeid] == n)
    rest = [item for item in items if ranks[item.nodeid] == last]
    ordered: list[pytest.Item] = []
    left, at = len(items), 0
    for n, head in enumerate(heads):
        share = left // (parts - n)  # worksteal's first cut: what is left, over the workers left
        take = len(rest) - at if n == parts - 1 else max(0, share - len(head))
        ordered += [*head, *rest[at : at + take]]
        at += take
        left -= len(head) + take
    items[:] = ordered
    if not (config.args == [str(ROOT / "tests")] or config.args == ["tests"]) or config.option.keyword:
        return
    # The whole suite: an entry that names no test is out of date, and one given twice would put
    # its tests in the list twice (xdist then has no worker left: "no active workers").
    twice = sorted({entry for entry in STARTED_FIRST if STARTED_FIRST.count(entry) > 1})
    if twice:
        raise pytest.UsageError(f"tests/conftest.py STARTED_FIRST names these twice: {twice}")
    stale = [entry for n, entry in enumerate(STARTED_FIRST) if n not in ranks.values()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py STARTED_FIRST names no test: {stale}")


@pytest.fixture
def server_for() -> Iterator[Any]:
    """Start the scripted model server on a script (``server_for(steps)``); each is closed after
    the test (the real-Pi sandbox tests: tests/test_confinement.py, tests/test_hostile_*.py)."""
    from bridge.demo.model_server import start_server

    servers: list[Any] = []

    def start(script: list[dict[str, Any]]) -> Any:
        servers.append(start_server(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
