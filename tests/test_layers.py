"""The layers stay layers: what each folder of ``bridge/`` may import (README "Where things are").

- ``bridge.core`` is sans-IO (the style of h11 and seed 004): pure objects fed events and returning
  results. It imports only pure standard-library modules, attrs/cattrs/orjson/simdjson and itself: never
  trio, never a clock, a file, a process or a socket, and never the layers above it.
- ``bridge.transcript`` is the format: it may use the core, never the live layer or the readers.
- ``bridge.readers`` read files: no trio, no live bridge.
- ``bridge.live`` and ``bridge.controller`` may use everything below them, never the readers.
- ``bridge.demo`` (the showcase) drives the live bridge through the Python API, not the controller
  protocol; nothing below the CLI imports it. Its scripted model server is stdlib only: it ships in
  the package for ``bridge demo`` and runs as ``tools/model_server.py`` with no install at all.

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
#: simdjson: a parser in memory (the framing's JSON check of lines it does not parse).
THIRD_PARTY_PURE = frozenset({"attrs", "cattrs", "orjson", "simdjson"})
#: Names the core may import (``from MODULE import NAME``) from a module that otherwise touches
#: the world: in memory only. ``io.BytesIO`` is a buffer; the framing finds LFs with its
#: ``readlines`` (memchr), which ``bytes.split`` does not (issue 18).
PURE_NAMES = frozenset({"io.BytesIO"})

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
    "live": ("bridge.readers", "bridge.controller", "bridge.cli", "bridge.demo"),
    "controller": ("bridge.readers", "bridge.cli", "bridge.demo"),
    "demo": ("bridge.controller",),
}


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
