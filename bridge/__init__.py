"""pi-bridge: supervise an agent engine over JSONL and settle one receipt per prompt.

The Python API (docs: guide/python-api.md, reference/api.md)::

    from bridge import query, open_bridge, open_pool, PiProfile, CommandProfile, BridgeConfig

What it raises for a user to catch: :class:`ProfileError` (the engine cannot be prepared, or
``open_bridge``'s start of it was refused: a model Pi does not offer, ...),
:class:`JournalError` (the journal cannot be created or written at open), :class:`EngineQuestionError`
(``await bridge.models()`` got no answer), :class:`DialogError` (an extension dialog's answer was
refused); a receipt's :class:`State` and :class:`Reason` are string enums. The package is typed
(``py.typed``, PEP 561): what ``open_bridge`` gives is a :class:`BridgeAPI` under trio and
asyncio alike (its handles :class:`PromptHandleAPI`, its dialogs :class:`DialogAPI`), and a
prompt's options are :class:`PromptOptions` (a ``TypedDict``) at every door.

The names below are loaded on first use (PEP 562), so ``import bridge.core`` stays pure: it
pulls in neither trio nor the live layer (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    # What a type checker reads: every public name with its own type. (It does not see the
    # ``__getattr__`` below, so a misspelt name is an error there, not an ``Any``.)
    from bridge.core.config import BridgeConfig as BridgeConfig
    from bridge.core.prompts import PoolPromptOptions as PoolPromptOptions
    from bridge.core.prompts import PromptOptions as PromptOptions
    from bridge.core.prompts import RayPromptOptions as RayPromptOptions
    from bridge.core.prompts import RunOptions as RunOptions
    from bridge.core.receipts import Receipt as Receipt
    from bridge.core.words import Reason as Reason
    from bridge.core.words import State as State
    from bridge.live.aio import BridgeClosedError as BridgeClosedError
    from bridge.live.api import open_bridge as open_bridge
    from bridge.live.api import query as query
    from bridge.live.handles import Dialog as Dialog
    from bridge.live.handles import DialogError as DialogError
    from bridge.live.handles import Message as Message
    from bridge.live.handles import PromptHandle as PromptHandle
    from bridge.live.journal import JournalError as JournalError
    from bridge.live.otel import use_tracer_provider as use_tracer_provider
    from bridge.live.pool import Pool as Pool
    from bridge.live.pool import open_pool as open_pool
    from bridge.live.pool_handle import PoolHandle as PoolHandle
    from bridge.live.protocols import BridgeAPI as BridgeAPI
    from bridge.live.protocols import DialogAPI as DialogAPI
    from bridge.live.protocols import PromptHandleAPI as PromptHandleAPI
    from bridge.live.steering import EngineQuestionError as EngineQuestionError
    from bridge.live.supervisor import Bridge as Bridge
    from bridge.profiles.command import CommandProfile as CommandProfile
    from bridge.profiles.command import ProfileError as ProfileError
    from bridge.profiles.conversation import list_conversations as list_conversations
    from bridge.profiles.conversation import remove_conversation as remove_conversation
    from bridge.profiles.limits import Limits as Limits
    from bridge.profiles.pi import PiProfile as PiProfile
    from bridge.profiles.pi import scripted_profile as scripted_profile
    from bridge.profiles.sandbox import Sandbox as Sandbox

#: Where each public name lives.
_HOMES = {
    "Bridge": "bridge.live.supervisor",
    "BridgeAPI": "bridge.live.protocols",
    "BridgeClosedError": "bridge.live.aio",
    "BridgeConfig": "bridge.core.config",
    "CommandProfile": "bridge.profiles.command",
    "Dialog": "bridge.live.handles",
    "DialogAPI": "bridge.live.protocols",
    "DialogError": "bridge.live.handles",
    "EngineQuestionError": "bridge.live.steering",
    "JournalError": "bridge.live.journal",
    "Limits": "bridge.profiles.limits",
    "PiProfile": "bridge.profiles.pi",
    "Pool": "bridge.live.pool",
    "PoolHandle": "bridge.live.pool_handle",
    "PoolPromptOptions": "bridge.core.prompts",
    "ProfileError": "bridge.profiles.command",
    "PromptHandle": "bridge.live.handles",
    "PromptHandleAPI": "bridge.live.protocols",
    "PromptOptions": "bridge.core.prompts",
    "RayPromptOptions": "bridge.core.prompts",
    "Reason": "bridge.core.words",
    "Receipt": "bridge.core.receipts",
    "RunOptions": "bridge.core.prompts",
    "Sandbox": "bridge.profiles.sandbox",
    "State": "bridge.core.words",
    "open_bridge": "bridge.live.api",
    "open_pool": "bridge.live.pool",
    "query": "bridge.live.api",
    "list_conversations": "bridge.profiles.conversation",
    "remove_conversation": "bridge.profiles.conversation",
    "use_tracer_provider": "bridge.live.otel",
    "Message": "bridge.live.handles",
    "scripted_profile": "bridge.profiles.pi",
}

__all__ = sorted(_HOMES)

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'bridge' has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
