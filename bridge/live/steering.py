"""The steering calls of a bridge (docs: guide/steering.md): the model and thinking level of the
prompts that follow, a new conversation, a compaction, the question of what models the engine
offers, and starting the engine at open (:meth:`Steering.start_engine`). Each is an input for
the supervision; none changes a prompt already accepted, and none is taken once no prompt can
follow.

:class:`~bridge.live.supervisor.Bridge` has them (a mixin of its own, for the size of one module).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import trio

from bridge.core.lifecycle import Answer, Ask, Compact, Configure, Input, Lifecycle, NewConversation, Open
from bridge.core.steering import Wanted, model_summary
from bridge.profiles.command import ProfileError


class EngineQuestionError(Exception):
    """A question for the engine (:meth:`Bridge.models`) could not be answered; the message says why."""


class Steering:
    """What :class:`~bridge.live.supervisor.Bridge` steers with."""

    # What it uses of the bridge (Bridge sets them).
    _asks: dict[str, trio.Event]
    _answers: dict[str, Answer]
    _ask_ids: Iterator[int]

    if TYPE_CHECKING:

        @property
        def lifecycle(self) -> Lifecycle: ...
        def _feed(self, event: Input) -> None: ...

        async def _wait_change(self) -> None:
            """Ends at the bridge's next change (see Bridge)."""

        @property
        def down_reason(self) -> str | None: ...

    def configure(self, *, provider: str | None = None, model: str | None = None, thinking: str | None = None) -> None:
        """The model (``provider`` and ``model`` together) and thinking level for the prompts
        submitted from now on; what is left None stays as it was. Applied to the engine, and
        verified, before each such prompt is written; a prompt's own ``provider``, ``model``
        and ``thinking`` go over these. Returns at once.

        Raises:
            ValueError: A model without its provider, an unknown thinking level (as
                :meth:`~bridge.live.supervisor.Bridge.submit_nowait`).
            RuntimeError: No prompt can follow (after :meth:`~bridge.live.supervisor.Bridge.shutdown`,
                or once the bridge closes: :attr:`no_prompt_follows`), as the other two
                steering calls do: it would change nothing."""
        wanted = Wanted(provider, model, thinking)
        self._steerable("configure")
        self._feed(Configure(wanted))

    @property
    def no_prompt_follows(self) -> str | None:
        """Why no prompt can be submitted any more (``after shutdown``, ``while the bridge
        closes``), or None while one can."""
        state = self.lifecycle.state
        if state.closing is not None or state.closed:
            return "while the bridge closes"
        return "after shutdown" if state.draining else None

    def _steerable(self, what: str) -> None:
        when = self.no_prompt_follows
        if when is not None:
            raise RuntimeError(
                f"{what} {when} changes nothing: it steers the prompts submitted after it, and none can be "
                "(the prompts already accepted run as they were submitted)"
            )

    async def start_engine(self) -> None:
        """Start the engine now, not at the first prompt, and wait for its start-up check
        (:class:`~bridge.core.lifecycle.Open`). Ends when the check has ended (bounded by
        ``startup_timeout``) or closing began. Raises :class:`ProfileError` -- the line ``bridge
        run`` prints -- when the launch was refused (the bridge is down: close it); a crash is
        retried at the next prompt, as any crash is."""
        self._feed(Open())
        while self.lifecycle.state.questions.opening is not None:
            await self._wait_change()
        if self.lifecycle.state.setup_failed:
            raise ProfileError(f"the engine cannot be set up: {self.down_reason}")

    async def models(self) -> list[dict[str, Any]]:
        """What the engine offers (Pi's ``get_available_models``): ``provider``, ``id``,
        ``name``, ``reasoning``, ``contextWindow``, ``maxTokens``, ``input`` each. Asked
        through the lifecycle (an engine is started for it if none runs). Ends when the engine
        answers, or with :class:`EngineQuestionError` when it cannot (down, closing, no answer
        within ``ack_timeout``, or a refusal).

        Returns:
            One dict per model the engine offers.

        Raises:
            EngineQuestionError: The engine is down, the bridge closes, no answer came within
                ``ack_timeout``, or the engine refused the question."""
        response = await self.ask({"type": "get_available_models"})
        if response.get("success") is not True:
            raise EngineQuestionError(f"the engine refused get_available_models: {response.get('error')}")
        data = response.get("data")
        listed = data.get("models") if isinstance(data, dict) else None
        models = [model_summary(m) for m in listed] if isinstance(listed, list) else []
        return [m for m in models if m is not None]

    async def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Write one command to the engine through the lifecycle's questions (its ``id`` is the
        bridge's; an engine is started for it if none runs) and return Pi's response as it came,
        ``success`` true or not. :meth:`models` asks this way; so does a pool moving a
        conversation to an idle engine it holds (:mod:`bridge.live.pool_moves`). Ends when the
        engine answers, or with :class:`EngineQuestionError` when it cannot (down, closing, no
        answer within ``ack_timeout``)."""
        token = f"ask-{next(self._ask_ids)}"
        done = self._asks[token] = trio.Event()
        self._feed(Ask(token, cmd))
        await done.wait()
        answer = self._answers.pop(token)
        if answer.error is not None:
            raise EngineQuestionError(answer.error)
        return dict(answer.response or {})

    def new_conversation(self) -> None:
        """Start a new conversation before the next prompt is written: Pi's ``new_session``
        (verified, with a ``get_state`` after it), or a fresh engine where Pi cancels it.
        Prompts already submitted keep the old conversation. Returns at once.

        Raises:
            RuntimeError: No prompt can follow (after shutdown, or while the bridge closes)."""
        self._steerable("new_conversation")
        self._feed(NewConversation())

    def compact(self, instructions: str | None = None) -> None:
        """Compact the conversation (Pi's ``compact``: the model summarizes it, with
        ``instructions`` if given) before the next prompt submitted is written. How it went is
        a ``compacted`` notice (:meth:`signals`); a refusal (Pi's "Nothing to compact") does not
        stop the prompt. A :meth:`new_conversation` asked for the same prompt makes it moot.
        Returns at once.

        Raises:
            TypeError: ``instructions`` is not a str.
            RuntimeError: No prompt can follow (after shutdown, or while the bridge closes)."""
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a str, not {type(instructions).__name__}")
        self._steerable("compact")
        self._feed(Compact(instructions))
