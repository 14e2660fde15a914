"""What the lifecycle asks the trio layer to do: spawn, write, stop the engine, ask the
evidence half for a receipt, deliver it, notify, signal, journal a note, answer a stop, close."""

from __future__ import annotations

from typing import Any

import attrs

from bridge.core.notices import Notice
from bridge.core.receipts import GiveUpWhy, Receipt

# --------------------------------------------------------------------------
# Actions


@attrs.frozen
class Spawn:
    """Prepare and launch engine ``generation``; answer with Spawned or SpawnFailed."""

    generation: int


@attrs.frozen
class Write:
    """Journal ``cmd``, feed it to the session, then write it to engine ``generation``.

    ``kind``: ``startup``, ``prompt``, ``clear``, ``abort``, ``ask``, ``dialog`` (an
    ``extension_ui_response``) or ``config`` (answered by
    :class:`~bridge.core.lifecycle.inputs.Configured` once every one of the batch is)."""

    generation: int
    cmd: dict[str, Any]
    kind: str
    request: str | None = None
    stream: bool = False
    events: bool = False
    submitted: float | None = None
    #: The prompt is traced: the session tells its event lines and usage (not its deltas).
    traced: bool = False


@attrs.frozen
class StopEngine:
    """Stop engine ``generation`` with the close ladder; its exit comes back as EngineExited."""

    generation: int
    #: False when the engine broke first (its exit then counts as a crash).
    requested: bool = True


@attrs.frozen
class GiveUp:
    """Ask the evidence half for ``request``'s receipt now (``why``: ack, settle, taint, exited)."""

    request: str
    why: GiveUpWhy


@attrs.frozen
class Deliver:
    """The receipt, to the controller and the journal; ``release``: the slot too."""

    receipt: Receipt
    release: bool = False


@attrs.frozen
class Notify:
    """A notice for the controller (the engine's life: :mod:`bridge.core.notices`)."""

    payload: Notice


@attrs.frozen
class Signal:
    """A signal for the controller and the journal."""

    payload: dict[str, Any]


@attrs.frozen
class Note:
    """A journal note (``stop``, ``closing``, ``engine-start``, ``seal-check``, ...)."""

    payload: dict[str, Any]


@attrs.frozen
class StopAnswer:
    """The answer to a Stop: the stop id, or None (queued, unknown or already settled)."""

    request: str
    stop: str | None


@attrs.frozen
class Answer:
    """The answer to an Ask: the engine's response, or ``error`` (down, closing, no answer)."""

    token: str
    response: dict[str, Any] | None = None
    error: str | None = None


@attrs.frozen
class AskDialog:
    """An extension dialog for the controller: the ``ask`` notice (``payload``) and, for the
    Python API, the dialog to hand to whoever waits for dialogs."""

    dialog: str
    request: str | None
    method: str
    fields: dict[str, Any]
    payload: dict[str, Any]


@attrs.frozen
class DialogEnded:
    """Dialog ``dialog`` got its one response (``answer``), given by ``by``
    (:mod:`bridge.core.dialogs`' ``BY_*``); ``payload`` is the ``dialog-end`` notice."""

    dialog: str
    by: str
    answer: dict[str, Any] | None
    payload: dict[str, Any]


@attrs.frozen
class DialogReply:
    """The answer to an AnswerDialog: None when it was taken, else why not."""

    dialog: str
    error: str | None = None


@attrs.frozen
class Closed:
    """Every accepted prompt has its receipt and no engine runs: the bridge is closed."""


Action = (
    Spawn
    | Write
    | StopEngine
    | GiveUp
    | Deliver
    | Notify
    | Signal
    | Note
    | StopAnswer
    | Answer
    | AskDialog
    | DialogEnded
    | DialogReply
    | Closed
)
