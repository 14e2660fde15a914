"""The vocabulary: every word the bridge says on the wire, as a string enum, listed once.

The values are the words of SPEC §4–§5 and the reference tracker (seed ``003``), unchanged: a
member *is* its string (:class:`enum.StrEnum`), so it compares equal to the bare word, orjson and
``json`` write it as the word, and the JSON the bridge reads and writes is exactly what it was
when these were bare strings. What the enums add is that a misspelt word is a type error
(``mypy --strict``), and a reader can find every word in one place.

- :class:`State` and :class:`Reason`: a receipt's state and reason (SPEC §5; which reasons go
  with which state is :data:`bridge.core.receipts.REASONS`).
- :class:`Signal`: the ``"signal"`` of a signal line (overlaps O1–O6 and ``aborted-without-stop``
  from the tracker; gaps, seal breaks, dispositions and diagnostics from the session; start-up,
  engine-down and journal failures from the lifecycle).
- :class:`Why`: the tracker's ``why`` on O1, O2 and O4 (seed ``003``'s strings) and
  :class:`Cause`: the ``cause`` of an O5. (The ``cause`` of an ``unsealed`` signal is the
  taint, which is a :class:`Reason`: ``overlap``, ``aborted-without-stop``, ``gap`` or
  ``disposition``.)
- :class:`StopBy`: whose stop aborted a run (SPEC §5: the controller's, a timeout's, closing's;
  and the bridge's stall detection, docs: guide/events.md#stalls; and its budgets,
  docs: guide/budgets-and-traces.md).
- :data:`RequestId`: a prompt's id: a non-empty string.
- :data:`THINKING_LEVELS`: Pi's thinking levels, as the bridge passes them on (its steering
  checks them: :mod:`bridge.core.steering`). Here, not there, so the command line's
  ``--thinking`` choices cost no attrs or cattrs to list.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, TypeAlias

#: A prompt's id (and a stop's): a non-empty string, as the controller gave it (``bridge serve``
#: refuses any other JSON value) or as the bridge made it (``p-1``, ``stop-1``). Replay takes
#: the ids a journal recorded, which the live bridge accepted under the same rule.
RequestId: TypeAlias = str

#: Pi 1.6.0's thinking levels (docs/rpc-commands.md, ``set_thinking_level``).
THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


class State(StrEnum):
    """What became of a prompt: a receipt's ``state``. A member is its word
    (``State.FINISHED == "finished"``), and prints as it. Which reasons go with which state:
    :data:`bridge.core.receipts.REASONS`; how one is decided: the docs' "How a receipt is
    decided"."""

    FINISHED = "finished"
    FAILED = "failed"
    REJECTED = "rejected"
    DELIVERY_UNKNOWN = "delivery-unknown"
    OUTCOME_UNKNOWN = "outcome-unknown"
    #: Replay only: the transcript does not finish the prompt's story.
    PENDING = "pending"


class Reason(StrEnum):
    """Why a receipt has its state: a receipt's ``reason`` (None for ``finished`` and a plain
    ``failed``). A member is its word (``Reason.NO_ACK == "no-ack"``). The reference
    tracker's words first, then the bridge's."""

    # failed
    INTERRUPTED = "interrupted"
    TIMEOUT = "timeout"
    CLOSING = "closing"
    #: The run went quiet while it waited on the model (``--stall-timeout``) and was stopped.
    STALLED = "stalled"
    #: The prompt's (or the bridge's) spend passed its budget and the bridge stopped the run
    #: (``failed``); the bridge's total was spent before the prompt was written (``rejected``).
    BUDGET = "budget"
    # rejected (CLOSING too)
    ENGINE = "engine"
    QUEUE_FULL = "queue-full"
    CANCELLED = "cancelled"
    ENGINE_DOWN = "engine-down"
    #: The model or thinking level the prompt asked for was refused, or not confirmed.
    CONFIG = "config"
    #: The bridge was lost (its process ended: SIGKILL, a crash, the machine) before it wrote
    #: the prompt; decided when a bridge opened on its ledger recovered it (issue 44).
    BRIDGE_LOST = "bridge-lost"
    # delivery-unknown
    ACK_WITHOUT_START = "ack-without-start"
    NO_ACK = "no-ack"
    ENGINE_EXITED = "engine-exited"
    # outcome-unknown (ENGINE_EXITED too): the seed's three, then the bridge's
    ABORTED_WITHOUT_STOP = "aborted-without-stop"
    NO_FINAL_ASSISTANT_MESSAGE = "no-final-assistant-message"
    UNRECOGNISED_STOP_REASON = "unrecognised-stop-reason"
    OVERLAP = "overlap"
    GAP = "gap"
    DISPOSITION = "disposition"
    SETTLE_TIMEOUT = "settle-timeout"
    #: Across machines (a Ray pool): the node (or the actor) the prompt's engine ran on was lost
    #: with the prompt on it; ``nativeError`` names the node. Delivery- or outcome-unknown.
    NODE_LOST = "node-lost"


class Signal(StrEnum):
    """The ``"signal"`` word of a signal (SPEC §4, §5)."""

    O1 = "O1"
    O2 = "O2"
    O3 = "O3"
    O4 = "O4"
    O5 = "O5"
    O6 = "O6"
    ABORTED_WITHOUT_STOP = "aborted-without-stop"
    #: A line that was not a JSON object: the evidence may be incomplete from here.
    GAP = "gap"
    #: The first overlap, gap or non-``started`` disposition on an engine.
    UNSEALED = "unsealed"
    DISPOSITION = "disposition"
    #: A ``prompt`` written (by ``send_raw``) while another prompt held the slot: the bridge's
    #: own signal, not the seed's (SPEC §4 keeps O1-O6 the seed's); it breaks the seal.
    SECOND_PROMPT = "second-prompt"
    SEAL_DIAGNOSTIC = "seal-diagnostic"
    SEAL_CHECK = "seal-check"
    ENGINE_DOWN = "engine-down"
    JOURNAL_FAILED = "journal-failed"
    SIGNALS_SUPPRESSED = "signals-suppressed"
    #: The held prompt's run showed nothing for the stall timeout while it waited on the model.
    STALLED = "stalled"
    MORE_SIGNALS_NOT_KEPT = "more-signals-not-kept"


#: The tracker's overlap signals, in the seed's order.
OVERLAPS = (Signal.O1, Signal.O2, Signal.O3, Signal.O4, Signal.O5, Signal.O6, Signal.ABORTED_WITHOUT_STOP)


class Why(StrEnum):
    """The tracker's ``why`` on O1, O2 and O4: seed ``003``'s strings, word for word."""

    NO_SLOT = "no slot held"
    BEFORE_ACK = "before the slot's ack"
    AFTER_SLOTS_RUN = "after the slot's run"
    SECOND_SETTLE = "a second settle for one ack"
    NOT_THE_SLOTS_RUN = "settle of a run that is not the slot's"
    SLOT_MOVED_ON = "the slot's run settled after the slot moved on"
    SETTLE_WITHOUT_START = "settle after the ack with no agent_start and no failure message"


class Cause(StrEnum):
    """The ``cause`` of an O5 (seed ``003``)."""

    QUEUE_UPDATE = "queue-update"
    UNCAUSED_QUEUE_UPDATE = "uncaused-queue-update"


class StopBy(StrEnum):
    """Whose stop aborted a run, and so which reason its receipt gets (SPEC §5)."""

    CONTROLLER = "controller"
    TIMEOUT = "timeout"
    CLOSING = "closing"
    #: The stall timeout's stop (``--stall-timeout``).
    STALL = "stall"
    #: The budget's stop: the prompt's (or the bridge's) spend passed its budget.
    BUDGET = "budget"
