"""Testing against Pi offline: what a user's own tests use.

**For a user's tests** (any install; ``docs/pages/guide/testing.md`` shows them):

- :class:`ScriptedModel` (:mod:`bridge.testing.scripted`): the scripted OpenAI-compatible model
  server for the length of a ``with`` or ``async with`` block, on 127.0.0.1 -- its URL, the Pi
  ``models.json`` naming it, :meth:`ScriptedModel.profile` to pass to ``open_bridge``, and the
  requests it saw (:class:`SeenRequest`); its steps are :class:`Step` dicts.
- :mod:`bridge.testing.pytest_plugin`: the ``scripted_model`` fixture (with the
  ``@pytest.mark.scripted_model(steps)`` marker) and ``scripted_model_factory``, opted into with
  ``pytest_plugins = ["bridge.testing.pytest_plugin"]``.

The names above are loaded on first use (PEP 562): ``import bridge.testing`` loads nothing
else, and nothing here imports pytest but the plugin, which pytest loads.

Nothing else in ``bridge/`` imports this package (``tests/test_layers.py`` checks it). The
project's own test support, which its suite and checking tools share and which runs only from
a checkout, is not here: it is ``tests/shared/``, outside the wheel.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.testing.scripted import ScriptedModel as ScriptedModel
    from bridge.testing.scripted import SeenRequest as SeenRequest
    from bridge.testing.scripted import Step as Step
    from bridge.testing.scripted import ToolCall as ToolCall
    from bridge.testing.scripted import Usage as Usage

#: Where each public name lives.
_HOMES = {name: "bridge.testing.scripted" for name in ("ScriptedModel", "SeenRequest", "Step", "ToolCall", "Usage")}

__all__ = sorted(_HOMES)

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'bridge.testing' has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
