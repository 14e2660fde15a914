"""What :func:`~bridge.live.api.open_bridge` gives, as a user's type checker sees it: one
protocol for the bridge, one for a prompt's handle and one for a dialog, that the trio classes
(:class:`~bridge.live.supervisor.Bridge`, :class:`~bridge.live.handles.PromptHandle`,
:class:`~bridge.live.handles.Dialog`) and the asyncio ones (:mod:`bridge.live.aio`) both
satisfy, with every parameter written out (a prompt's options once, for all:
:class:`~bridge.core.prompts.PromptOptions`).

Why protocols and not the trio class: under asyncio the block gets
:class:`~bridge.live.aio.AsyncioBridge`, which is not a :class:`Bridge
<bridge.live.supervisor.Bridge>`; annotated as the trio class, a user's ``mypy --strict`` would
check asyncio code against calls it does not make (``signals()`` is a trio channel there, an
async iterator here). What both have is what is here; what only the trio bridge has (its
channels' ``clone()``, the ``listeners`` the CLI's controllers use) stays on the trio class.
``tests/test_typed.py`` checks that both sides keep these signatures, and runs a user's
``mypy --strict`` over a program on each library.

Nothing here runs: these are types (``typing.Protocol``), for annotations, e.g.
``async def ask(bridge: BridgeAPI) -> Receipt``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, Unpack

if TYPE_CHECKING:
    from bridge.core.config import BridgeConfig
    from bridge.core.progress import ProgressEvent
    from bridge.core.prompts import PromptOptions
    from bridge.core.receipts import Receipt
    from bridge.core.supervision import Collected
    from bridge.live.engine import Engine
    from bridge.live.handles import Message
    from bridge.live.journal import Journal
    from bridge.profiles.command import EngineProfile

__all__ = ["BridgeAPI", "DialogAPI", "PromptHandleAPI"]


class PromptHandleAPI(Protocol):
    """A submitted prompt (what :meth:`BridgeAPI.submit` returns). Its receipt comes exactly once."""

    @property
    def request(self) -> str:
        """The prompt's id (``p1``, or the ``request`` given to ``submit``)."""
        ...

    @property
    def receipt_nowait(self) -> Receipt | None:
        """The receipt if it has come, else None."""
        ...

    async def receipt(self) -> Receipt:
        """Wait for the receipt. Ends when the bridge settles it (it always does)."""
        ...

    def text(self) -> AsyncIterator[str]:
        """The reply text as it streams (``submit(..., stream=True)``); read once. Ends at the receipt."""
        ...

    def events(self) -> AsyncIterator[ProgressEvent]:
        """What the engine does for this prompt, as it happens (``submit(..., events=True)``);
        read once. Ends at the receipt."""
        ...

    def messages(self) -> AsyncIterator[Message]:
        """Its events as they happen, then its receipt, last (``submit(..., events=True)``).
        Ends after the receipt."""
        ...

    async def stop(self) -> str | None:
        """Stop this prompt: returns at once with the stop's id, or None (it has its receipt)."""
        ...


class DialogAPI(Protocol):
    """An extension dialog to answer (what :meth:`BridgeAPI.dialogs` yields)."""

    @property
    def dialog(self) -> str:
        """The bridge's id for it (``dialog-N``)."""
        ...

    @property
    def request(self) -> str | None:
        """The prompt it belongs to, or None."""
        ...

    @property
    def method(self) -> str:
        """``select``, ``confirm``, ``input`` or ``editor``."""
        ...

    @property
    def fields(self) -> dict[str, Any]:
        """Its fields as Pi sent them, bounded: ``title``, ``options``, ``message``, ``placeholder``, ``prefill``, ``timeout``."""
        ...

    @property
    def timeout(self) -> float:
        """Seconds the controller has to answer."""
        ...

    @property
    def by(self) -> str | None:
        """Who gave it its response (``controller``, ``timeout``, ``stop``, ...), once ended."""
        ...

    @property
    def response(self) -> dict[str, Any] | None:
        """The response written to the engine, once ended (None: none was, its engine was gone)."""
        ...

    async def answer(self, value: str | None = None, *, confirmed: bool | None = None, cancelled: bool = False) -> None:
        """Answer it: ``value`` (select, input, editor), ``confirmed`` (confirm) or
        ``cancelled=True`` (any). Returns at once; raises
        :class:`~bridge.live.handles.DialogError` when it has ended or the answer does not fit."""
        ...

    async def wait_ended(self) -> str:
        """Wait until it has ended; returns who ended it. Ends at the latest at its timeout."""
        ...


class BridgeAPI(Protocol):
    """The bridge inside ``async with open_bridge(...) as bridge``, under trio and asyncio alike.

    :class:`~bridge.live.supervisor.Bridge`'s docstrings say what each call does; these are its
    signatures, which :class:`~bridge.live.aio.AsyncioBridge` has too.
    """

    # -- what it runs with -------------------------------------------------------------

    @property
    def profile(self) -> EngineProfile:
        """The engine profile it was opened on."""
        ...

    @property
    def config(self) -> BridgeConfig:
        """Its settings (timeouts, limits)."""
        ...

    @property
    def journal(self) -> Journal | None:
        """Its journal (``bridge.journal.path``), or None without one."""
        ...

    def collected(self) -> Collected:
        """The tracker's outputs so far (``overlaps``, ``working``, ``settled``), kept with
        ``open_bridge(..., collect=True)`` (empty otherwise)."""
        ...

    @property
    def engine(self) -> Engine | None:
        """The current engine process (``.pid``, ``.alive``); None before the first prompt."""
        ...

    # -- prompts -----------------------------------------------------------------------

    def submit_nowait(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> PromptHandleAPI:
        """Accept a prompt; returns at once. It always gets a receipt (maybe at once: a rejection).
        Its options: :class:`~bridge.core.prompts.PromptOptions`."""
        ...

    async def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> PromptHandleAPI:
        """Accept a prompt (:meth:`submit_nowait`'s parameters); returns at once, or with a
        ledger once the ledger has it (fsynced)."""
        ...

    async def prompt(self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]) -> Receipt:
        """Submit and wait for the receipt. Ends when it comes (it always does); cancelled
        while it waits, it stops the prompt."""
        ...

    async def stop(self, request: str) -> str | None:
        """Stop a prompt; returns at once with the stop's id, or None (it has its receipt)."""
        ...

    async def send_raw(self, cmd: dict[str, Any]) -> None:
        """Write any command to the engine, around the slot rules (unseals it; for tests).
        Ends when the line is written, or after ``write_timeout``."""
        ...

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last ones settled."""
        ...

    def get_receipt(self, request: str) -> Receipt | None:
        """A recently settled prompt's receipt, or None."""
        ...

    async def receipt(self, request: str) -> Receipt:
        """``request``'s receipt: the ledger's, or a recently settled one; waited for while it is
        in flight. Ends when there is one; KeyError for an id nobody knows."""
        ...

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt. Ends when none is outstanding."""
        ...

    # -- steering ----------------------------------------------------------------------

    def configure(self, *, provider: str | None = None, model: str | None = None, thinking: str | None = None) -> None:
        """The model and thinking level for the prompts submitted from now on; returns at once."""
        ...

    def new_conversation(self) -> None:
        """A new conversation before the next prompt is written; returns at once."""
        ...

    def compact(self, instructions: str | None = None) -> None:
        """Compact the conversation before the next prompt is written; returns at once."""
        ...

    @property
    def no_prompt_follows(self) -> str | None:
        """Why no prompt can be submitted any more, or None while one can."""
        ...

    async def models(self) -> list[dict[str, Any]]:
        """What the engine offers. Ends when it answers, or raises
        :class:`~bridge.live.steering.EngineQuestionError`."""
        ...

    # -- what it says ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What runs: the engine, the held and queued prompts, the receipts given."""
        ...

    @property
    def receipts_issued(self) -> int:
        """Receipts given so far."""
        ...

    @property
    def down_reason(self) -> str | None:
        """Why the engine is down for good, or None."""
        ...

    @property
    def closing(self) -> bool:
        """The bridge is closing."""
        ...

    @property
    def generation(self) -> int:
        """How many engines it has started."""
        ...

    @property
    def journal_failed(self) -> str | None:
        """Why the journal could not be written, or None."""
        ...

    def signals(self, max_buffer: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """Every notification from now on (signals, engine events, receipts); ends when the
        bridge has closed."""
        ...

    def dialogs(self, max_buffer: int = 100) -> AsyncIterator[DialogAPI]:
        """The extension dialogs to answer, from now on; ends when the bridge has closed."""
        ...

    async def answer_dialog(
        self, dialog: str, *, value: str | None = None, confirmed: bool | None = None, cancelled: bool = False
    ) -> None:
        """Answer extension dialog ``dialog``; returns at once."""
        ...

    # -- closing -----------------------------------------------------------------------

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """No new prompts; the outstanding ones run to their receipts, then the bridge closes."""
        ...

    def close_now(self, why: str = "close", detail: str | None = None) -> None:
        """Begin closing at once (the held prompt is stopped, queued ones rejected)."""
        ...

    async def wait_closed(self) -> None:
        """Wait until the bridge has closed (after :meth:`shutdown`'s drain or :meth:`close_now`)."""
        ...

    async def aclose(self, *, drain: bool = False) -> None:
        """Close: every accepted prompt gets its receipt, then the engine stops. Ends when it has closed."""
        ...
