"""The layers stay layers: what each folder of ``bridge/`` may import (docs: guide/developing.md#where-things-are).

- ``bridge.core`` is sans-IO (the style of h11 and seed 004): pure objects fed events and returning
  results. It imports only pure standard-library modules, attrs/cattrs/orjson/simdjson/msgspec and itself: never
  trio, never a clock, a file, a process or a socket, and never the layers above it.
- ``bridge.transcript`` is the format: it may use the core, never the live layer or the readers.
- ``bridge.readers`` read files: no trio, no live bridge.
- ``bridge.live`` and ``bridge.controller`` may use everything below them, never the readers;
  ``bridge.ray`` (the Ray pool) likewise, and not the controllers either.
- ``bridge.demo`` (the showcase) drives the live bridge through the Python API, not the controller
  protocol; nothing below the CLI imports it. Its scripted model server is stdlib only: it ships in
  the package for ``bridge demo`` and runs as ``tools/model_server.py`` with no install at all.
- ``bridge.testing`` (for a user's tests: the scripted model server, the opt-in pytest plugin)
  may use the live layer and what it stands on; nothing else in ``bridge/`` imports it, and
  nothing of it but the plugin imports pytest.
- ``tests.shared`` (what ``tools/soak/soak``, ``tools/record`` and the suite share: the live checks,
  the scenarios against the real Pi; checkout-only, outside the wheel) may use the live layer
  and what it stands on (the core, the format, the profiles), the readers (a journal replays to
  the live receipts) and the demo's model server; never the controllers or the CLI (it runs
  ``python -m bridge serve`` as a subprocess). It imports no pytest at module level, nothing of
  ``tools/`` and nothing else of ``tests/``: the tools import it, and they run without pytest.
- The doors above the core (``bridge.live``, ``bridge.controller``, ``bridge.cli``, ``bridge.ray``)
  import it only through the supervision and the vocabulary it speaks (:data:`DOOR_CORE`): never
  the lifecycle, the session or the tracker, which are the supervision's parts (issue 43: the
  supervision exports its words; a door reads its frozen ``view()``).
- ``tests/`` imports nothing from ``tools/`` (a test runs a tool as a subprocess): no ``import
  tools``, no ``sys.path`` change, no loading of a file by its path (importlib's loaders,
  ``runpy``, ``exec``). ``tools/`` imports nothing of ``tests/`` but ``tests.shared``, and
  ``bridge/`` nothing of ``tests/`` at all.

Checked twice: statically (every ``import`` in the source, including ones inside functions) and
at run time (a fresh interpreter imports the whole core and must not have loaded trio or any
other layer).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bridge"

#: The standard library the core may use: data structures and typing, nothing that touches the world.
PURE_STDLIB = frozenset(
    {
        "__future__",
        "base64",  # (and binascii, its errors) bytes in, bytes out: an image's data checked
        "binascii",
        "collections",
        "copy",
        "dataclasses",
        "enum",
        "functools",
        "itertools",
        "json",
        "math",
        "operator",
        "re",
        "typing",
        "abc",
    }
)
#: simdjson: a parser in memory (the framing's JSON check of lines it does not parse); msgspec:
#: a decoder in memory (a streamed run's deltas, bridge/core/deltas.py).
THIRD_PARTY_PURE = frozenset({"attrs", "cattrs", "orjson", "simdjson", "msgspec"})
#: Names the core may import (``from MODULE import NAME``) from a module that otherwise touches
#: the world: in memory only. ``io.BytesIO`` is a buffer; the framing finds LFs with its
#: ``readlines`` (memchr), which ``bytes.split`` does not (issue 18). An incremental decoder checks
#: a long line's UTF-8 a piece at a time (bridge/core/deltas.py).
PURE_NAMES = frozenset({"io.BytesIO", "codecs.getincrementaldecoder"})

#: For each layer: the bridge packages it must never import.
FORBIDDEN = {
    "core": (
        "bridge.live",
        "bridge.controller",
        "bridge.readers",
        "bridge.profiles",
        "bridge.transcript",
        "bridge.cli",
        "bridge.demo",
    ),
    "transcript": (
        "bridge.live",
        "bridge.controller",
        "bridge.readers",
        "bridge.profiles",
        "bridge.cli",
        "bridge.demo",
    ),
    "readers": ("bridge.live", "bridge.controller", "bridge.cli", "bridge.demo"),
    "profiles": ("bridge.live", "bridge.controller", "bridge.readers", "bridge.cli", "bridge.demo"),
    "live": ("bridge.readers", "bridge.controller", "bridge.cli", "bridge.demo", "bridge.ray"),
    "controller": ("bridge.readers", "bridge.cli", "bridge.demo"),
    # The Ray pool (bridge/ray/): the live layer across machines; nothing below it imports it.
    "ray": ("bridge.readers", "bridge.controller", "bridge.cli", "bridge.demo", "bridge.testing"),
    "demo": ("bridge.controller",),
    "testing": ("bridge.controller", "bridge.cli", "bridge.demo.showcase"),
}


#: The core's modules the doors (:data:`DOORS`) may import, each with why. The supervision is the
#: one object that decides; the rest are words that cross its door, or a pool's own sans-IO rules.
DOOR_CORE = {
    "supervision": "the one door: its requests, actions, view, and the launch facts it reads",
    "config": "BridgeConfig and the fixed bounds, which every door builds or reads",
    "receipts": "a receipt and its parts (Times, Usage, Where), and how a receipt is said",
    "words": "the contract's words (State, Reason, ...)",
    "progress": "a prompt's events, as a handle yields them",
    "framing": "lines: a controller's stdin is split and parsed as the engine's is",
    "prompts": "a prompt's options and their checks (PromptOptions, declared once)",
    "budget": "a prompt's budget, as a Submit carries it",
    "steering": "a model and thinking level asked for (Wanted), and a model's summary",
    "images": "what an image given with a prompt must be, checked before it is accepted",
    "notices": "what the bridge tells its listeners (a receipt's, a text's notice)",
    "wire": "the one cattrs converter, for what a controller writes",
    "conversation": "named conversations: their names, records and history (the CLI, acp, the pool)",
    "pool": "the pool's own sans-IO rules (PoolRules), which bridge/live/pool.py carries out",
    "dispatch": "the Ray pool's own sans-IO rules (Dispatch), which bridge/ray/pool.py carries out",
    "ledger": "the ledger's pure records, admission and schema, which bridge/live/ledger.py keeps in SQLite",
    # bridge/live/recovery.py settles a lost bridge's prompts at a bridge's open: the decisions
    # (and the session's end of a replayed journal) are this pure module's; live/ reads journals.
    "recovery": "what recovery decides for a lost bridge's prompts, which bridge/live/recovery.py carries out",
}
#: The layers above the core that reach it only through :data:`DOOR_CORE`.
DOORS = ("live", "controller", "cli", "ray")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (the package spells its names whole)"
            assert node.module is not None
            found.append((node.lineno, node.module))
            # "from bridge.live import journal" imports bridge.live.journal
            found += [
                (node.lineno, f"{node.module}.{alias.name}") for alias in node.names if node.module.startswith("bridge")
            ]
    return found


def modules_in(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_layer_imports_one_above_it(layer: str) -> None:
    files = modules_in(layer)
    assert files, f"bridge/{layer}/ is empty or gone: update FORBIDDEN"
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in imports_of(p)
        if name.startswith(FORBIDDEN[layer])
    ]
    assert not wrong, "\n".join(wrong)


def core_reached(path: Path) -> list[tuple[int, str]]:
    """The core modules ``path`` imports that are not in :data:`DOOR_CORE` (``bridge.core.X...``)."""
    return [
        (line, name)
        for line, name in imports_of(path)
        if name.startswith("bridge.core.") and name.split(".")[2] not in DOOR_CORE
    ]


@pytest.mark.parametrize("layer", DOORS)
def test_the_doors_reach_the_core_only_through_the_supervision(layer: str) -> None:
    """``bridge/live/``, ``bridge/controller/``, ``bridge/cli/`` and ``bridge/ray/`` import the
    core only through :mod:`bridge.core.supervision` and the vocabulary modules (:data:`DOOR_CORE`),
    and read none of the supervision's parts (its ``lifecycle``, its ``session``)."""
    files = modules_in(layer)
    assert files
    wrong = [f"{p.relative_to(ROOT)}:{line}: imports {name}" for p in files for line, name in core_reached(p)]
    for p in files:
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Attribute) and node.attr in ("lifecycle", "session"):
                owner = ast.unparse(node.value)
                if owner.endswith("supervision") or owner.endswith("bridge") or owner == "self":
                    wrong.append(f"{p.relative_to(ROOT)}:{node.lineno}: reads {ast.unparse(node)}")
    assert not wrong, "\n".join(wrong)


def test_the_door_check_catches_the_supervisions_parts(tmp_path: Path) -> None:
    """The doors' check is not vacuous: importing the lifecycle, the session or the tracker is
    caught; the supervision and the vocabulary are not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from bridge.core.lifecycle import Submit\nimport bridge.core.session\n"
        "from bridge.core.tracker import Overlap\nfrom bridge.core.supervision import Submit\n"
        "from bridge.core.config import BridgeConfig\nfrom bridge.core import words\n"
    )
    assert [name for _, name in core_reached(bad)] == [
        "bridge.core.lifecycle",
        "bridge.core.lifecycle.Submit",
        "bridge.core.session",
        "bridge.core.tracker",
        "bridge.core.tracker.Overlap",
    ]


def pure_names_of(path: Path) -> set[tuple[int, str]]:
    """The ``from MODULE import NAME`` imports of ``path`` that take only :data:`PURE_NAMES`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and all(f"{node.module}.{a.name}" in PURE_NAMES for a in node.names):
            found.add((node.lineno, str(node.module)))
    return found


def test_the_core_imports_only_pure_things() -> None:
    wrong = []
    for p in modules_in("core"):
        allowed = pure_names_of(p)
        for line, name in imports_of(p):
            if (line, name) in allowed:
                continue
            top = name.split(".")[0]
            if top == "bridge":
                if not (name == "bridge.core" or name.startswith("bridge.core.")):
                    wrong.append(f"{p.relative_to(ROOT)}:{line}: imports {name}")
            elif top not in PURE_STDLIB | THIRD_PARTY_PURE:
                wrong.append(f"{p.relative_to(ROOT)}:{line}: imports {name} (not pure: the core does no I/O)")
    assert not wrong, "\n".join(wrong)


def test_importing_the_core_loads_no_trio_and_no_other_layer() -> None:
    names = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts[: -1 if p.stem == "__init__" else None])
        for p in modules_in("core")
    )
    assert "bridge.core.tracker" in names and "bridge.core.lifecycle" in names
    code = (
        f"import sys\nimport {', '.join(names)}\n"
        "print(sorted(m for m in sys.modules if m == 'trio' or m.startswith('trio.') "
        "or (m.startswith('bridge.') and not m.startswith('bridge.core'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


MODEL_SERVER = PACKAGE / "demo" / "model_server"


def test_the_scripted_model_server_imports_only_the_standard_library() -> None:
    """Statically (every import of every module of bridge/demo/model_server/: the standard library
    or the package itself) and at run time (importing each, as ``bridge demo`` and
    tools/model_server.py do, loads no third-party module and no other layer)."""
    files = sorted(MODEL_SERVER.glob("*.py"))
    assert {p.stem for p in files} >= {"__init__", "__main__", "script", "reply", "handler", "server", "cli"}
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: {name}"
        for p in files
        for line, name in imports_of(p)
        if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith("bridge.demo.model_server")
    ]
    assert not wrong, "\n".join(wrong)
    names = ["bridge.demo.model_server"] + [f"bridge.demo.model_server.{p.stem}" for p in files if p.stem != "__init__"]
    code = (
        f"import sys\nimport {', '.join(names)}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'attrs', 'cattrs', 'orjson') "
        "or (m.startswith('bridge.') and not m.startswith('bridge.demo'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The static check is not vacuous: a core module importing trio or the live layer is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import trio\nfrom bridge.live import journal\n\ndef f():\n    import os\n")
    names = [name for _, name in imports_of(bad)]
    assert names == ["trio", "bridge.live", "bridge.live.journal", "os"]
    assert all(n.startswith(FORBIDDEN["core"]) or n.split(".")[0] not in PURE_STDLIB | THIRD_PARTY_PURE for n in names)


def test_nothing_else_in_the_package_imports_bridge_testing() -> None:
    """bridge.testing is test support: the bridge itself never depends on it, and nothing in
    the package imports the checkout's tests (the wheel has none)."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if not p.is_relative_to(PACKAGE / "testing")]
    assert PACKAGE / "cli" / "entry.py" in files and PACKAGE / "live" / "api.py" in files
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in imports_of(p)
        if name == "bridge.testing" or name.startswith("bridge.testing.")
    ]
    wrong += [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for line, name in imports_of(p)
        if name.split(".")[0] == "tests"
    ]
    assert not wrong, "\n".join(wrong)


SHARED = ROOT / "tests" / "shared"


def test_the_shared_checks_use_no_controller_cli_or_showcase() -> None:
    """tests/shared/ drives the bridge through the live layer, and a controller as a subprocess."""
    files = sorted(SHARED.rglob("*.py"))
    assert SHARED / "checks.py" in files and SHARED / "pi_scenarios" / "runner.py" in files
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in imports_of(p)
        if name.startswith(FORBIDDEN["testing"])
    ]
    assert not wrong, "\n".join(wrong)


def tool_scripts() -> list[Path]:
    """The Python programs of tools/: ``*.py`` and the scripts whose first line runs Python."""
    found = []
    for p in sorted((ROOT / "tools").rglob("*")):
        if not p.is_file() or "node_modules" in p.parts:
            continue
        if p.suffix == ".py" or (not p.suffix and p.read_bytes()[:100].split(b"\n")[0].find(b"python") >= 0):
            found.append(p)
    return found


def test_the_tools_import_of_tests_only_the_shared_part() -> None:
    """A tool may import ``tests.shared`` (what it shares with the suite), nothing else of
    tests/: the rest is pytest's (conftest, fixtures, the tests themselves)."""
    files = tool_scripts()
    assert {"soak", "soaklib.py", "record", "pi_matrix.py", "fake_engine.py"} <= {p.name for p in files}
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in imports_of(p)
        if name.split(".")[0] == "tests" and not (name == "tests.shared" or name.startswith("tests.shared."))
    ]
    assert not wrong, "\n".join(wrong)


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """The imports of ``path`` that run when it is imported: not those inside a function."""
    found: list[tuple[int, str]] = []
    pending: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.append((node.lineno, node.module))
        pending.extend(ast.iter_child_nodes(node))
    return found


def test_the_shared_checks_and_bridge_testing_import_no_pytest_no_tools_and_no_other_test() -> None:
    """Statically (no module of tests/shared/ or bridge/testing/ imports pytest when it is
    imported, nor anything of tools/ at all, nor any other module of tests/) and at run time
    (importing each loads none of them): ``tools/soak/soak`` and ``tools/record`` import
    tests/shared/, and they run without pytest. The one exception is the pytest plugin a user
    opts into (``bridge.testing.pytest_plugin``), which only pytest loads."""
    plugin = PACKAGE / "testing" / "pytest_plugin.py"
    assert plugin.is_file()
    files = [p for p in [*sorted((PACKAGE / "testing").rglob("*.py")), *sorted(SHARED.rglob("*.py"))] if p != plugin]
    assert {p.relative_to(ROOT).as_posix() for p in files} >= {
        "bridge/testing/__init__.py",
        "bridge/testing/scripted.py",
        "tests/shared/__init__.py",
        "tests/shared/checks.py",
        "tests/shared/pi_scenarios/__init__.py",
        "tests/shared/pi_scenarios/runner.py",
    }
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in module_level_imports(p)
        if name.split(".")[0] in ("pytest", "_pytest")
    ]
    wrong += [
        f"{p.relative_to(ROOT)}:{line}: imports {name}"
        for p in files
        for line, name in imports_of(p)
        if name.split(".")[0] == "tests" and not (name == "tests.shared" or name.startswith("tests.shared."))
    ]
    wrong += [f"{p.relative_to(ROOT)}: {what}" for p in files for what in loads_tools(p)]
    assert not wrong, "\n".join(wrong)
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in files]
    code = (
        f"import sys\nimport {', '.join(names)}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'tools')\n"
        "             or (m.startswith('tests.') and not m.startswith('tests.shared'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


#: What loads code by its path, around the import system (importlib's loaders, runpy): a test
#: that wants a tool runs it as a subprocess instead.
LOADERS = frozenset(
    {
        "spec_from_file_location",
        "spec_from_loader",
        "module_from_spec",
        "exec_module",
        "load_module",
        "SourceFileLoader",
        "SourcelessFileLoader",
        "run_path",
        "run_module",
        "syspath_prepend",
    }
)


def _used_name(node: ast.AST) -> str | None:
    """The name a node uses: ``x.NAME``, ``NAME``, or ``import NAME`` / ``from M import NAME``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.alias):
        return node.name
    return None


def loads_tools(path: Path) -> list[str]:
    """Where ``path`` imports code of ``tools/``, or may: an import of ``tools`` (or ``tools.X``),
    ``runpy``, ``__import__`` / ``import_module`` of ``tools…``, a change of ``sys.path``, a
    loader that takes a file by its path, ``exec``, a relative import. Static (``ast``), imports
    inside functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        line = getattr(node, "lineno", "?")
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Call):
            called = _used_name(node.func)
            arg = node.args[0] if node.args else None
            if called in ("__import__", "import_module") and isinstance(arg, ast.Constant):
                names = [str(arg.value)]
            elif called == "exec":
                found.append(f"line {line}: exec()")
            elif called in ("insert", "append", "extend") and ast.unparse(node.func).startswith("sys.path."):
                found.append(f"line {line}: sys.path.{called}()")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                found.append(f"line {line}: sets sys.path")
        if _used_name(node) in LOADERS:
            found.append(f"line {line}: {_used_name(node)}")
        found += [
            f"line {line}: imports {name}"
            for name in names
            if name.split(".")[0] in ("tools", "runpy") or name.startswith(".")
        ]
    return found


def test_no_test_imports_anything_from_tools() -> None:
    """tests/ imports nothing from tools/ (the shared checks are :mod:`tests.shared`; a tool is
    run as a subprocess), by any path: ``import tools…``, ``sys.path``, importlib's loaders."""
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert ROOT / "tests" / "helpers_live.py" in files and ROOT / "tests" / "test_soak.py" in files
    wrong = [f"{p.relative_to(ROOT)}: {what}" for p in files for what in loads_tools(p)]
    assert not wrong, "tests that load code of tools/ (run the tool as a subprocess instead):\n" + "\n".join(wrong)


def test_the_tools_check_catches_each_way_in(tmp_path: Path) -> None:
    """The check of tests/ is not vacuous: each way of loading a tool's code is caught, and
    running a tool, or importing the package and the standard library, is not."""
    ways = [
        "from tools.soak.soaklib import ServeProc",
        "import tools.fake_engine",
        "import tools",
        "def f():\n    from tools import soaklib",
        "import runpy",
        "mod = __import__('tools.soak.soaklib')",
        "import importlib\nm = importlib.import_module('tools.pi_matrix')",
        "import sys\nsys.path.insert(0, 'tools/reference')",
        "import sys\nsys.path.append('tools')",
        "import sys\nsys.path[:0] = ['tools']",
        "import importlib.util\nspec = importlib.util.spec_from_file_location('x', 'tools/x.py')",
        "from importlib.machinery import SourceFileLoader",
        "exec(open('tools/soak/soak').read())",
        "def t(monkeypatch):\n    monkeypatch.syspath_prepend('tools')",
        "from .helpers import x",
    ]
    for n, way in enumerate(ways):
        bad = tmp_path / f"bad{n}.py"
        bad.write_text(way + "\n")
        assert loads_tools(bad), way
    fine = tmp_path / "fine.py"
    fine.write_text(
        "import json, subprocess, sys\nfrom tests.shared.checks import ServeProc\nfrom tests.conftest import TOOLS\n"
        "x = __import__('os')\nsubprocess.run([sys.executable, str(TOOLS / 'soak'), '--help'])\n"
    )
    assert loads_tools(fine) == []
