"""The Python API as a user's type checker and a user's code meet it: the package is typed
(``py.typed``), every public call says its parameters (no ``**kw``), the public exceptions come
from ``bridge`` itself, and a receipt prints as one line. (A user's ``mypy --strict`` over the
installed wheel: tests/test_wheel.py.)
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
import typing

import attrs
import pytest

import bridge
from bridge.core.receipts import Receipt, Times, describe
from bridge.core.words import Reason, State
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
