"""The Python API as a user's type checker and a user's code meet it: the package is typed
(``py.typed``), every public call says its parameters (no ``**kw``), the public exceptions come
from ``bridge`` itself, and a receipt prints as one line. (A user's ``mypy --strict`` over the
installed wheel: tests/test_wheel.py.)
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import attrs
import pytest

import bridge
from bridge.core.receipts import Receipt, Times, describe
from bridge.core.words import Reason, State
from bridge.live.aio import AsyncioBridge, AsyncioDialog, AsyncioPromptHandle
from bridge.live.handles import Dialog, PromptHandle
from bridge.live.protocols import BridgeAPI, DialogAPI, PromptHandleAPI
from bridge.live.supervisor import Bridge
from bridge.profiles.pi import PiOptions, PiProfile
from tests.conftest import ROOT


def test_the_package_says_it_is_typed() -> None:
    assert (ROOT / "bridge" / "py.typed").is_file()


def test_submit_and_prompt_take_submit_nowaits_parameters() -> None:
    """Written out in each (a user's editor and mypy see them), kept alike here: submit_nowait
    says what they mean and checks them."""
    want = list(inspect.signature(Bridge.submit_nowait).parameters.values())
    assert [p.name for p in want][:2] == ["self", "message"] and len(want) > 5
    for method in (Bridge.submit, Bridge.prompt):
        got = list(inspect.signature(method).parameters.values())
        assert got == want, f"Bridge.{method.__name__}: {got} != {want}"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in want[2:])


def test_no_public_call_hides_its_parameters() -> None:
    """No ``*args`` / ``**kw`` on what ``bridge`` exports (scripted_profile's are PiOptions)."""
    hidden = []
    for name in bridge.__all__:
        value = getattr(bridge, name)
        calls = [(name, value)] if inspect.isfunction(value) else inspect.getmembers(value, inspect.isfunction)
        for label, fn in calls:
            if (label.startswith("_") and label != "__init__") or not fn.__module__.startswith("bridge."):
                continue  # private, or the standard library's (an enum's __init__)
            for p in inspect.signature(fn).parameters.values():
                untyped = fn.__annotations__.get(p.name) in (None, "Any")
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and untyped:
                    hidden.append(f"{name}.{label}(…{p.name})")
    assert not hidden, hidden


def test_scripted_profiles_keywords_are_pi_profiles_fields() -> None:
    fields = {f.name: f.type for f in attrs.fields(PiProfile) if f.name != "models_json"}
    hints = typing.get_type_hints(PiProfile)
    assert typing.get_type_hints(PiOptions) == {name: hints[name] for name in fields}
    assert PiOptions.__required_keys__ == frozenset()


def test_str_of_a_receipt_is_its_line_and_repr_its_fields() -> None:
    r = Receipt("p1", State.FAILED, Reason.INTERRUPTED, stop="s1", run="run-1", times=Times(sent=1.0, settled=1.5))
    assert str(r) == f"{r}" == describe(r) == "p1: failed (interrupted) [run-1; stop s1; 0.50 s]"
    assert repr(r).startswith("Receipt(request='p1', state=<State.FAILED: 'failed'>, reason=<Reason.INTERRUPTED")
    assert isinstance(r.to_json(), dict) and r.to_json()["state"] == "failed"


#: What a user of the API can catch, and where it is raised.
EXCEPTIONS = {
    "ProfileError": "bridge.profiles.command",
    "JournalError": "bridge.live.journal",
    "EngineQuestionError": "bridge.live.steering",
    "DialogError": "bridge.live.handles",
    "BridgeClosedError": "bridge.live.aio",
}


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_the_public_exceptions_come_from_bridge(name: str) -> None:
    assert name in bridge.__all__
    value = getattr(bridge, name)
    assert issubclass(value, Exception) and value.__module__ == EXCEPTIONS[name]


def test_every_public_name_is_its_homes_and_a_misspelt_one_is_an_error() -> None:
    for name in bridge.__all__:
        value = getattr(bridge, name)
        # A type alias (Message, a union) has no module of its own: its home is where it is named.
        home = bridge._HOMES[name] if isinstance(value, types.UnionType) else value.__module__
        assert value is getattr(sys.modules[home], name)
    with pytest.raises(AttributeError, match="has no attribute 'open_bridg'"):
        bridge.open_bridg  # type: ignore[attr-defined]  # noqa: B018


def test_importing_bridge_loads_nothing_until_a_name_is_used() -> None:
    code = (
        "import sys, bridge\n"
        "before = sorted(m for m in sys.modules if m.startswith(('bridge', 'trio', 'attrs', 'cattrs')))\n"
        "bridge.ProfileError, bridge.State\n"
        "print(before, 'trio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['bridge']", "False"], out.stdout


# -- one API under trio and asyncio: the protocols and the classes that satisfy them -----------

#: Each protocol, and the trio and asyncio classes that open_bridge's block gets.
SIDES = [
    (BridgeAPI, Bridge, AsyncioBridge),
    (PromptHandleAPI, PromptHandle, AsyncioPromptHandle),
    (DialogAPI, Dialog, AsyncioDialog),
]


def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


@pytest.mark.parametrize(("protocol", "trio_side", "asyncio_side"), SIDES, ids=lambda c: c.__name__)
def test_both_libraries_classes_take_the_protocols_parameters(
    protocol: type, trio_side: type, asyncio_side: type
) -> None:
    """Every call of the protocol is on both classes with the same parameters (names, kinds,
    defaults, annotations), async where the protocol's is; every property of the protocol is
    a property of the asyncio class (the trio classes' attributes: the repo's mypy, which
    checks that open_bridge's block satisfies the protocol on each side)."""
    members = _members(protocol)
    assert len(members) > 5
    for name, want in members.items():
        for side in (trio_side, asyncio_side):
            got = getattr(side, name, None)
            where = f"{side.__name__}.{name}"
            if isinstance(want, property):
                assert side is trio_side or isinstance(got, property), where
                continue
            assert inspect.isfunction(want) and inspect.isfunction(got), where
            params = list(inspect.signature(want).parameters.values())
            assert list(inspect.signature(got).parameters.values()) == params, where
            assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(want), where


@pytest.mark.parametrize("cls", [AsyncioBridge, AsyncioPromptHandle, AsyncioDialog], ids=lambda c: c.__name__)
def test_the_asyncio_classes_forward_nothing_unnamed(cls: type) -> None:
    """No ``__getattr__`` fallback and no ``**kw`` passed on: what a public call takes is written
    out, so a misspelt name is an AttributeError and a misspelt keyword a TypeError naming the
    call made (tests/test_asyncio.py makes both happen)."""
    assert "__getattr__" not in vars(cls)
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
            assert not kinds & {inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL}, name


#: A user's program on both libraries, as a user's ``mypy --strict`` reads it (not run): every
#: public call of the bridge, a handle and a dialog, in one function typed with the protocol and
#: called from ``asyncio.run`` and from ``trio.run``; and the trio class itself, for trio code.
BOTH_LIBRARIES = """\
from __future__ import annotations

import asyncio
import sys
from typing import Any

import trio

from bridge import BridgeAPI, CommandProfile, DialogAPI, Receipt, open_bridge, query
from bridge.live.api import open_trio_bridge


async def answer(dialog: DialogAPI) -> str:
    print(dialog.dialog, dialog.request, dialog.fields, dialog.timeout, dialog.by, dialog.response)
    if dialog.method == "confirm":
        await dialog.answer(confirmed=True)
    elif dialog.method == "select":
        await dialog.answer(dialog.fields["options"][0])
    else:
        await dialog.answer(cancelled=True)
    return await dialog.wait_ended()


async def use(bridge: BridgeAPI) -> Receipt:
    handle = await bridge.submit(
        "hello", request="r1", stream=True, events=True, timeout=60, stall_timeout=0,
        images=None, provider="scripted", model="scripted-model", thinking="low",
    )
    reveal_type(handle)
    async for text in handle.text():
        print(text, end="")
    async for event in handle.events():
        print(event.to_json())
    receipt: Receipt = await handle.receipt()
    print(handle.request, handle.receipt_nowait, await handle.stop())
    async for message in bridge.submit_nowait("later", events=True).messages():
        print(message)
    reveal_type(await bridge.prompt("again", timeout=5.0))
    print(await bridge.stop("r1"), bridge.knows("r1"), bridge.get_receipt("r1"))
    await bridge.send_raw({"type": "get_state"})
    bridge.configure(provider="scripted", model="scripted-model", thinking="off")
    bridge.new_conversation()
    bridge.compact("keep it short")
    offered: list[dict[str, Any]] = await bridge.models()
    print(offered, bridge.no_prompt_follows)
    async for dialog in bridge.dialogs(max_buffer=10):
        print(await answer(dialog))
    await bridge.answer_dialog("dialog-1", value="yes", confirmed=None, cancelled=False)
    async for note in bridge.signals(max_buffer=10):
        print(note["type"])
    print(bridge.status(), bridge.receipts_issued, bridge.down_reason, bridge.closing, bridge.generation)
    print(bridge.journal_failed, bridge.profile, bridge.config.ack_timeout, bridge.session, bridge.no_prompt_follows)
    if bridge.journal is not None and bridge.engine is not None:
        print(bridge.journal.path, bridge.engine.pid)
    await bridge.drain()
    bridge.shutdown(drain_timeout=5)
    bridge.close_now("close", None)
    await bridge.wait_closed()
    await bridge.aclose(drain=True)
    return receipt


async def main() -> None:
    engine = CommandProfile([sys.executable, "engine.py"])
    async with open_bridge(engine, journal=False, collect=True) as bridge:
        reveal_type(bridge)
        print(await use(bridge))
    async for m in query("one call", engine=engine, journal=False, timeout=30):
        if isinstance(m, Receipt):
            print(str(m))


async def trio_only() -> None:
    async with open_trio_bridge(CommandProfile(["engine"]), journal=False) as bridge:
        async with bridge.signals() as channel:
            print(await use(bridge), channel.clone())


asyncio.run(main())
trio.run(main)
trio.run(trio_only)
"""

#: What the protocols catch: each line of a user's file, and the error mypy gives it (None: none).
PROTOCOL_MISTAKES = [
    ("import bridge", None),
    ("async def f(b: bridge.BridgeAPI) -> None:", None),
    ("    await b.submit('x', timout=3)", 'Unexpected keyword argument "timout" for "submit" of "BridgeAPI"'),
    ("    await b.prompt('x', stream='yes')", 'Argument "stream" to "prompt" of "BridgeAPI" has incompatible type'),
    ("    b.submit_nowait('x').text_channel()", '"PromptHandleAPI" has no attribute "text_channel"'),
    ("    b.signals().clone()", 'has no attribute "clone"'),
    ("    print(b.listeners)", '"BridgeAPI" has no attribute "listeners"'),
    ("    b.configure(modle='m')", 'Unexpected keyword argument "modle" for "configure" of "BridgeAPI"'),
    ("    async for d in b.dialogs():", None),
    ("        d.answer('yes')", 'Value of type "Coroutine[Any, Any, None]" must be used'),
    ("    h = await b.submit('x')", None),
    ("    r: int = await h.receipt()", 'Incompatible types in assignment (expression has type "Receipt"'),
]


def test_a_users_mypy_strict_sees_one_api_under_both_libraries(tmp_path: Path) -> None:
    """The project's pinned mypy over a user's files outside the checkout, the package read from
    the checkout (``MYPYPATH``; tests/test_wheel.py does it over the installed wheel)."""
    (tmp_path / "both.py").write_text(BOTH_LIBRARIES)
    (tmp_path / "mistakes.py").write_text("".join(f"{code}\n" for code, _ in PROTOCOL_MISTAKES))
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    argv = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache")]
    p = subprocess.run([*argv, "both.py", "mistakes.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    out = p.stdout.splitlines()
    revealed = [n for n, line in enumerate(BOTH_LIBRARIES.splitlines(), 1) if "reveal_type(" in line]
    assert [line for line in out if line.startswith("both.py")] == [
        f'both.py:{n}: note: Revealed type is "bridge.{name}"'
        for n, name in zip(
            revealed, ["live.protocols.PromptHandleAPI", "core.receipts.Receipt", "live.protocols.BridgeAPI"]
        )
    ], p.stdout + p.stderr
    errors = [line for line in out if ": error: " in line]
    for n, (code, message) in enumerate(PROTOCOL_MISTAKES, 1):
        got = [e for e in errors if e.startswith(f"mistakes.py:{n}: error: ")]
        assert [message in e for e in got] == ([] if message is None else [True]), (code, message, p.stdout)
    assert p.returncode == 1 and len(errors) == sum(m is not None for _, m in PROTOCOL_MISTAKES), p.stdout + p.stderr


def test_a_users_mypy_outside_the_checkout_finds_the_checkout_s_package(tmp_path: Path) -> None:
    """With the checkout's venv and nothing set (no ``MYPYPATH``), a user's ``mypy --strict``
    sees ``bridge`` (found by a new-user trial: setuptools' default editable install is an
    import hook mypy cannot follow, so every import was ``import-not-found``; tools/setup/setup
    installs with ``editable_mode=compat``, a ``.pth`` line)."""
    (tmp_path / "both.py").write_text(BOTH_LIBRARIES)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    argv = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "both.py"]
    p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "import-not-found" not in p.stdout and p.returncode == 0, p.stdout + p.stderr
