"""Receipts: what became of one prompt, with the evidence (SPEC §5).

Every prompt the bridge accepts gets exactly one receipt. The states and
reasons are a closed vocabulary, listed here once:

==================  ===============================================================
finished            (no reason) the slot's own run settled after ``stop``,
                    ``length`` or ``toolUse``
failed              (no reason) the run ended in ``error``; ``nativeError`` says why
failed              ``interrupted``: aborted by this controller's stop (``stop``)
failed              ``timeout``, ``closing``, ``stalled``, ``budget``: aborted by the bridge's
                    own stop (the prompt's timeout or the drain bound; closing; a stall;
                    a spend past its budget)
rejected            ``engine``, ``queue-full``, ``cancelled``, ``closing``,
                    ``engine-down``, ``config``, ``budget``, ``bridge-lost``: certainly
                    not delivered
delivery-unknown    ``ack-without-start``, ``no-ack``, ``engine-exited``, ``node-lost``
outcome-unknown     the seed's ``aborted-without-stop``, ``no-final-assistant-message``,
                    ``unrecognised-stop-reason``; the bridge's ``overlap``, ``gap``,
                    ``disposition``, ``engine-exited``, ``settle-timeout``, ``node-lost``
pending             replay only: the transcript does not finish the prompt's story
==================  ===============================================================

The JSON form uses camelCase keys (``nativeError``, ``ackIdx``, ...) like the
engine's protocol; the :func:`~bridge.core.wire.form` under the class declares it, and
``structure(unstructure(r)) == r`` for every receipt (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import inf
from typing import Any, Final, Literal

import attrs
from cattrs.gen import make_dict_structure_fn, override

from bridge.core.steering import EngineConfig
from bridge.core.wire import Wire, converter, form
from bridge.core.words import Reason, RequestId, State, StopBy

#: The reasons each state admits (None: no reason).
REASONS: Final[dict[State, frozenset[Reason | None]]] = {
    State.FINISHED: frozenset({None}),
    State.FAILED: frozenset({None, Reason.INTERRUPTED, Reason.TIMEOUT, Reason.CLOSING, Reason.STALLED, Reason.BUDGET}),
    State.REJECTED: frozenset(
        {
            Reason.ENGINE,
            Reason.QUEUE_FULL,
            Reason.CANCELLED,
            Reason.CLOSING,
            Reason.ENGINE_DOWN,
            Reason.CONFIG,
            Reason.BUDGET,
            Reason.BRIDGE_LOST,
        }
    ),
    State.DELIVERY_UNKNOWN: frozenset(
        {Reason.ACK_WITHOUT_START, Reason.NO_ACK, Reason.ENGINE_EXITED, Reason.NODE_LOST}
    ),
    State.OUTCOME_UNKNOWN: frozenset(
        {
            Reason.ABORTED_WITHOUT_STOP,
            Reason.NO_FINAL_ASSISTANT_MESSAGE,
            Reason.UNRECOGNISED_STOP_REASON,
            Reason.OVERLAP,
            Reason.GAP,
            Reason.DISPOSITION,
            Reason.ENGINE_EXITED,
            Reason.SETTLE_TIMEOUT,
            Reason.NODE_LOST,
        }
    ),
    State.PENDING: frozenset({None}),
}
#: A receipt's ``(state, reason)``.
Verdict = tuple[State, Reason | None]

#: A deadline that passed for a held prompt: no ack; the stop after a timeout not obeyed; a
#: tainted run that never settled.
Deadline = Literal["ack", "settle", "taint"]
#: Why the lifecycle stops waiting for a held prompt's evidence: a deadline, or the engine's exit.
GiveUpWhy = Literal[Deadline, "exited"]
GIVE_UP_WHYS: Final[tuple[GiveUpWhy, ...]] = ("ack", "settle", "taint", "exited")


def verdict_problem(state: Any, reason: Any) -> str | None:
    """Why ``(state, reason)`` is no receipt's verdict (:data:`REASONS`), in words; None when it
    is one. Words from a file arrive as bare strings: a StrEnum hashes and compares as its word,
    and anything unhashable is no word of ours."""
    try:
        reasons = REASONS.get(state)
        if reasons is None:
            return f"unknown receipt state {state!r}"
        if reason not in reasons:
            return f"reason {reason!r} does not go with state {state!r}"
    except TypeError:
        return f"unknown receipt state {state!r} or reason {reason!r}"
    return None


#: The receipt's camelCase JSON keys (the engine's protocol's style).
_WIRE_NAMES: Final = {
    "native_error": "nativeError",
    "ack_idx": "ackIdx",
    "working_idx": "workingIdx",
    "settle_idx": "settleIdx",
}

#: The usage's camelCase JSON keys (Pi's own ``usage`` words).
_USAGE_NAMES: Final = {"cache_read": "cacheRead", "cache_write": "cacheWrite", "total_tokens": "totalTokens"}


@attrs.frozen
class Times:
    """A receipt's ``times``: seconds since the bridge started, as the trio layer saw them
    (None: that moment did not come)."""

    submitted: float | None = None
    sent: float | None = None
    acked: float | None = None
    working: float | None = None
    settled: float | None = None


@form(rename=_USAGE_NAMES)
@attrs.frozen
class Usage(Wire):
    """What a prompt's run cost: Pi's ``usage`` of every assistant message of the run, summed.

    Failed attempts that Pi retried by itself are included (a provider that answered an
    attempt with an error usually reports no tokens for it, but one that streamed and then
    failed does): ``messages`` counts the assistant messages summed. ``model`` and
    ``provider`` are the last message's (the one that answered). ``cost`` is Pi's total, in
    the currency of the model's configured prices (Pi's ``cost.total``).
    """

    input: int = 0
    output: int = 0
    #: Wire: ``cacheRead``.
    cache_read: int = 0
    #: Wire: ``cacheWrite``.
    cache_write: int = 0
    #: Wire: ``totalTokens``.
    total_tokens: int = 0
    cost: float = 0.0
    messages: int = 0
    model: str | None = None
    provider: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        return converter.structure(data, cls)

    def plus(self, other: Usage) -> Usage:
        """Two usages summed (a journal's prompts, say); model and provider are ``other``'s when it has them."""
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            total_tokens=self.total_tokens + other.total_tokens,
            cost=round(self.cost + other.cost, 12),
            messages=self.messages + other.messages,
            model=other.model or self.model,
            provider=other.provider or self.provider,
        )

    def add(self, message: dict[str, Any]) -> Usage:
        """This usage with one more assistant message (Pi's message object) added."""
        usage = message.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        cost = usage.get("cost")
        raw = cost.get("total") if isinstance(cost, dict) else None
        total = float(raw) if isinstance(raw, (int, float)) and _number(raw) else 0.0
        model, provider = message.get("model"), message.get("provider")
        return Usage(
            input=self.input + _count(usage.get("input")),
            output=self.output + _count(usage.get("output")),
            cache_read=self.cache_read + _count(usage.get("cacheRead")),
            cache_write=self.cache_write + _count(usage.get("cacheWrite")),
            total_tokens=self.total_tokens + _count(usage.get("totalTokens")),
            # Rounded so that a sum of prices reads as the prices do (no 0.30000000000000004).
            cost=round(self.cost + total, 12),
            messages=self.messages + 1,
            model=model if isinstance(model, str) else self.model,
            provider=provider if isinstance(provider, str) else self.provider,
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != inf


def _count(value: Any) -> int:
    """A token count from the engine: a non-negative number, else 0."""
    return int(value) if _number(value) and value > 0 else 0


@form()
@attrs.frozen
class Where(Wire):
    """Where a prompt's engine ran, for a prompt run by a pool across machines (a Ray pool,
    :mod:`bridge.ray`): the node, the actor and the journal, which stays on that node."""

    #: The node's id (Ray's hex node id).
    node: str
    #: The node's address (its IP), when known.
    address: str | None = None
    #: The actor's id (Ray's hex actor id), when known.
    actor: str | None = None
    #: The journal's path on that node (None: the bridge there wrote none).
    journal: str | None = None

    def __str__(self) -> str:
        at = f" ({self.address})" if self.address else ""
        return f"node {self.node[:12]}{at}"


@form(rename=_WIRE_NAMES, omit_default=["where"])
@attrs.frozen
class Receipt(Wire):
    """What became of one prompt: its :attr:`state` (a :class:`~bridge.core.words.State`) and
    :attr:`reason` (a :class:`~bridge.core.words.Reason`, or None), with the evidence.

    ``str(receipt)`` is one line a person reads (:func:`describe`), ``repr`` every field;
    ``to_json()`` is the wire form, a dict ready for ``json.dumps`` (camelCase keys:
    ``native_error`` is ``nativeError``, ``ack_idx`` ``ackIdx``, ...)."""

    #: The prompt's id (wire: ``request``). None only in replay, for a journal's prompt that
    #: had no id.
    request: RequestId | None
    #: What became of the prompt (wire: ``state``).
    state: State
    #: Why (wire: ``reason``); None for ``finished`` and a plain ``failed``.
    reason: Reason | None = None
    #: The id of the first stop sent for the prompt while it was held (wire: ``stop``): the
    #: controller's, or the bridge's own (``timeout-N``, ``closing-N``, ...); None if none was.
    stop: RequestId | None = None
    #: The engine's own error text for a ``failed`` run, or the engine's exit and its last
    #: stderr lines (wire: ``nativeError``).
    native_error: str | None = None
    #: The tracker's id of the prompt's run, ``run-N`` (wire: ``run``).
    run: str | None = None
    #: The final assistant reply text of the slot's own run, when there is one (wire: ``reply``).
    reply: str | None = None
    #: The observation index of the prompt's ack (wire: ``ackIdx``).
    ack_idx: int | None = None
    #: The observation index at which the model got the prompt (wire: ``workingIdx``).
    working_idx: int | None = None
    #: The observation index of the settle that decided the receipt (wire: ``settleIdx``).
    settle_idx: int | None = None
    #: The ack's ``data.disposition``: ``started`` under the seal (wire: ``disposition``).
    disposition: str | None = None
    #: Overlap, gap and seal signals seen while the slot was held, as their JSON objects (at
    #: most 100, then a ``more-signals-not-kept`` marker; wire: ``signals``).
    signals: tuple[dict[str, Any], ...] = ()
    #: When it was submitted, sent, acked, working and settled (wire: ``times``).
    times: Times = Times()
    #: The engine process's pid (wire: ``pid``).
    pid: int | None = None
    #: The engine's generation: the Nth engine this bridge started (wire: ``generation``).
    generation: int | None = None
    #: Tokens and cost of the run (None: the prompt had no run of its own; wire: ``usage``).
    usage: Usage | None = None
    #: The model and thinking level the engine was verified to run it with (None: not known;
    #: wire: ``config``).
    config: EngineConfig | None = None
    #: Where the engine ran, set by a pool across machines (:class:`Where`; wire: ``where``,
    #: written only when set).
    where: Where | None = None

    def __attrs_post_init__(self) -> None:
        problem = verdict_problem(self.state, self.reason)
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Receipt:
        return converter.structure(data, cls)

    def __str__(self) -> str:
        """The receipt in one line a person reads (:func:`describe`: ``p1: failed (interrupted)
        [run-1; stop s1; 0.42 s]``); ``repr`` is every field (attrs')."""
        return describe(self)


# --------------------------------------------------------------------------
# The decision table: the one place a receipt's state and reason are decided.
#
# The evidence half (bridge/core/session.py) and the lifecycle (bridge/core/lifecycle/)
# each know some of a prompt's story; whichever learns the *trigger* (the slot's
# run settled, the engine refused or exited, a deadline passed, the prompt was
# never written) gathers what is known into :class:`Facts` and asks
# :func:`decide`. The rows are tried in order; the first that matches decides.
# docs: design/receipts.md is this table in words, row by row, with the
# reasons for its order; tests/test_decision.py checks every row.

#: Who sent the stop linked to a prompt, and the reason its aborted run gets.
STOP_REASONS: Final[dict[StopBy, Reason]] = {
    StopBy.CONTROLLER: Reason.INTERRUPTED,
    StopBy.TIMEOUT: Reason.TIMEOUT,
    StopBy.CLOSING: Reason.CLOSING,
    StopBy.STALL: Reason.STALLED,
    StopBy.BUDGET: Reason.BUDGET,
}

#: The tracker's settlements that our own stop may have caused (Pi aborted in a
#: retry backoff writes no aborted message; SPEC §2).
_ABORTABLE: Final[frozenset[Verdict]] = frozenset(
    {(State.FAILED, None), (State.OUTCOME_UNKNOWN, Reason.NO_FINAL_ASSISTANT_MESSAGE)}
)


@attrs.frozen
class Facts:
    """What is known of one prompt when its receipt is decided: the table's columns."""

    #: Never written to the engine, and why: queue-full, cancelled, closing, engine-down.
    unsent: Reason | None = None
    #: Replay only: the receipt the journal recorded before the prompt's release.
    recorded: Verdict | None = None
    #: The engine answered the prompt ``success: false`` before any ack.
    refused: bool = False
    #: A deadline passed: ``ack`` (no ack), ``settle`` (the stop after a timeout
    #: was not obeyed), ``taint`` (a tainted slot's own run did not settle).
    gave_up: Deadline | None = None
    #: The engine's first taint while the prompt was held: ``overlap``, ``gap``,
    #: ``disposition`` or ``aborted-without-stop``.
    taint: Reason | None = None
    #: The engine exited before anything else decided.
    exited: bool = False
    #: The model had the prompt (the tracker's ``working``).
    working: bool = False
    #: The tracker's settlement of the slot: the seed's ``classify``.
    tracker: Verdict | None = None
    #: The slot's own run (or its loose settle) settled; with a taint this is the trigger.
    own_settled: bool = False
    #: Whose stop is the prompt's own (the first sent while it was held): ``controller``,
    #: ``timeout``, ``closing``, ``stall``, ``budget``; None: no stop of its own was sent.
    stop_by: StopBy | None = None
    #: ``agent_settled.aborted`` of the settle that closed the slot's run: JSON ``true`` only
    #: (any other value is no evidence that our stop aborted it).
    aborted: bool = False
    #: A pool across machines lost the node (or the actor) the prompt was handed to, before
    #: its receipt came back (:mod:`bridge.core.dispatch`); ``working`` then says the actor had
    #: reported the prompt's run started.
    lost: bool = False


def decide(f: Facts) -> Verdict:
    """The receipt's ``(state, reason)`` for what is known
    (docs: design/receipts.md), row by row (the first row that matches decides). Raises
    ValueError when nothing in ``f`` is a trigger (a bug in the caller)."""
    if f.unsent is not None:  # row 1: never written
        return State.REJECTED, f.unsent
    if f.recorded is not None:  # row 2: replay takes the live bridge's decision
        return f.recorded
    if f.refused:  # row 3: the engine said no
        return State.REJECTED, Reason.ENGINE
    if f.gave_up == "ack":  # row 4: no ack in time, whatever else came
        return State.DELIVERY_UNKNOWN, Reason.NO_ACK
    if f.gave_up == "settle":  # row 5: our stop after a timeout was not obeyed
        return State.OUTCOME_UNKNOWN, Reason.SETTLE_TIMEOUT
    if f.taint is not None and (f.own_settled or f.exited or f.gave_up == "taint" or f.tracker is not None):
        return State.OUTCOME_UNKNOWN, f.taint  # row 6: tainted evidence settles nothing
    if f.gave_up == "taint":  # row 7
        return State.OUTCOME_UNKNOWN, Reason.OVERLAP
    if f.exited:  # rows 8, 9: the engine died first
        return (State.OUTCOME_UNKNOWN if f.working else State.DELIVERY_UNKNOWN), Reason.ENGINE_EXITED
    if f.tracker is not None:
        if f.tracker == (State.FAILED, Reason.INTERRUPTED):
            if f.stop_by is None:
                # row 10: the seed linked a stop sent before the prompt was (its stopLink spans
                # the attach); none was the prompt's own, so who stopped the run is not known.
                return State.OUTCOME_UNKNOWN, Reason.ABORTED_WITHOUT_STOP
            return State.FAILED, STOP_REASONS[f.stop_by]  # row 11: the seed saw our stop's abort
        if f.tracker in _ABORTABLE and f.stop_by is not None and f.aborted:  # row 12: aborted in a backoff
            return State.FAILED, STOP_REASONS[f.stop_by]
        return f.tracker  # row 13: the seed's own verdict
    if f.lost:  # rows 14, 15: the node went with the prompt on it
        return (State.OUTCOME_UNKNOWN if f.working else State.DELIVERY_UNKNOWN), Reason.NODE_LOST
    raise ValueError(f"no trigger to decide a receipt from: {f!r}")


def exit_status(code: int | None, signal: int | None) -> str:
    """An exit status in words: ``signal 9``, ``code 1`` (never a ``None``)."""
    return f"signal {signal}" if signal is not None else f"code {code}" if code is not None else "status unknown"


def exit_words(code: int | None, signal: int | None, stderr: Sequence[str] = (), *, when: str = "") -> str:
    """An engine's exit in words, with its last stderr lines: what a user needs to fix it
    (the ``nativeError`` of an ``engine-exited`` receipt and of ``engine-down``)."""
    how = exit_status(code, signal)
    tail = " | ".join(line for line in stderr if line.strip())
    return f"the engine exited{when} ({how})" + (f": {tail}" if tail else "")


# A receipt read back (replay, the soak's checks) takes the same names.
converter.register_structure_hook(
    Usage,
    make_dict_structure_fn(Usage, converter, **{n: override(rename=w) for n, w in _USAGE_NAMES.items()}),  # type: ignore[arg-type]
)
converter.register_structure_hook(
    Receipt,
    make_dict_structure_fn(Receipt, converter, **{n: override(rename=w) for n, w in _WIRE_NAMES.items()}),  # type: ignore[arg-type]
)


def describe(r: Receipt) -> str:
    """One receipt in a line a person reads."""
    head = f"{r.request}: {r.state}" + (f" ({r.reason})" if r.reason else "")
    parts = []
    if r.run:
        parts.append(r.run)
    if r.stop:
        parts.append(f"stop {r.stop}")
    if r.times.sent is not None and r.times.settled is not None:
        parts.append(f"{r.times.settled - r.times.sent:.2f} s")
    if r.signals:
        parts.append("signals " + ", ".join(f"{s.get('signal')}@{s.get('idx')}" for s in r.signals))
    if r.usage is not None and r.usage.messages:
        parts.append(usage_words(r.usage))
    if r.native_error:
        # One line: the engine's lines joined as exit_words joins them (Pi's errors can span five).
        error = " | ".join(line.strip() for line in r.native_error.splitlines() if line.strip())
        parts.append(f"error: {error[:200]}")
    return head + (f" [{'; '.join(parts)}]" if parts else "")


def usage_words(u: Usage) -> str:
    """A run's usage in a line a person reads: tokens in / out (cache), cost, who answered."""
    cache = f", cache {u.cache_read} read / {u.cache_write} written" if u.cache_read or u.cache_write else ""
    who = f" from {u.provider}/{u.model}" if u.model else ""
    calls = f" over {u.messages} model calls" if u.messages > 1 else ""
    return f"{u.input} in / {u.output} out tokens{cache}, cost {u.cost:g}{calls}{who}"
