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
from typing import Any

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
    """The message, its id and the options, declared once (bridge.core.prompts): a user's editor
    and mypy see each option through the ``TypedDict``; submit_nowait checks them."""
    want = list(inspect.signature(Bridge.submit_nowait).parameters.values())
    assert [(p.name, p.kind, p.annotation) for p in want] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("message", inspect.Parameter.POSITIONAL_OR_KEYWORD, "str"),
        ("request", inspect.Parameter.KEYWORD_ONLY, "str | None"),
        ("options", inspect.Parameter.VAR_KEYWORD, "Unpack[PromptOptions]"),
    ]
    for method in (Bridge.submit, Bridge.prompt):
        got = list(inspect.signature(method).parameters.values())
        assert got == want, f"Bridge.{method.__name__}: {got} != {want}"


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
    """No ``__getattr__`` fallback and no ``**kw`` passed on but a prompt's options (a declared
    ``TypedDict``, which the door checks: :func:`bridge.live.submits.prompt_door`): what a public
    call takes is written out, so a misspelt name is an AttributeError and a misspelt keyword a
    TypeError naming the call made (tests/test_asyncio.py makes both happen)."""
    assert "__getattr__" not in vars(cls)
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            for p in inspect.signature(fn).parameters.values():
                assert p.kind is not p.VAR_POSITIONAL, name
                assert p.kind is not p.VAR_KEYWORD or p.annotation == "Unpack[PromptOptions]", name


def _doors() -> list[Any]:
    """Every call that takes a prompt's options (the Ray pool's when its extra is installed)."""
    from bridge.live.api import query
    from bridge.live.pool import Pool
    from bridge.live.pool_aio import AsyncioPool

    doors: list[Any] = [query]
    for cls in (Bridge, AsyncioBridge, Pool, AsyncioPool):
        doors += [cls.submit, cls.submit_nowait, cls.prompt]
    try:
        from bridge.ray.pool import RayPool
    except ImportError:
        pass
    else:
        doors.append(RayPool.submit)
    return doors


def _refused(door: Any, **kw: Any) -> str | None:
    """Why the door refused the keywords, if it did as Python refuses an unknown keyword (called
    unbound, ``self`` None: the door refuses before its body uses it)."""
    args = ("x",) if door.__name__ == "query" else (None, "x")
    try:
        result = door(*args, **kw)
        if inspect.iscoroutine(result):
            try:
                result.send(None)
            finally:
                result.close()
    except Exception as e:  # what the body raises past the door's check (self is None) is not it
        return str(e) if "unexpected keyword argument" in str(e) else None
    return None


@pytest.mark.parametrize("door", _doors(), ids=lambda d: d.__qualname__)
def test_each_door_takes_its_options_and_refuses_any_other_keyword_naming_itself(door: Any) -> None:
    """A door's ``**options`` is one of bridge.core.prompts' TypedDicts (its annotation): each of
    its keys is taken, any other keyword refused as Python would refuse it, naming the call made
    (not the call the door passes them to), before anything is accepted."""
    from bridge.core import prompts

    (annotation,) = [p.annotation for p in inspect.signature(door).parameters.values() if p.kind is p.VAR_KEYWORD]
    takes = getattr(prompts, annotation.removeprefix("Unpack[").removesuffix("]"))
    everything = prompts.PoolPromptOptions.__optional_keys__
    assert takes.__optional_keys__ <= everything and not takes.__required_keys__
    for key in sorted(everything):
        said = _refused(door, **{key: object()})
        wanted = (
            None
            if key in takes.__optional_keys__
            else f"{door.__qualname__}() got an unexpected keyword argument {key!r}"
        )
        assert said == wanted, (key, said)
    assert _refused(door, timout=3) == f"{door.__qualname__}() got an unexpected keyword argument 'timout'"


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
    print(bridge.journal_failed, bridge.profile, bridge.config.ack_timeout, bridge.collected().overlaps, bridge.no_prompt_follows)
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


#: What the prompt options' TypedDicts catch at each door (the bridge's, asyncio's, the
#: pools', the Ray pool's, ``query``'s) and in a user's own wrapper: each line, and its error.
OPTION_MISTAKES = [
    ("from typing import Unpack", None),
    ("import bridge", None),
    ("from bridge import BridgeAPI, Pool, PromptOptions, Receipt", None),
    ("from bridge.live.aio import AsyncioBridge", None),
    ("from bridge.live.pool_aio import AsyncioPool", None),
    ("from bridge.ray.pool import RayPool", None),
    ("async def ask(b: BridgeAPI, text: str, **options: Unpack[PromptOptions]) -> Receipt:", None),
    ("    return await b.prompt(text, **options)", None),
    ("async def f(b: BridgeAPI, a: AsyncioBridge, p: Pool, ap: AsyncioPool, rp: RayPool) -> None:", None),
    ("    await ask(b, 'x', timeout=3, events=True, trace={'traceparent': 't'})", None),
    ("    await ask(b, 'x', timout=3)", 'Unexpected keyword argument "timout" for "ask"'),
    ("    await a.submit('x', budget_tokens=5, stall_timeout=0, model='p/m')", None),
    ("    a.submit_nowait('x', budget_usd='1')", 'Argument "budget_usd" to "submit_nowait" of "AsyncioBridge" has'),
    (
        "    await b.submit('x', conversation='k')",
        'Unexpected keyword argument "conversation" for "submit" of "BridgeAPI"',
    ),
    ("    await p.submit('x', conversation='k', stream=True)", None),
    ("    await p.prompt('x', conversaton='k')", 'Unexpected keyword argument "conversaton" for "prompt" of "Pool"'),
    ("    await ap.prompt('x', conversation='k', thinking='low')", None),
    ("    ap.submit_nowait('x', images='i')", 'Argument "images" to "submit_nowait" of "AsyncioPool" has incompatible'),
    ("    print(rp.submit('x', timeout=3, provider='p', model='m', trace={'traceparent': 't'}).result())", None),
    ("    print(rp.submit('x', conversation='k', images=None).result().state)", None),
    ("    rp.submit('x', stream=True)", 'Unexpected keyword argument "stream" for "submit" of "RayPool"'),
    ("    rp.submit('x', timeout='3')", 'Argument "timeout" to "submit" of "RayPool" has incompatible type "str"'),
    ("    async for m in bridge.query('x', stall_timeout=0, budget_tokens=9):", None),
    ("        print(m)", None),
    ("    bridge.query('x', events=True)", 'Unexpected keyword argument "events" for "query"'),
]


def test_a_users_mypy_strict_sees_one_api_under_both_libraries(tmp_path: Path) -> None:
    """The project's pinned mypy over a user's files outside the checkout, the package read from
    the checkout (``MYPYPATH``; tests/test_wheel.py does it over the installed wheel)."""
    (tmp_path / "both.py").write_text(BOTH_LIBRARIES)
    mistakes = {"mistakes.py": PROTOCOL_MISTAKES, "options.py": OPTION_MISTAKES}
    for name, lines in mistakes.items():
        (tmp_path / name).write_text("".join(f"{code}\n" for code, _ in lines))
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    argv = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache")]
    p = subprocess.run([*argv, "both.py", *mistakes], cwd=tmp_path, env=env, capture_output=True, text=True)
    out = p.stdout.splitlines()
    revealed = [n for n, line in enumerate(BOTH_LIBRARIES.splitlines(), 1) if "reveal_type(" in line]
    assert [line for line in out if line.startswith("both.py")] == [
        f'both.py:{n}: note: Revealed type is "bridge.{name}"'
        for n, name in zip(
            revealed, ["live.protocols.PromptHandleAPI", "core.receipts.Receipt", "live.protocols.BridgeAPI"]
        )
    ], p.stdout + p.stderr
    errors = [line for line in out if ": error: " in line]
    for name, lines in mistakes.items():
        for n, (code, message) in enumerate(lines, 1):
            got = [e for e in errors if e.startswith(f"{name}:{n}: error: ")]
            assert [message in e for e in got] == ([] if message is None else [True]), (code, message, p.stdout)
    expected = sum(m is not None for lines in mistakes.values() for _, m in lines)
    assert p.returncode == 1 and len(errors) == expected, p.stdout + p.stderr


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
