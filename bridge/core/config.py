"""The bridge's settings: :class:`BridgeConfig` (every limit and timeout a bridge keeps) and the
fixed bounds beside it (:data:`RECENT_IDS`, :data:`SIGNALS_PER_GENERATION`).

The vocabulary every layer shares: the doors (the Python API, the controllers, the CLI, the
pools) build a config and read it; the supervision (:mod:`bridge.core.supervision`) and its
lifecycle (:mod:`bridge.core.lifecycle`) act on it. It lives here, beside neither, so that a
door reads it without importing the lifecycle (``bridge acp`` answers ``initialize`` before a
session needs the rest; tests/test_layers.py: the doors import the core only through
:mod:`bridge.core.supervision` and the vocabulary modules). What each deadline does is the
lifecycle's (:data:`bridge.core.lifecycle.config.DEADLINES`).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from bridge.core.budget import Budget, budget_bound
from bridge.core.framing import DEFAULT_MAX_LINE
from bridge.core.stderr import STDERR_JOURNAL_MAX

#: Settled prompt ids remembered for duplicate detection and ``get_receipt``.
RECENT_IDS: Final = 65536
#: Signals sent to the controller per engine generation; the rest are counted.
SIGNALS_PER_GENERATION: Final = 1000

#: The default stall timeout, seconds (docs: guide/events.md#stalls says why this long).
DEFAULT_STALL_TIMEOUT: Final = 300.0
#: The default bound on a tool that shows nothing, seconds: a tool call during which the engine
#: writes no line for this long stops its prompt as a stall. Without it, a tool that blocks
#: (a ``sleep`` in a stopped Pi, a hung child) held its prompt for ever: the stall timer rests
#: while a tool runs and the settle timeout has no default (issue 42). Half an hour: a build or
#: a test suite that prints nothing for that long is rare, and its output (each
#: ``tool_execution_update``) counts as a line.
DEFAULT_TOOL_TIMEOUT: Final = 1800.0
#: The default byte bound of the prompts waiting for the slot (:attr:`BridgeConfig.queue_bytes`):
#: four prompts of the most a prompt may be (:func:`~bridge.core.framing.prompt_room`: 32 MiB
#: under the 64 MiB line limit), or any number of everyday ones.
DEFAULT_QUEUE_BYTES: Final = 128 * 1024 * 1024
#: The default time a controller has to answer an extension dialog, seconds.
DEFAULT_DIALOG_TIMEOUT: Final = 120.0


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be more than 0, got {value!r}")


@attrs.define
class BridgeConfig:
    """Limits and timeouts. Every wait the bridge does is bounded by one of these."""

    #: Prompts waiting for the slot (beyond it: ``rejected``/``queue-full``).
    queue_max: int = attrs.field(default=64, validator=_positive)
    #: The bytes of the prompts waiting for the slot, their texts and images together (a
    #: queued prompt holds its whole text): one that would take them past this is
    #: ``rejected``/``queue-full`` too, as is one bigger than it on its own (issue 42).
    queue_bytes: int = attrs.field(default=DEFAULT_QUEUE_BYTES, validator=_positive)
    #: Sent prompt -> its ack. Past it: ``delivery-unknown``/``no-ack``, recycle.
    ack_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: A prompt's own settle timeout (None: wait for the engine). Per prompt too.
    settle_timeout: float | None = attrs.field(default=None, validator=attrs.validators.optional(_positive))
    #: No engine line for this long while the held prompt's run waits on the model (not
    #: while a tool runs; a retry's announced wait is added): stop it, ``failed``/``stalled``.
    #: None: no stall detection. Per prompt too.
    stall_timeout: float | None = attrs.field(default=DEFAULT_STALL_TIMEOUT)

    @stall_timeout.validator
    def _stall_positive(self, attribute: Any, value: float | None) -> None:
        if value is not None:
            _positive(self, attribute, value)

    #: No engine line for this long while one of the held prompt's tools runs: stop it as a
    #: stall (``failed``/``stalled``). None: a tool may run silent for ever. It rides on the
    #: stall deadline: with no stall timeout there is none either.
    tool_timeout: float | None = attrs.field(default=DEFAULT_TOOL_TIMEOUT)

    @tool_timeout.validator
    def _tool_positive(self, attribute: Any, value: float | None) -> None:
        if value is not None:
            _positive(self, attribute, value)

    #: After a stop (the controller's, or the one a settle timeout or a stall sends), how long
    #: to wait for the run to settle before giving up.
    stop_grace: float = attrs.field(default=5.0, validator=_positive)
    #: After an overlap / gap / bad disposition, how long the held slot waits for
    #: its own run to settle before it is given up.
    taint_grace: float = attrs.field(default=5.0, validator=_positive)
    #: A write to the engine's stdin (a stuck engine stops reading).
    write_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Spawn -> the seal check's responses.
    startup_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: "refuse": an engine that fails the seal check is not used; "warn": it is,
    #: with a signal (for recording seal failures on purpose).
    seal_check: str = attrs.field(default="refuse", validator=attrs.validators.in_(("refuse", "warn")))
    #: Send the profile's clearing command before each ``abort``.
    stop_clears_queue: bool = True
    #: Waits between restarts after crashes (the last one repeats).
    restart_backoff: tuple[float, ...] = (0.0, 0.25, 1.0, 2.0, 4.0)
    #: This many unrequested engine exits (or start-up checks not answered in time) within
    #: ``crash_window`` seconds: down. (A check the engine answered with a refusal is not
    #: counted: it is down at once, see :mod:`bridge.core.lifecycle`.)
    crash_limit: int = attrs.field(default=5, validator=_positive)
    crash_window: float = attrs.field(default=60.0, validator=_positive)
    #: Closing: how long the stopped prompt may take to settle.
    close_grace: float = attrs.field(default=5.0, validator=_positive)
    #: The close ladder's rungs: after closing stdin, after SIGTERM.
    stdin_grace: float = attrs.field(default=2.0, validator=_positive)
    term_grace: float = attrs.field(default=2.0, validator=_positive)
    max_line: int = attrs.field(default=DEFAULT_MAX_LINE, validator=_positive)
    #: How long an extension dialog waits for the controller's answer (less if the
    #: extension gave it a shorter timeout of its own); then it is answered ``cancelled``.
    dialog_timeout: float = attrs.field(default=DEFAULT_DIALOG_TIMEOUT, validator=_positive)
    #: The thinking level every prompt asks for unless it or a Configure says otherwise (None:
    #: the engine's own).
    thinking: str | None = None
    journal_full: bool = False
    #: Characters of one engine generation's stderr the journal holds (the first ones, and
    #: the last lines at its exit, with a ``stderr-dropped`` note; :mod:`bridge.core.stderr`).
    #: None: all of it.
    stderr_journal_max: int | None = attrs.field(default=STDERR_JOURNAL_MAX)
    #: Retention in the default journal folder (:mod:`bridge.live.retention`): journals older
    #: than this many days, and the oldest past this many MiB together, are removed when a
    #: bridge opens a new one there. None: ``$PI_BRIDGE_JOURNAL_KEEP_DAYS`` / ``_MB``, else
    #: 30 days and 1024 MiB; 0: no bound.
    journal_keep_days: float | None = None
    journal_keep_mb: float | None = None
    #: The named conversation every engine resumes (:mod:`bridge.core.conversation`; None:
    #: each engine starts its own). Set by ``open_bridge(conversation=...)``; with it an
    #: engine restart keeps the conversation (``started``: ``newConversation: false``).
    conversation: str | None = None
    #: What each prompt may spend unless it says (``submit(budget_usd=, budget_tokens=)``), and
    #: what all the bridge's prompts together may (:mod:`bridge.core.budget`). None: no bound.
    prompt_budget_usd: float | None = attrs.field(default=None, validator=budget_bound)
    prompt_budget_tokens: int | None = attrs.field(default=None, validator=budget_bound)
    total_budget_usd: float | None = attrs.field(default=None, validator=budget_bound)
    total_budget_tokens: int | None = attrs.field(default=None, validator=budget_bound)

    @property
    def prompt_budget(self) -> Budget:
        return Budget(self.prompt_budget_usd, self.prompt_budget_tokens)

    @property
    def total_budget(self) -> Budget:
        return Budget(self.total_budget_usd, self.total_budget_tokens)

    @stderr_journal_max.validator
    def _stderr_positive(self, attribute: Any, value: int | None) -> None:
        if value is not None:
            _positive(self, attribute, value)
