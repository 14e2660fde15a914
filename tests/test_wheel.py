"""Issue 11: the installed package works without a checkout.

Build the wheel from the checkout, install it into a fresh venv in a temp folder outside the
checkout (its dependencies from the package index or pip's cache), and run the installed
``bridge`` from a temp folder outside the checkout, with nothing pointing back into the checkout
but the ``--pi-dir`` it is given: ``--version`` / ``--help``, ``replay`` on a copied fixture,
``demo`` through the real pinned Pi (the scripted model server must be in the wheel), the
one-line error when nothing says where Pi is, and a user's ``mypy --strict`` over a program on the
installed package's Python API (``py.typed``: the package's own types, no ``Any``).

The wheel is built from a clean copy of the checkout's top-level files and ``bridge/``: setuptools
builds in-tree, and its ``build/lib`` keeps modules deleted since the last build, which would then
ship in the wheel. Nothing here is skipped: without the index (or a warm pip cache) the install,
and so the test, fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import attrs
import pytest

from tests.conftest import FIXTURES, ROOT

PI_DIR = ROOT / "tools" / "pi"
#: Inherited variables that could point the installed bridge (or its Python) at the checkout.
SCRUB = ("PI_BRIDGE_PI_DIR", "PI_BRIDGE_NODE", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")


@attrs.frozen
class Installed:
    wheel: Path
    venv: Path
    #: An empty folder outside the checkout: the cwd of every run.
    cwd: Path
    env: dict[str, str]

    @property
    def bridge(self) -> str:
        return str(self.venv / "bin" / "bridge")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def run(
        self, *argv: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _outside_checkout(path: Path) -> None:
    assert not path.resolve().is_relative_to(ROOT.resolve()), f"{path} is inside the checkout {ROOT}"


def _step(what: str, argv: list[str], timeout: float) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{what} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    _outside_checkout(base)
    t0 = time.monotonic()

    src = base / "src"
    src.mkdir()
    for f in ROOT.iterdir():
        if f.is_file():
            shutil.copy2(f, src / f.name)
    shutil.copytree(ROOT / "bridge", src / "bridge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = base / "wheels"
    _step(
        "building the wheel",
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
        180,
    )
    [wheel] = wheels.glob("pi_bridge-*.whl")

    venv = base / "venv"
    _step("making the venv", [sys.executable, "-m", "venv", str(venv)], 120)
    _step("installing the wheel", [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], 300)

    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env["PI_BRIDGE_JOURNAL_DIR"] = str(base / "journals")
    cwd = base / "cwd"
    cwd.mkdir()
    print(f"wheel built and installed in {time.monotonic() - t0:.1f} s")
    return Installed(wheel=wheel, venv=venv, cwd=cwd, env=env)


def test_the_wheel_holds_the_package_with_its_model_server(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    # Every module of the checkout's package; two named so that the check cannot pass on an empty glob.
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "bridge").rglob("*.py")}
    assert {"bridge/demo/model_server/__main__.py", "bridge/profiles/seal.py"} <= modules
    for module in sorted(modules):
        assert module in names, f"{module} is not in {installed.wheel.name}"
    assert not [n for n in names if n.startswith(("tests/", "tools/", "fixtures/"))]
    # Of bridge.testing, the public part only: the suite's own checks, which run from a
    # checkout, are tests/shared/.
    assert {n for n in names if n.startswith("bridge/testing/")} == {
        "bridge/testing/__init__.py",
        "bridge/testing/scripted.py",
        "bridge/testing/pytest_plugin.py",
    }
    # Its data: the page diagnose --html fills in, and the PEP 561 marker (a user's mypy reads
    # the package's types only with it).
    assert {"bridge/readers/diagnose/report.html", "bridge/py.typed"} <= names


def test_the_installed_package_is_the_venvs_and_knows_no_checkout(installed: Installed) -> None:
    code = (
        "import json, bridge, bridge.demo.model_server as ms, bridge.profiles.pi as pi\n"
        "print(json.dumps([bridge.__file__, ms.__file__, pi.default_pi_dir()]))"
    )
    p = installed.run(installed.python, "-c", code)
    assert p.returncode == 0, p.stderr
    package, server, default = json.loads(p.stdout)
    for path in (package, server):
        assert Path(path).resolve().is_relative_to(installed.venv.resolve()), path
    assert default is None  # no tools/pi beside an installed package
    site = Path(package).parent.parent
    leaks = [
        str(f)
        for f in [*site.glob("*.pth"), *site.glob("pi_bridge-*.dist-info/*"), *Path(package).parent.rglob("*.py")]
        if str(ROOT) in f.read_text(errors="replace")
    ]
    assert not leaks, f"installed files naming the checkout {ROOT}: {leaks}"


def test_version_and_help(installed: Installed) -> None:
    p = installed.run(installed.bridge, "--version")
    assert (p.returncode, p.stdout.strip()) == (0, "pi-bridge 0.1.0"), p.stderr
    p = installed.run(installed.bridge, "--help")
    assert p.returncode == 0 and "demo" in p.stdout and "replay" in p.stdout, p.stderr
    for command in ("demo", "run", "serve"):
        p = installed.run(installed.bridge, command, "--help")
        text = " ".join(p.stdout.split())
        assert p.returncode == 0 and "--pi-dir" in text and "$PI_BRIDGE_PI_DIR" in text, (command, p.stdout)
        assert "an installed pi-bridge needs one of the two" in text, (command, p.stdout)


def test_replay_a_copied_fixture(installed: Installed) -> None:
    fixture = installed.cwd / "plain.jsonl"
    shutil.copy(FIXTURES / "pi-1.6.0" / "plain.jsonl", fixture)
    p = installed.run(installed.bridge, "replay", "plain.jsonl")
    assert p.returncode == 0 and "finished" in p.stdout, p.stderr
    p = installed.run(installed.bridge, "replay", "--json", "plain.jsonl")
    here = subprocess.run(
        [sys.executable, "-m", "bridge", "replay", "--json", str(fixture)], capture_output=True, text=True, check=True
    )
    assert p.returncode == 0 and p.stdout == here.stdout, p.stderr


@pytest.mark.pi
def test_demo_runs_the_real_pinned_pi(installed: Installed) -> None:
    journal = installed.cwd / "demo.jsonl"
    p = installed.run(installed.bridge, "demo", "--pi-dir", str(PI_DIR), "--journal", str(journal), timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "every receipt is what the showcase expects" in p.stdout
    assert journal.is_file()


def test_no_pi_given_is_one_line_naming_both_ways(installed: Installed) -> None:
    for argv in (["demo"], ["run", "hi"]):
        p = installed.run(installed.bridge, *argv)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (argv, p.returncode, p.stderr)
        assert lines[0].startswith(f"bridge {argv[0]}: no Pi to run"), lines
        assert "--pi-dir" in lines[0] and "PI_BRIDGE_PI_DIR" in lines[0], lines
    # The Python API's user has no --pi-dir to give: the line names PiProfile's own (it said
    # only "give --pi-dir DIR or set PI_BRIDGE_PI_DIR=DIR").
    code = "from bridge import PiProfile, ProfileError\ntry:\n    PiProfile().prepare()\nexcept ProfileError as e:\n    print(e)"
    p = installed.run(installed.python, "-c", code)
    assert p.returncode == 0 and p.stdout.startswith("no Pi to run"), p.stdout + p.stderr
    assert "PiProfile(pi_dir=DIR)" in p.stdout and "PI_BRIDGE_PI_DIR" in p.stdout, p.stdout
    # The variable is honoured (and named when what it names holds no Pi).
    nowhere = installed.cwd / "no-pi-here"
    p = installed.run(installed.bridge, "demo", env={**installed.env, "PI_BRIDGE_PI_DIR": str(nowhere)})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"not installed at {nowhere} (from PI_BRIDGE_PI_DIR" in lines[0], lines


#: A user's program on the Python API, as a user's ``mypy --strict`` reads it (not run).
USER_PROGRAM = """\
from __future__ import annotations

import json
import sys

import trio

import bridge
from bridge import BridgeConfig, CommandProfile, PiProfile, Receipt, State, open_bridge


async def main() -> None:
    engine = CommandProfile([sys.executable, "engine.py"])
    async with open_bridge(engine, journal=False, config=BridgeConfig(ack_timeout=10)) as b:
        handle = await b.submit("hello", stream=True, timeout=60, thinking="low")
        async for text in handle.text():
            print(text, end="")
        receipt: Receipt = await handle.receipt()
        reveal_type(receipt.state)
        reveal_type(receipt.reason)
        if receipt.state is State.FINISHED and receipt.ack_idx is not None:
            print(str(receipt), json.dumps(receipt.to_json()))
        again = await b.prompt("and again", stall_timeout=0)
        print(again.reply, again.native_error)
    try:
        PiProfile(pi_dir="/nowhere").prepare()
    except bridge.ProfileError as e:
        print(e)
    except (bridge.JournalError, bridge.EngineQuestionError, bridge.DialogError):
        raise


trio.run(main)
"""

#: What the package's types catch that an untyped ``bridge`` (``Any``) let through: each line of a
#: user's file, and the error mypy gives it (None: none).
USER_MISTAKES = [
    ("import bridge", None),
    ("from bridge import open_bridg", 'Module "bridge" has no attribute "open_bridg"'),
    ("async def f(b: bridge.Bridge) -> None:", None),
    ("    await b.submit('x', strem=True)", 'Unexpected keyword argument "strem"'),
    ("    await b.prompt('x', timeout='soon')", 'has incompatible type "str"; expected "float | None"'),
    ("    bridge.scripted_profile('m.json', modle='x')", 'Unexpected keyword argument "modle"'),
]


def test_a_users_mypy_strict_sees_the_packages_types(installed: Installed) -> None:
    """The project's pinned mypy, pointed at the fresh venv (``--python-executable``): it finds
    the installed package there (and trio, attrs, cattrs), and nothing of the checkout's."""
    (installed.cwd / "user.py").write_text(USER_PROGRAM)
    (installed.cwd / "mistakes.py").write_text("".join(f"{code}\n" for code, _ in USER_MISTAKES))
    env = {k: v for k, v in installed.env.items() if k != "MYPYPATH"}
    cache = installed.cwd.parent / "mypy-cache"
    argv = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--python-executable",
        installed.python,
        "--cache-dir",
        str(cache),
    ]
    p = installed.run(*argv, "user.py", timeout=180, env=env)
    assert p.stdout.splitlines() == [
        'user.py:19: note: Revealed type is "bridge.core.words.State"',
        'user.py:20: note: Revealed type is "bridge.core.words.Reason | None"',
        "Success: no issues found in 1 source file",
    ], p.stdout + p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    p = installed.run(*argv, "--no-error-summary", "mistakes.py", timeout=180, env=env)
    errors = [line for line in p.stdout.splitlines() if ": error: " in line]
    for n, (code, message) in enumerate(USER_MISTAKES, 1):
        got = [e for e in errors if e.startswith(f"mistakes.py:{n}: error: ")]
        assert [message in e for e in got] == ([] if message is None else [True]), (code, message, p.stdout)
    assert p.returncode == 1 and len(errors) == sum(m is not None for _, m in USER_MISTAKES), p.stdout + p.stderr
