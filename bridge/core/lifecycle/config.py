"""The lifecycle's deadlines (:data:`DEADLINES`; its settings are the bridge's
:class:`~bridge.core.config.BridgeConfig`, named here too): what
each passing deadline does is the handler :class:`~bridge.core.lifecycle.machine.Lifecycle`'s
``_deadlines`` table gives it (``dialog``'s in :mod:`bridge.core.lifecycle.extension_dialogs`,
``busy``'s and ``config``'s in :mod:`bridge.core.lifecycle.configuring`, ``ask``'s in
:mod:`bridge.core.lifecycle.questions`), in this table's words."""

from __future__ import annotations

from typing import Final

# The settings themselves are the bridge's (:mod:`bridge.core.config`), read by every layer;
# named here too, as the lifecycle's modules have always imported them.
from bridge.core.config import (
    DEFAULT_DIALOG_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
    RECENT_IDS,
    SIGNALS_PER_GENERATION,
    BridgeConfig,
)

__all__ = [
    "DEADLINES",
    "DEFAULT_DIALOG_TIMEOUT",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_TOOL_TIMEOUT",
    "HELD_DEADLINES",
    "RECENT_IDS",
    "SIGNALS_PER_GENERATION",
    "BridgeConfig",
]

#: The deadlines, and what happens when each passes:
#:
#: ``dialog``   an extension dialog's timeout passed unanswered: answered ``cancelled``
#: ``busy``     an aborted compaction was not answered: the engine is replaced
#: ``ask``      a question written to the engine was not answered: answered with an error
#: ``config``   the held prompt's configuration was not answered: ``rejected``/``config``, recycle
#: ``ack``      the held prompt was written and not acked: give up (``no-ack``), recycle
#: ``settle``   the held prompt's own timeout: send a stop (``timeout``), arm ``stop``
#: ``stall``    the held prompt's run showed nothing for its stall timeout while it waited on
#:              the model: a ``stalled`` signal, a stop (``stall``), arm ``stop``. Moved on by
#:              every :class:`~bridge.core.lifecycle.inputs.Activity`
#: ``stop``     a stop (the controller's, a timeout's, a stall's, a budget's) was not obeyed: give up
#:              (``settle-timeout``), recycle
#: ``taint``    an unsealed engine's held prompt did not settle: give up (the taint)
#: ``close``    closing, the stopped prompt did not settle: stop the engine
#: ``startup``  the start-up check was not answered: a failed check
#: ``backoff``  the wait before respawning after crashes is over: spawn
#: ``drain``    shutdown's bound passed: closing, the held prompt stopped (``timeout``)
DEADLINES: Final = (
    "dialog",
    "busy",
    "ask",
    "config",
    "ack",
    "settle",
    "stall",
    "stop",
    "taint",
    "close",
    "startup",
    "backoff",
    "drain",
)
HELD_DEADLINES: Final = ("config", "ack", "settle", "stall", "stop", "taint", "close")
