"""Steering the engine: which model and thinking level a prompt runs with, checked rather than
believed (docs: guide/steering.md).

Pi's answers are not proof: hosts have seen ``set_thinking_level`` answer ``success: true``
while ``get_state`` kept the old level, and levels clamped silently per model. So a prompt
that wants a model or a thinking level the engine is not known to have gets, before it is
written and while no slot is held, the commands of :func:`commands` -- ``set_model``,
``set_thinking_level``, ``get_available_thinking_levels``, then ``get_state`` -- and
:func:`verify` reads their answers:

- a command Pi refuses (``success: false``): refused, with Pi's words;
- ``get_state``'s model is not the one asked for: not confirmed;
- ``get_state``'s thinking level is not the one asked for: *clamped* when the model does not
  offer the level asked for (``get_available_thinking_levels``) -- reported, not an error --,
  else not confirmed.

A refused or unconfirmed configuration gives the prompt ``rejected``/``config`` (it was never
written). What the engine runs with once verified is an :class:`EngineConfig`, recorded on
the receipt (``config``). The start-up check's ``get_state`` gives the first one
(:func:`from_state`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from bridge.core.wire import Wire, converter, form
from bridge.core.words import THINKING_LEVELS


@form(omit=("split",))
@attrs.frozen
class Wanted:
    """What a prompt asks for: a model (provider and id together, or ``model`` alone as
    ``provider/id``), a thinking level; None: as is.

    With a provider, ``model`` is the id exactly as Pi lists it (``get_available_models``,
    ``bridge models``) and as ``set_model`` matches it: an id may itself begin with
    ``provider/`` (OpenRouter's ``openrouter/auto``), so nothing is cut off it. Without one,
    ``model`` is split at its first ``/`` (``scripted/scripted-model``)."""

    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    #: True when the provider was cut off ``model`` here (``provider/id``), so that a refusal
    #: can say how the name was read. Not part of what is wanted (no part of ``==``).
    split: bool = attrs.field(default=False, eq=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.provider is None and self.model is not None and "/" in self.model:
            head, _, tail = self.model.partition("/")
            if head and tail:
                object.__setattr__(self, "provider", head)
                object.__setattr__(self, "model", tail)
                object.__setattr__(self, "split", True)
        if (self.provider is None) != (self.model is None):
            raise ValueError("a model is named by its provider and its id together")
        if self.thinking is not None and self.thinking not in THINKING_LEVELS:
            raise ValueError(f"thinking level {self.thinking!r} is not one of {', '.join(THINKING_LEVELS)}")

    @property
    def empty(self) -> bool:
        return self.model is None and self.thinking is None

    def asked(self) -> dict[str, str | None]:
        """The ``provider``, ``model`` and ``thinking`` keywords as they were given (a split
        ``provider/id`` joined again), which make this same Wanted, ``split`` included: what a
        controller passes on to the live bridge's ``submit`` / ``configure``."""
        if self.split:
            return {"provider": None, "model": f"{self.provider}/{self.model}", "thinking": self.thinking}
        return {"provider": self.provider, "model": self.model, "thinking": self.thinking}

    def over(self, base: Wanted) -> Wanted:
        """This, with what it leaves as is taken from ``base`` (a prompt's over the bridge's)."""
        named = self if self.model is not None else base
        thinking = self.thinking if self.thinking is not None else base.thinking
        return Wanted(named.provider, named.model, thinking, split=named.split)


@form(rename={"thinking_asked": "thinkingAsked"})
@attrs.frozen
class EngineConfig(Wire):
    """The model and thinking level the engine runs with, as ``get_state`` said."""

    provider: str | None
    model: str | None
    thinking: str | None
    #: The thinking level asked for, when the model does not offer it and Pi clamped it
    #: (``thinking`` is what it runs with); None otherwise. Wire: ``thinkingAsked``.
    thinking_asked: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineConfig:
        return converter.structure(dict(data), cls)

    def satisfies(self, wanted: Wanted) -> bool:
        """True when ``wanted`` asks nothing this config does not already have."""
        model_ok = wanted.model is None or (wanted.provider, wanted.model) == (self.provider, self.model)
        return model_ok and (wanted.thinking is None or wanted.thinking in (self.thinking, self.thinking_asked))


def from_state(data: Any) -> EngineConfig | None:
    """The config a ``get_state`` answer's ``data`` shows (None if it shows no model)."""
    if not isinstance(data, Mapping):
        return None
    model = data.get("model")
    thinking = data.get("thinkingLevel")
    if not isinstance(model, Mapping):
        return None
    provider, mid = model.get("provider"), model.get("id")
    return EngineConfig(
        provider if isinstance(provider, str) else None,
        mid if isinstance(mid, str) else None,
        thinking if isinstance(thinking, str) else None,
    )


#: What :func:`model_summary` keeps of Pi's model object (docs/rpc-commands.md, "Model object").
MODEL_FIELDS: Final = ("provider", "id", "name", "reasoning", "contextWindow", "maxTokens", "input")


def model_summary(model: Any) -> dict[str, Any] | None:
    """One of ``get_available_models``' models, its fields a controller chooses by (None: not a model)."""
    if not isinstance(model, Mapping) or not isinstance(model.get("id"), str):
        return None
    return {key: model.get(key) for key in MODEL_FIELDS}


def commands(wanted: Wanted, prefix: str) -> list[dict[str, Any]]:
    """The commands that apply ``wanted`` and then read back what the engine has."""
    out: list[dict[str, Any]] = []
    if wanted.model is not None:
        out.append({"type": "set_model", "id": f"{prefix}:model", "provider": wanted.provider, "modelId": wanted.model})
    if wanted.thinking is not None:
        out.append({"type": "set_thinking_level", "id": f"{prefix}:thinking", "level": wanted.thinking})
        out.append({"type": "get_available_thinking_levels", "id": f"{prefix}:levels"})
    out.append({"type": "get_state", "id": f"{prefix}:state"})
    return out


def verify(
    wanted: Wanted, answers: Mapping[str, Mapping[str, Any]], prefix: str
) -> tuple[EngineConfig | None, str | None]:
    """``(config, None)`` when the answers confirm ``wanted``; ``(config or None, why)`` when
    Pi refused it or does not confirm it. ``answers`` are the responses by id."""
    for suffix, command in (("model", "set_model"), ("thinking", "set_thinking_level")):
        resp = answers.get(f"{prefix}:{suffix}")
        if resp is not None and resp.get("success") is not True:
            refused = f"Pi refused {command}: {resp.get('error') or 'no reason given'}"
            if suffix == "model" and wanted.model is not None and wanted.model.startswith(f"{wanted.provider}/"):
                refused += (
                    f' (with "provider" given, "model" is the exact id `bridge models` lists: perhaps '
                    f'"{wanted.model.partition("/")[2]}")'
                )
            elif suffix == "model" and wanted.split:
                refused += (
                    f' ("model" alone is read as "provider/id": provider "{wanted.provider}", id '
                    f'"{wanted.model}"; for an id that holds a "/", give "provider" too)'
                )
            return None, refused
    state = answers.get(f"{prefix}:state")
    if state is None or state.get("success") is not True:
        why = state.get("error") if state is not None else None
        return None, f"Pi did not answer get_state after the configuration: {why or 'no answer'}"
    got = from_state(state.get("data"))
    if got is None:
        return None, (None if wanted.empty else "Pi's get_state shows no model after the configuration")
    if wanted.model is not None and (got.provider, got.model) != (wanted.provider, wanted.model):
        return got, (
            f"Pi answered set_model {wanted.provider}/{wanted.model} with success but get_state shows "
            f"{got.provider}/{got.model}"
        )
    if wanted.thinking is not None and got.thinking != wanted.thinking:
        levels = answers.get(f"{prefix}:levels")
        data = levels.get("data") if levels is not None else None
        offered = data.get("levels") if isinstance(data, Mapping) else None
        if isinstance(offered, list) and wanted.thinking not in offered:
            return attrs.evolve(got, thinking_asked=wanted.thinking), None
        return got, (
            f"Pi answered set_thinking_level {wanted.thinking} with success but get_state shows "
            f"{got.thinking} (the model offers {offered})"
        )
    return got, None


converter.register_structure_hook(
    EngineConfig,
    lambda d, _: EngineConfig(d.get("provider"), d.get("model"), d.get("thinking"), d.get("thinkingAsked")),
)
