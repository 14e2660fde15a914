"""A pool's conversations that move between engines (R12 of :mod:`bridge.core.pool`; the design:
docs/pages/design/conversations.md, "A pool's conversations"). For a Pi profile the pool keeps
each conversation key's history as a stored conversation -- the named conversations' files and
rules (:mod:`bridge.profiles.conversation`, :mod:`bridge.core.conversation`) in a folder private
to the pool (``pi-bridge-pool-PID-…`` in the bridges' per-user root, hidden from every sandbox),
removed when it closes and swept by the next bridge when a killed pool left it -- so a conversation's context
is the pool's copy, not one engine's memory.

- **Taking a conversation up** (:meth:`PoolConversations.take_up`), before a prompt the rules
  dispatch with ``take_up``: the stored copy is placed in the engine's private config folder
  (``sessions/pool-NAME-N.jsonl``, its working folder set to the engine's; nothing yet: Pi
  begins the file there), and the idle engine, which the pool holds, is asked through its
  bridge's questions: ``get_state`` and ``get_commands``, Pi's ``switch_session`` to the copy,
  then ``get_state``, ``get_entries`` since the recorded cursor and ``get_commands`` again. What
  the start-up check verifies for a resumed conversation must hold after the switch too
  (:func:`~bridge.core.conversation.take_up_problems`), and the engine process must be the one
  asked first; else the take-up fails, with the words for the prompt's receipt.
- **Scrubbing** (:meth:`PoolConversations.scrub`): the engine's tools may read its config
  folder, where Pi keeps the copy and every later session's file, so when the engine is given
  to another conversation (after its take-up's check) or to a fresh prompt (before its
  ``new_session``), every session file but the one now in use is removed first: no prompt's
  tools find another conversation's words there.
- **Recording** (:meth:`PoolConversations.settled`), as a conversation's receipt is relayed: a
  receipt the bridge vouches for (rule 1) has the engine's file read at once and its own part
  (rule 2) recorded off the event loop (write, fsync, rename), before the rules hear the engine
  is idle, so the conversation's next prompt, on whichever engine, reads it. Any other receipt
  records nothing (rule 3): the next prompt takes the last recorded copy up again.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
from pathlib import Path
from typing import Any

import trio

from bridge.core.conversation import ConversationError, take_up_problems, vouches, with_cwd
from bridge.core.receipts import Receipt
from bridge.live.steering import EngineQuestionError
from bridge.live.supervisor import Bridge
from bridge.profiles.command import ProfileError
from bridge.profiles.conversation import Conversation, _lines, _write_atomic
from bridge.profiles.orphans import private_folder


def stored_name(key: str) -> str:
    """The stored conversation's name for a pool's key (any string): a digest, a folder's name."""
    return "pool-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class PoolConversations:
    """The conversations of one pool, in a folder of its own (made here, removed by :meth:`close`)."""

    def __init__(self) -> None:
        # In the per-user root, named for our pid: hidden from every sandbox, swept when a
        # killed pool leaves it (rules 1 and 4 of bridge.profiles.orphans).
        self.folder = private_folder("pool")
        self._open: dict[str, Conversation] = {}
        #: key -> (the bridge, its engine process's generation, the file Pi was switched to).
        self._placed: dict[str, tuple[Bridge, int, Path]] = {}
        self._numbers = itertools.count(1)
        #: Keys with a take-up or a recording under way, and keys to forget once it ends.
        self._busy: dict[str, int] = {}
        self._forget_after: set[str] = set()

    def _conversation(self, key: str) -> Conversation:
        if key not in self._open:
            self._open[key] = Conversation.open(stored_name(key), self.folder)
        return self._open[key]

    async def take_up(self, bridge: Bridge, key: str) -> str | None:
        """Switch ``bridge``'s idle engine to ``key``'s stored copy, checked. Returns None, or why
        it could not be (one line). Ends when Pi has answered every question, or could not."""
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            return await self._take_up(bridge, key)
        except (EngineQuestionError, ProfileError, ConversationError, OSError) as e:
            return str(e)
        finally:
            self._done(key)

    def forget(self, key: str) -> None:
        """``key`` is over (:meth:`Pool.end_conversation <bridge.live.pool.Pool.end_conversation>`):
        its stored history is removed -- at once, or as the take-up or recording of it under way
        ends -- and nothing of a prompt of it still running is recorded, so its next prompt
        starts afresh. Returns at once."""
        if key in self._busy:
            self._forget_after.add(key)
        else:
            self._drop(key)

    def _done(self, key: str) -> None:
        self._busy[key] -= 1
        if not self._busy[key]:
            del self._busy[key]
            if key in self._forget_after:
                self._forget_after.discard(key)
                self._drop(key)

    def _drop(self, key: str) -> None:
        self._placed.pop(key, None)
        conv = self._open.pop(key, None)
        folder = conv.folder if conv is not None else self.folder / stored_name(key)
        if conv is not None:
            conv.close()
        shutil.rmtree(folder, ignore_errors=True)

    async def _take_up(self, bridge: Bridge, key: str) -> str | None:
        """:meth:`take_up`'s questions and check. Ends when Pi has answered the last question."""
        self._placed.pop(key, None)
        conv = self._conversation(key)
        before = await _data(bridge, {"type": "get_state"})
        engine = bridge.engine
        if engine is None or "PI_CODING_AGENT_DIR" not in engine.launch.env or engine.launch.cwd is None:
            return "the engine is not a Pi this pool can move a conversation to"
        target = (
            Path(engine.launch.env["PI_CODING_AGENT_DIR"]) / "sessions" / f"{conv.name}-{next(self._numbers)}.jsonl"
        )
        cwd = engine.launch.cwd
        if conv.session.exists():
            lines = with_cwd(_lines(conv.session), cwd, conv.name)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            await trio.to_thread.run_sync(_write_atomic, target, b"\n".join(lines) + b"\n")
        commands_before = await _data(bridge, {"type": "get_commands"})
        switched = await bridge.ask({"type": "switch_session", "sessionPath": str(target)})
        after = await _data(bridge, {"type": "get_state"})
        since = {"since": conv.record.cursor} if conv.record.cursor else {}
        listed = await bridge.ask({"type": "get_entries", **since})
        commands_after = await _data(bridge, {"type": "get_commands"})
        if bridge.engine is not engine or not engine.alive:
            return "the engine process ended while it took the conversation up"
        entries = listed.get("data") if listed.get("success") is True else None
        problems = take_up_problems(
            before,
            switched,
            after,
            entries if isinstance(entries, dict) else None,
            (commands_before.get("commands"), commands_after.get("commands")),
            str(target),
        )
        if problems:
            return "; ".join(problems)
        self.scrub(bridge, keep=target)
        self._placed[key] = (bridge, engine.generation, target)
        return None

    def scrub(self, bridge: Bridge, keep: Path | None = None) -> None:
        """Remove every session file but ``keep`` from ``bridge``'s engine's private config
        folder: the engine's tools may read that folder, and the engine is now another
        conversation's (or a fresh prompt's), so no file of the one before may stay there (once
        switched to a file, Pi keeps each later session in a file of its own there too).

        Raises:
            OSError: One could not be removed (the engine must not be given the prompt)."""
        engine = bridge.engine
        if engine is None or "PI_CODING_AGENT_DIR" not in engine.launch.env:
            return
        sessions = Path(engine.launch.env["PI_CODING_AGENT_DIR"]) / "sessions"
        if not sessions.is_dir():
            return
        for path in sorted(sessions.iterdir()):  # a few files: removed in place
            if path == keep:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    async def settled(self, key: str, bridge: Bridge, receipt: Receipt) -> dict[str, Any] | None:
        """``key``'s prompt ran on ``bridge`` and got ``receipt``: record the engine's session if
        the bridge vouches for it. Returns the pool's note (``conversation-recorded`` or
        ``-not-recorded``), or None when nothing was to be recorded. Ends when it is recorded."""
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            return await self._settled(key, bridge, receipt)
        finally:
            self._done(key)

    async def _settled(self, key: str, bridge: Bridge, receipt: Receipt) -> dict[str, Any] | None:
        """:meth:`settled`'s recording. Ends when the worker thread has written it (or failed to)."""
        placed = self._placed.get(key)
        engine = bridge.engine
        if placed is None or placed[0] is not bridge or engine is None or engine.generation != placed[1]:
            self._placed.pop(key, None)
            return None
        if not vouches(receipt):
            self._placed.pop(key, None)
            return None
        conv, version = self._conversation(key), engine.launch.header.get("engine_version")
        try:
            lines = _lines(placed[2])  # read now, as the receipt is delivered (rule 2)
            record = await trio.to_thread.run_sync(
                conv.record_lines, lines, version if isinstance(version, str) else None
            )
        except (OSError, ConversationError) as e:
            self._placed.pop(key, None)
            why = f"the conversation's session could not be recorded ({e}); the last recorded one stays"
            return {"event": "conversation-not-recorded", "conversation": key, "request": receipt.request, "why": why}
        return {
            "event": "conversation-recorded",
            "conversation": key,
            "request": receipt.request,
            "entries": record.entries,
        }

    def kept(self, key: str) -> bool:
        """The engine that ran ``key``'s last prompt holds the stored copy and what followed it."""
        return key in self._placed

    def close(self) -> None:
        """Let go of every conversation and remove the folder."""
        for conv in self._open.values():
            conv.close()
        self._open.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


async def _data(bridge: Bridge, cmd: dict[str, Any]) -> dict[str, Any]:
    """Pi's answer's ``data`` to ``cmd``; :class:`EngineQuestionError` if it refused. Ends when
    Pi answers (or the bridge's question timeout ends the wait: :meth:`Bridge.ask`)."""
    response = await bridge.ask(cmd)
    data = response.get("data")
    if response.get("success") is not True or not isinstance(data, dict):
        raise EngineQuestionError(f"Pi refused {cmd['type']}: {response.get('error', 'no data')}")
    return data
