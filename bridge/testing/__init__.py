"""Testing against Pi offline, and the project's own test support.

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

**The project's own** (shared by the suite, ``tests/``, and the checking tools, ``tools/soak``,
``tools/record``): not part of the bridge -- nothing else in ``bridge/`` imports this package
(``tests/test_layers.py`` checks it) -- and they run from a checkout: they start the checkout's
``tools/fake_engine.py``, its ``python -m bridge`` and its pinned Pi (``tools/pi``). The tests
import nothing from ``tools/``: what a tool and the suite both need lives here.

- :mod:`bridge.testing.checks`: the live checks shared by ``tools/soak`` and the live tests --
  one receipt per prompt, journals replaying to the live receipts (or, when their disk filled
  up, reading back and agreeing with them), no zombies, who stopped a run never guessed; and
  what they drive: ``bridge serve`` as a subprocess, fake-engine generations, a journal on a
  full disk, a controller that stops prompts at random moments.
- :mod:`bridge.testing.pi_scenarios` (a package): the scenarios against the real pinned Pi (the
  scripted model server, the live bridge), each with its check of what Pi does (``sealed.py``,
  ``unsealed.py``), the runner that starts them (``runner.py``) and the normal form of a
  recording (``recordings.py``): ``tools/record`` records them into ``fixtures/pi-1.6.0`` (and, with
  ``--matrix``, across Pi versions), ``tests/test_pi_live.py`` and ``tests/test_pi_matrix.py``
  run them.
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
