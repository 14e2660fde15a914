"""``bridge acp``: the loop that carries the Agent Client Protocol between stdin/stdout and one
live bridge per session. What a message means and what is answered is
:mod:`bridge.controller.acp.protocol` (sans-IO); stdout is :class:`bridge.controller.output.Output`
(the one writer, never blocking the bridge). Here: who reads stdin, which task answers what,
and when the process ends.

Rules:

- ``session/new`` opens a bridge (:func:`bridge.live.api.open_bridge`) on the engine profile with
  the session's ``cwd`` as the engine's working folder, and its own journal
  (``STEM-SESSION.jsonl``: :func:`journal_for`); it asks the engine for its models (which starts
  it), then answers. One engine per session, for the session's life.
- ``session/prompt`` is one prompt through that bridge, submitted with ``events``; its events
  become ``session/update`` notifications as they come, and its receipt the answer
  (:func:`~bridge.controller.acp.protocol.prompt_outcome`). Every prompt gets exactly one
  answer, because every accepted prompt gets exactly one receipt.
- ``session/cancel`` is the bridge's stop for every outstanding prompt of the session.
- stdin EOF (the editor went away or closed the agent): every bridge shuts down as ``serve``'s
  does after EOF (outstanding prompts run to their receipts, bounded by ``--drain-timeout``),
  each answer is written (or dropped: nobody reads), exit 0. No answer to a permission request
  can come any more: open and later dialogs are cancelled at once (``no-controller``).
- SIGINT / SIGTERM / SIGHUP: every bridge closes at once (running prompts stopped,
  ``failed``/``closing``: an error answer each), exit 130 / 143 / 129.
- A journal that cannot be written closes its session's bridge (its prompts still get their
  answers); ``bridge acp`` then exits 1 with one line on stderr naming it.
- An allowlisted extension's ``confirm`` or ``select`` dialog (``--extension``; issue 14) is a
  ``session/request_permission`` to the client (:func:`~bridge.controller.acp.protocol.permission_request`):
  the client's chosen option is the dialog's answer, anything else is ``cancelled`` -- never a
  yes nobody gave. A dialog that ends first (its ``--dialog-timeout``, its prompt's stop) gets
  ``$/cancel_request`` to the client; the client's late answer is then dropped.
- Signals (overlaps, stalls, seal diagnostics) and engine exits have no ACP message: each is one
  line on stderr (an editor keeps an agent's stderr in its log) and is in the journal.
- ``initialize`` needs no engine and no live bridge: the live layer (the bridge, its handles and
  journals) is imported when a session needs it, not at start (an editor waits for the answer
  to ``initialize``: ``tools/bench/bench_startup``). What must be right before the first message is
  read -- the engine profile prepared once, a ``--journal`` folder -- is still checked first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from bridge import __version__
from bridge.controller.acp import protocol as acp
from bridge.controller.acp import sessions as kept
from bridge.controller.output import FLUSH_GRACE, Output
from bridge.controller.stdin import read_lines
from bridge.core.config import BridgeConfig
from bridge.core.framing import Oversize
from bridge.core.progress import TurnEnd
from bridge.core.receipts import exit_status
from bridge.live.retention import keep_from, sweep
from bridge.live.signals import closing_signals
from bridge.profiles.command import CommandProfile, EngineProfile, ProfileError

if TYPE_CHECKING:
    from bridge.core.receipts import Receipt
    from bridge.live.api import Bridge
    from bridge.live.handles import Dialog, PromptHandle


def main_acp(
    profile: EngineProfile,
    *,
    journal: Any,
    config: BridgeConfig,
    drain_timeout: float | None,
    keep_sessions: bool = False,
) -> int:
    """``bridge acp`` on this process's stdin/stdout; returns the exit status. An engine that
    cannot be prepared (no Pi, a bad setting) raises ProfileError before anything is read, as
    ``serve`` does: the command line's mistake is one line and exit 2, not an error per session."""
    profile.prepare().run_cleanup()
    if journal and journal is not True:
        # Each session's journal goes beside --journal: a folder that cannot be made or written
        # is the command line's mistake, said once (as serve does), not an error per session.
        from bridge.live.journal import JournalError, private_dir

        folder = Path(journal).parent
        try:
            private_dir(folder)
        except OSError as e:
            raise JournalError(f"cannot create the journal folder {folder}: {e.strerror or e}") from None
        if not folder.is_dir():
            raise JournalError(f"cannot write journals in {folder}: Not a directory")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise JournalError(f"cannot write journals in {folder}: permission denied")
    try:
        return trio.run(
            lambda: serve_acp(
                profile, journal=journal, config=config, drain_timeout=drain_timeout, keep_sessions=keep_sessions
            )
        )
    except KeyboardInterrupt:
        return 130


async def serve_acp(
    profile: EngineProfile,
    *,
    journal: Any = True,
    config: BridgeConfig | None = None,
    drain_timeout: float | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    keep_sessions: bool = False,
) -> int:
    """Be an ACP agent until stdin's EOF (and every session's drain) or a signal; returns the
    exit status. Ends when every bridge has closed and every answer is written (or dropped)."""
    agent = AcpAgent(Output(stdout_fd), profile, journal, config or BridgeConfig(), drain_timeout, keep_sessions)
    agent.out.on_gone = agent.client_gone
    with closing_signals(keep_interrupt=True) as signals:  # as serve: ours from the first line to the exit
        async with trio.open_nursery() as outer:
            outer.start_soon(agent.out.run)
            outer.start_soon(agent.watch_signals, signals)
            try:
                await agent.run(stdin_fd)
            finally:
                agent.out.close()
                with trio.CancelScope(shield=True):
                    # At most FLUSH_GRACE after a signal for a client that does not read.
                    agent.gave_up = await agent.out.flush(agent.signalled)
            outer.cancel_scope.cancel()
    return agent.exit_status()


def journal_for(journal: Any, session_id: str) -> str | None:
    """A session's journal: ``STEM-SESSION.jsonl`` beside ``--journal PATH`` (or the default
    journal's path; ``STEM-SESSION.N.jsonl`` when an earlier run left that name), None for none."""
    if not journal:
        return None
    from bridge.live.journal import default_journal_path

    base = default_journal_path() if journal is True else Path(journal)
    path = base.with_name(f"{base.stem}-{session_id}{base.suffix or '.jsonl'}")
    n = 1
    while path.exists():  # an earlier run's, with the same --journal: never overwritten, never refused
        n += 1
        path = base.with_name(f"{base.stem}-{session_id}.{n}{base.suffix or '.jsonl'}")
    return str(path)


@attrs.define(eq=False)
class Session:
    """One ACP session: its bridge (one engine), its tool calls, its outstanding prompts."""

    id: str
    cwd: str
    tools: acp.ToolCalls
    bridge: Bridge | None = None
    #: The config options as last said to the client: what the session's prompts run with.
    options: list[dict[str, Any]] = attrs.Factory(list)
    #: What the engine offers (its ``get_available_models``), asked when the session opened.
    models: list[dict[str, Any]] = attrs.Factory(list)
    #: The thinking level asked for (the client's choice, else ``--thinking``), None: the engine's own.
    thinking: str | None = None
    #: Outstanding prompt ids (a cancel stops each).
    prompts: set[str] = attrs.Factory(set)
    count: int = 0
    #: The engine generation that ran the session's last prompt (a new one lost the conversation).
    generation: int | None = None
    #: Set when the session has no outstanding prompt whose answer is still to be written.
    quiet: trio.Event = attrs.Factory(trio.Event)
    #: The bridge's dialogs, asked of the client while it can answer (until stdin's EOF).
    dialogs: trio.MemoryReceiveChannel[Dialog] | None = None
    #: The named conversation it is (:mod:`bridge.controller.acp.sessions`), or None.
    conversation: str | None = None


@attrs.define(eq=False)
class AcpAgent:
    """One ``bridge acp`` process: its stdout, the engine profile and settings every session's
    bridge is opened with, the sessions, and the signal that ends it."""

    out: Output
    profile: EngineProfile
    journal: Any
    config: BridgeConfig
    drain_timeout: float | None
    #: ``--keep-sessions``: every ``session/new`` begins a named conversation.
    keep_sessions: bool = False
    sessions: dict[str, Session] = attrs.Factory(dict)
    #: 128+N after signal N, else 0.
    status: int = 0
    ended: trio.Event = attrs.Factory(trio.Event)
    #: Set at the first signal: it bounds the last lines' wait (:meth:`Output.flush`).
    signalled: trio.Event = attrs.Factory(trio.Event)
    #: The client did not read the last lines within FLUSH_GRACE of a signal: they were dropped.
    gave_up: bool = False
    work: trio.Nursery | None = None
    journal_failures: list[str] = attrs.Factory(list)
    #: Our requests to the client (permission requests) waiting for its answer, by id.
    asked: dict[str, _Asked] = attrs.Factory(dict)
    _ids: int = 0
    _asks: int = 0

    # -- the process -----------------------------------------------------------------------------

    async def run(self, stdin_fd: int) -> None:
        """Read the client until EOF (or a signal), then close every bridge. Ends when every
        session's bridge has closed and every prompt has its answer."""
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as work:
                self.work = work
                outer.start_soon(self._read, stdin_fd)
                await self.ended.wait()
                for sess in self.sessions.values():
                    if sess.bridge is not None:
                        sess.bridge.shutdown(self.drain_timeout)
                        _no_more_answers(sess)
            outer.cancel_scope.cancel()

    async def watch_signals(self, signals: AsyncIterator[int]) -> None:
        """Close every bridge on each signal. Ends only when cancelled (at the exit)."""
        async for signum in signals:
            # Also after stdin's EOF (an editor that quits signals, then closes the pipe): the
            # signal still stopped the prompts, so the status says so.
            self.status = self.status or 128 + signum
            self.signalled.set()
            self.ended.set()
            for sess in self.sessions.values():
                if sess.bridge is not None:
                    sess.bridge.close_on_signal(signum)

    def client_gone(self) -> None:
        """The client closed its end of stdout: nobody reads answers any more, so every bridge
        closes as for a signal (the receipts are in the journals) and the agent exits 141."""
        self.status = self.status or 141
        self.ended.set()
        for sess in self.sessions.values():
            if sess.bridge is not None:
                sess.bridge.close_now("controller-gone", "the client closed its end of stdout")

    def exit_status(self) -> int:
        """docs: guide/exit-codes.md; a journal or a stdout that failed also gets its line on stderr."""
        if self.gave_up:
            print(
                f"bridge acp: the client did not read stdout within {FLUSH_GRACE:g} s of the signal, so the last "
                "lines were dropped; the receipts are in the journals",
                file=sys.stderr,
            )
            return self.status
        if self.out.failed is not None:
            print(
                f"bridge acp: cannot write to stdout ({self.out.failed}); the receipts are in the journals",
                file=sys.stderr,
            )
            return self.status or 1
        if self.journal_failures:
            print(f"bridge acp: {self.journal_failures[0]}; every receipt went to the client", file=sys.stderr)
            return self.status or 1
        return self.status

    async def _read(self, stdin_fd: int) -> None:
        """Read client messages until EOF (a read error counts as EOF), then end the agent."""
        await read_lines(stdin_fd, lambda _, line: self._take(line))
        self.ended.set()

    # -- one message -------------------------------------------------------------------------------

    async def _take(self, line: bytes | Oversize) -> None:
        """Answer one message, or start the task that will. Does not wait for an engine."""
        msg = acp.parse_message(line)
        if isinstance(msg, acp.Invalid):
            self.out.put(acp.error(msg.id, msg.code, msg.message))
            return
        if isinstance(msg, acp.Response):
            waiting = self.asked.pop(str(msg.id), None) if msg.id is not None else None
            if waiting is not None:  # else: late (its dialog ended) or never ours
                waiting.answer = msg
                waiting.done.set()
            return
        try:
            if isinstance(msg, acp.Notification):
                if msg.method == "session/cancel":
                    await self._cancel(acp.parse_cancel(msg.params))
                return  # any other notification: never answered (JSON-RPC)
            self._request(msg)
        except acp.AcpError as e:
            if isinstance(msg, acp.Request):
                self.out.put(acp.error(msg.id, e.code, str(e), e.data))

    def _request(self, req: acp.Request) -> None:
        assert self.work is not None
        if req.method == "initialize":
            self.out.put(acp.result(req.id, acp.initialize_result(__version__)))
        elif req.method == "session/new":
            if self.ended.is_set():
                raise acp.AcpError(acp.INTERNAL_ERROR, "bridge acp is closing: no new session")
            self.work.start_soon(self._new_session, req, acp.parse_new_session(req.params))
        elif req.method == "session/load":
            if self.ended.is_set():
                raise acp.AcpError(acp.INTERNAL_ERROR, "bridge acp is closing: no session can be loaded")
            self.work.start_soon(self._load_session, req, kept.parse_load(req.params))
        elif req.method == "session/list":
            from bridge.profiles.conversation import list_conversations

            records = [r for r in list_conversations() if not isinstance(r, str)]
            self.out.put(acp.result(req.id, kept.list_result(records, req.params.get("cwd"))))
        elif req.method == "session/prompt":
            # Submitted here, in the order the prompts came (each in its own task, they reached
            # Pi in any order), and outstanding at once (a cancel right behind it stops it).
            params = acp.parse_prompt(req.params)
            sess = self._session(params.session_id)
            self.work.start_soon(self._prompt, req, sess, self._submit(sess, params))
        elif req.method == "session/set_config_option":
            self._set_option(req, acp.parse_set_option(req.params))
        elif req.method == "session/close":
            sess = self._session(acp.parse_cancel(req.params))
            del self.sessions[sess.id]  # from now on it is unknown to new requests
            self.work.start_soon(self._close_session, req, sess)
        else:
            raise acp.AcpError(acp.METHOD_NOT_FOUND, f"{req.method} is not a method of this agent")

    def _session(self, sid: str) -> Session:
        sess = self.sessions.get(sid)
        if sess is None or sess.bridge is None:
            raise acp.AcpError(acp.RESOURCE_NOT_FOUND, f"no session {sid!r}")
        return sess

    # -- sessions ------------------------------------------------------------------------------------

    async def _new_session(self, req: acp.Request, new: acp.NewSession) -> None:
        """Open the session's bridge, ask its engine for its models, answer. Ends when answered
        (the bridge lives on in its own task)."""
        if not os.path.isdir(new.cwd):
            self.out.put(acp.error(req.id, acp.INVALID_PARAMS, f"cwd {new.cwd} is not a folder"))
            return
        self._ids += 1
        name = kept.new_name() if self.keep_sessions else None
        sess = Session(name or f"s{self._ids}", new.cwd, acp.ToolCalls(new.cwd), conversation=name)
        await self._open_session(req, sess)

    async def _load_session(self, req: acp.Request, load: kept.LoadSession) -> None:
        """``session/load``: open the conversation's bridge, replay what it holds, answer
        (:mod:`bridge.controller.acp.sessions`). Ends when answered."""
        from bridge.profiles.conversation import default_conversation_dir

        if not os.path.isdir(load.cwd):
            self.out.put(acp.error(req.id, acp.INVALID_PARAMS, f"cwd {load.cwd} is not a folder"))
        elif load.session_id in self.sessions:
            self.out.put(acp.error(req.id, acp.INVALID_PARAMS, f"session {load.session_id!r} is open already"))
        elif not (default_conversation_dir() / load.session_id).is_dir():
            self.out.put(acp.error(req.id, acp.RESOURCE_NOT_FOUND, f"no session {load.session_id!r} to load"))
        else:
            sid = load.session_id
            await self._open_session(req, Session(sid, load.cwd, acp.ToolCalls(load.cwd), conversation=sid), load=True)

    async def _open_session(self, req: acp.Request, sess: Session, load: bool = False) -> None:
        """Open the session's bridge, ask its engine for its models, (``load``: replay the
        conversation,) answer. Ends when answered (the bridge lives on in its own task)."""
        from bridge.live.journal import JournalError
        from bridge.live.steering import EngineQuestionError

        assert self.work is not None
        path = journal_for(self.journal, sess.id)
        if self.journal is True and path is not None:  # a new journal in the default folder: retention
            keep = keep_from(self.config.journal_keep_days, self.config.journal_keep_mb)
            sweep(Path(path).parent, keep)
        try:
            await self.work.start(self._bridge_task, sess, path)
        except ProfileError as e:
            # The engine was prepared once at start: what fails now is this session's own
            # (its cwd: inside the journals' folder, which the engine may not see).
            self.out.put(acp.error(req.id, acp.INVALID_PARAMS, f"the session cannot be opened: {e}"))
            return
        except JournalError as e:
            self.out.put(acp.error(req.id, acp.INTERNAL_ERROR, f"the session cannot be opened: {e}"))
            return
        bridge = sess.bridge
        assert bridge is not None
        self.sessions[sess.id] = sess
        try:
            models = await bridge.models()
        except EngineQuestionError as e:
            if bridge.down_reason is not None or bridge.closing:
                self.out.put(
                    acp.error(req.id, acp.INTERNAL_ERROR, f"the engine cannot start: {bridge.down_reason or e}")
                )
                del self.sessions[sess.id]  # never answered as a session: unknown from here on
                bridge.close_now()
                return
            models = []  # an engine that lists no models: no model selector
        known = bridge.view().engine_config
        current = acp.model_value(known.provider, known.model) if known and known.provider and known.model else None
        sess.models, sess.thinking = models, bridge.view().wanted.thinking  # (--thinking)
        thinking = known.thinking if known else None
        if sess.thinking is not None and sess.thinking != thinking:  # applied before the first prompt
            thinking = acp.thinking_for(models, current, sess.thinking)
        sess.options = acp.config_options(models, current, thinking, sess.thinking)
        meta = {acp.META_KEY: {"journal": path, "cwd": sess.cwd, "conversation": sess.conversation}}
        if load:
            for update in self._history(sess):
                self.out.put(acp.session_update(sess.id, update))
            self.out.put(acp.result(req.id, {"configOptions": sess.options, "_meta": meta}))
            return
        self.out.put(acp.result(req.id, {"sessionId": sess.id, "configOptions": sess.options, "_meta": meta}))

    def _history(self, sess: Session) -> list[dict[str, Any]]:
        """The loaded conversation's replay (read under its lock, which its bridge holds now)."""
        from bridge.core.conversation import ConversationError, history
        from bridge.profiles.conversation import read_conversation

        assert sess.conversation is not None
        try:
            _, lines = read_conversation(sess.conversation)
            return kept.replay_updates(history(lines, sess.conversation))
        except (ProfileError, ConversationError) as e:  # (checked as the bridge opened: not seen)
            print(f"bridge acp: session {sess.id}: {e}", file=sys.stderr)
            return []

    async def _bridge_task(self, sess: Session, path: str | None, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the session's bridge open. Ends when it has closed (EOF's shutdown, a signal)."""
        from bridge.live.api import open_trio_bridge

        profile = _in_folder(self.profile, sess.cwd)
        async with open_trio_bridge(
            profile,
            journal=path if path is not None else False,
            config=self.config,
            start_engine=False,
            conversation=sess.conversation,
        ) as bridge:
            sess.bridge = bridge
            bridge.listeners.append(_stderr_line(sess.id))
            dialogs = sess.dialogs = bridge.dialogs()  # open before any prompt: a dialog is then asked, not cancelled
            assert self.work is not None
            self.work.start_soon(self._dialogs, sess, dialogs)
            task_status.started()
            if self.status == 141:  # the client went away while it opened
                bridge.close_now("controller-gone", "the client closed its end of stdout")
            elif self.status:  # a signal came while it opened
                bridge.close_on_signal(self.status - 128)
            elif self.ended.is_set():
                bridge.shutdown(self.drain_timeout)
                _no_more_answers(sess)
            await bridge.wait_closed()
            if bridge.journal_failed:
                self.journal_failures.append(f"session {sess.id}: {bridge.journal_failed}")

    # -- extension dialogs ---------------------------------------------------------------------------

    async def _dialogs(self, sess: Session, dialogs: trio.MemoryReceiveChannel[Dialog]) -> None:
        """Ask the client each dialog of the session's engine. Ends when the bridge has closed
        (its dialog channel ends then)."""
        assert self.work is not None
        try:
            async with dialogs:
                async for dialog in dialogs:
                    self.work.start_soon(self._ask, sess, dialog)
        except trio.ClosedResourceError:
            pass  # closed at stdin's EOF: nobody can answer any more

    async def _ask(self, sess: Session, dialog: Dialog) -> None:
        """One dialog: a permission request, and its answer. Ends when the dialog has ended (at
        the latest at its own timeout, which the bridge keeps)."""
        params = acp.permission_request(sess.id, dialog.dialog, dialog.method, dialog.fields)
        if params is None:  # input, editor: no ACP form
            await _answer(dialog, {"cancelled": True})
            return
        self._asks += 1
        rid = f"pi-bridge-{self._asks}"
        waiting = self.asked[rid] = _Asked()
        self.out.put(acp.request(rid, "session/request_permission", params))
        async with trio.open_nursery() as race:

            async def answered() -> None:
                """Ends when the client answers."""
                await waiting.done.wait()
                race.cancel_scope.cancel()

            async def ended() -> None:
                """Ends when the dialog has ended without the client's answer."""
                await dialog.wait_ended()
                race.cancel_scope.cancel()

            race.start_soon(answered)
            race.start_soon(ended)
        given: dict[str, Any] | None = None
        if waiting.answer is not None:
            given = acp.permission_answer(dialog.method, dialog.fields, waiting.answer)
            if not await _answer(dialog, given):
                given = None  # it ended first: the answer did not count
        elif self.asked.pop(rid, None) is not None:
            self.out.put(acp.cancel_request(rid))  # nobody needs it answered any more
        # Its tool call ends with it (a client would show it pending for good).
        self.out.put(acp.session_update(sess.id, acp.permission_closed(dialog.dialog, given)))

    def _set_option(self, req: acp.Request, option: acp.SetOption) -> None:
        sess = self._session(option.session_id)
        assert sess.bridge is not None
        wanted = acp.chosen(option, sess.options)
        try:
            sess.bridge.configure(**wanted)
        except RuntimeError as e:  # closing: no prompt of the session can follow
            raise acp.AcpError(acp.INTERNAL_ERROR, f"the session is closing: {e}") from None
        # What the next prompt runs with, as far as the engine's model list tells (its receipt
        # then says what it was verified to run: _verified).
        model = acp.current_value(sess.options, "model")
        if "model" in wanted:
            model = acp.model_value(wanted["provider"], wanted["model"])
        sess.thinking = wanted.get("thinking", sess.thinking)
        level = sess.thinking or acp.current_value(sess.options, "thought_level") or "off"
        sess.options = acp.config_options(
            sess.models, model, acp.thinking_for(sess.models, model, level), sess.thinking
        )
        self.out.put(acp.result(req.id, {"configOptions": sess.options}))

    def _verified(self, sess: Session, receipt: Receipt) -> None:
        """After a prompt's receipt: the config options say what the engine was verified to run
        it with (its ``config``), and a ``config_option_update`` tells the client when that is
        not what they said. Not while the client's later choice is still to be applied (the
        options say that one, until a prompt runs with it)."""
        config, bridge = receipt.config, sess.bridge
        if config is None or bridge is None or not config.satisfies(bridge.view().wanted):
            return
        model = acp.current_value(sess.options, "model")
        if config.provider and config.model:
            model = acp.model_value(config.provider, config.model)
        options = acp.config_options(sess.models, model, config.thinking, config.thinking_asked)
        if options != sess.options:
            sess.options = options
            self.out.put(acp.session_update(sess.id, acp.config_option_update(options)))

    # -- prompts ----------------------------------------------------------------------------------------

    def _submit(self, sess: Session, params: acp.PromptParams) -> PromptHandle:
        """Submit one prompt to the session's bridge now (the bridge accepts it at once)."""
        bridge = sess.bridge
        assert bridge is not None
        sess.count += 1
        try:
            handle = bridge.submit_nowait(
                params.message, request=f"{sess.id}-{sess.count}", images=params.images or None, events=True
            )
        except ValueError as e:  # a prompt too big for the engine's lines: never accepted
            raise acp.AcpError(acp.INVALID_PARAMS, str(e)) from None
        sess.prompts.add(handle.request)
        sess.quiet = trio.Event()
        return handle

    async def _prompt(self, req: acp.Request, sess: Session, handle: PromptHandle) -> None:
        """One submitted prompt: its events as updates, its receipt as the answer. Ends at the receipt."""
        last_stop: str | None = None
        try:
            async for event in handle.events():
                if type(event) is TurnEnd:
                    last_stop = event.stop_reason
                update = sess.tools.update_for(event)
                if update is not None:
                    self.out.put(acp.session_update(sess.id, update))
            receipt = await handle.receipt()
        finally:
            sess.prompts.discard(handle.request)
            if not sess.prompts:
                sess.quiet.set()
        why = f"the prompt ended ({receipt.state}{f', {receipt.reason}' if receipt.reason else ''}) before the tool did"
        for update in sess.tools.unfinished(handle.request, why):
            self.out.put(acp.session_update(sess.id, update))
        self._verified(sess, receipt)  # before the answer: the client shows the turn with what ran it
        outcome = acp.prompt_outcome(receipt, last_stop)
        answer = acp.prompt_result(receipt, outcome, req.id)
        if receipt.generation is not None:
            restarted = sess.generation is not None and receipt.generation != sess.generation
            if restarted and sess.conversation is None and "result" in answer:
                # A new engine is a new conversation (no session file unless named): say so.
                answer["result"]["_meta"][acp.META_KEY]["newConversation"] = True
            sess.generation = receipt.generation
        self.out.put(answer)

    async def _close_session(self, req: acp.Request, sess: Session) -> None:
        """``session/close``: its prompts stopped (each answered ``cancelled``), its bridge shut
        down and its engine stopped, then the answer. Ends when the bridge has closed (bounded
        by the stop's grace and the close ladder)."""
        assert sess.bridge is not None
        for request in sorted(sess.prompts):
            await sess.bridge.stop(request)
        sess.bridge.shutdown()
        await sess.bridge.wait_closed()
        if sess.prompts:
            await sess.quiet.wait()  # their answers are written first
        self.out.put(acp.result(req.id, {}))

    async def _cancel(self, sid: str) -> None:
        """The bridge's stop for every outstanding prompt of the session (returns at once)."""
        sess = self.sessions.get(sid)
        if sess is None or sess.bridge is None:
            return
        for request in sorted(sess.prompts):
            await sess.bridge.stop(request)


@attrs.define(eq=False)
class _Asked:
    """A request of ours waiting for the client's answer."""

    done: trio.Event = attrs.Factory(trio.Event)
    answer: acp.Response | None = None


async def _answer(dialog: Dialog, answer: dict[str, Any]) -> bool:
    """Give a dialog its answer; one that has ended meanwhile keeps the response it had (False).
    Returns at once."""
    from bridge.live.handles import DialogError

    try:
        await dialog.answer(**answer)
    except DialogError:
        return False
    return True


def _no_more_answers(sess: Session) -> None:
    """stdin has ended (or the agent is closing): the client's answers come on stdin, so none
    can come any more. The session's open dialogs are answered ``cancelled`` now
    (``no-controller``), and so is every later one, as ``serve`` does after EOF -- not left to
    wait out ``--dialog-timeout`` while the drain waits on them."""
    if sess.dialogs is not None:
        sess.dialogs.close()
    if sess.bridge is not None:
        sess.bridge.stop_answering_dialogs()


def _in_folder(profile: EngineProfile, cwd: str) -> EngineProfile:
    """The profile with the session's folder as the engine's working folder. An engine given
    after ``--`` by a relative path (``tools/fake_engine.py``) is found from where ``bridge acp``
    was started, as with ``serve``, not from the session's folder."""
    from bridge.profiles.pi import PiProfile

    if isinstance(profile, CommandProfile):
        argv = [
            os.path.abspath(a) if "/" in a and not os.path.isabs(a) and os.path.exists(a) else a for a in profile.argv
        ]
        return attrs.evolve(profile, argv=argv, cwd=cwd)
    if isinstance(profile, PiProfile):
        return attrs.evolve(profile, cwd=cwd)
    return attrs.evolve(profile, cwd=cwd)  # type: ignore[misc]  # any attrs profile with a cwd


def _stderr_line(session_id: str) -> Callable[[dict[str, Any]], None]:
    """A listener: signals and unrequested engine exits, one line each on stderr."""

    def listen(note: dict[str, Any]) -> None:
        kind = note.get("type")
        if kind == "signal":
            words = ", ".join(f"{k}={v}" for k, v in note.items() if k not in ("type", "signal"))
            line = f"bridge acp: session {session_id}: signal {note.get('signal')} ({words[:300]})"
        elif kind == "engine" and note.get("event") == "exited" and not note.get("requested"):
            how = exit_status(note.get("code"), note.get("signal"))
            line = f"bridge acp: session {session_id}: the engine exited by itself ({how})"
        elif kind == "engine" and note.get("event") == "down":
            line = f"bridge acp: session {session_id}: the engine is down: {note.get('why')}"
        else:
            return
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:
            pass

    return listen
