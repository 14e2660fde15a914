"""The soak's own checks: what only ``tools/soak/soak`` uses.

The checks it shares with the live tests (one receipt per prompt, journals replaying to the live
receipts, no zombies, ``bridge serve`` as a subprocess, a controller that stops prompts at random
moments, a journal on a full disk) are :mod:`tests.shared.checks`; ``tools/soak/soak`` imports those
from there. Here:

- :class:`StartupCheckProfile`: a command engine with a start-up (seal) check, so closing can
  land while the check is awaited; :func:`generations_profile`: the API twin of
  :func:`tests.shared.checks.generations_argv`.
- :func:`start_time` / :func:`same_process` / :func:`wait_same_gone` / :func:`kill_same`: a pid
  plus its start time names one process even when pids are reused (a long soak spawns more
  processes than ``pid_max``); :func:`orphan_engines`: fake engines re-parented to init.
- :func:`check_journal_story`: what the journal must show about sends, stops and closing;
  :func:`check_failed_journal`: a journal that failed reads back and agrees with the live
  receipts.
- :func:`fsize_limit`: ``bridge serve`` with ``RLIMIT_FSIZE``, a journal on a disk that fills up.
"""

from __future__ import annotations

import os
import resource
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from bridge.core.receipts import Receipt
from bridge.profiles.command import CommandProfile, Launch
from tests.shared.checks import (
    check_journal_readable,
    generations_argv,
    proc_stat,
    read_journal,
    receipts_disagree,
)

#: The start-up command :class:`StartupCheckProfile` sends (Pi's seal check asks the same).
STARTUP_CHECK: list[dict[str, Any]] = [{"id": "seal-state", "type": "get_state"}]


@attrs.define
class StartupCheckProfile(CommandProfile):
    """A command engine with a start-up check: ``get_state`` is written at spawn and every
    prompt waits for its answer (the check itself finds nothing). With the fake engine's
    ``{"on_start": {"delay": S}}`` the check stays open for S seconds: a window in which
    closing meets prompts that are queued and an engine that is not yet ready."""

    name: str = "command-checked"

    def prepare(self) -> Launch:
        launch = super().prepare()
        launch.startup = [dict(cmd) for cmd in STARTUP_CHECK]
        launch.check = lambda answers: []
        return launch


def generations_profile(
    folder: str | Path,
    scenarios: list[dict[str, Any]],
    default: dict[str, Any] | None = None,
    *,
    startup_check: bool = False,
) -> CommandProfile:
    """:func:`generations_argv` as a profile for the Python API (with a start-up check if asked)."""
    argv = generations_argv(folder, scenarios, default)
    return StartupCheckProfile(argv) if startup_check else CommandProfile(argv)


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot; /proc/PID/stat field 22), or None
    when there is no such process. With the pid it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(data[data.rfind(")") + 2 :].split()[19])


def same_process(pid: int, started: int | None) -> str | None:
    """The state letter of process ``pid`` if it is still the one that started at ``started``
    (``R``, ``S``, ``Z``, …), else None (gone, or the pid now names another process)."""
    if started is None:
        return None
    st = proc_stat(pid)
    if st is None or start_time(pid) != started:
        return None
    return st[0]


async def wait_same_gone(procs: list[tuple[int, int | None]], timeout: float = 3.0) -> list[str]:
    """Poll until none of ``(pid, start time)`` is alive (or a zombie); what is left after ``timeout``."""

    def left() -> list[str]:
        out = []
        for pid, started in procs:
            state = same_process(pid, started)
            if state is not None:
                out.append(f"engine pid {pid} still there (state {state})")
        return out

    with trio.move_on_after(timeout):
        while left():
            await trio.sleep(0.02)
    return left()


def kill_same(procs: list[tuple[int, int | None]]) -> None:
    """SIGKILL each ``(pid, start time)`` that is still that process, and its process group."""
    for pid, started in procs:
        if same_process(pid, started) is None:
            continue
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def orphan_engines(pids: list[int]) -> list[str]:
    """Fake engines among ``pids`` left running with no parent of their own (re-parented to
    init): for engines whose start time was never seen, so a reused pid is not mistaken."""
    out = []
    for pid in pids:
        st = proc_stat(pid)
        if st is None or st[1] != 1:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"fake_engine" in cmd:
            out.append(f"engine pid {pid} orphaned (state {st[0]})")
    return out


def check_journal_story(path: str | Path, live_receipts: dict[str, Any]) -> list[str]:
    """What a complete journal must show beside its receipts (SPEC §5, §7):

    - nothing is written to the engine once closing has begun: no ``send`` of a prompt after
      the ``{"note":{"event":"closing"…}}`` line;
    - a prompt never written (no ``send``) is ``rejected`` for a reason of its own (queue-full,
      cancelled, closing, engine-down: never ``engine``), and a written one is never rejected
      for those reasons, unless an ``unsent`` note says none of it went in (``engine-down``);
    - whose stop ended a run is on record: a ``failed`` receipt with reason ``interrupted`` /
      ``timeout`` / ``closing`` names a stop whose ``stop`` note says ``by`` ``controller`` /
      ``timeout`` / ``closing``.
    """
    problems: list[str] = []
    live = {k: (Receipt.from_json(v) if isinstance(v, dict) else v) for k, v in live_receipts.items()}
    entries = read_journal(path)
    closing_at: int | None = None
    sent: set[Any] = set()
    owners: dict[Any, Any] = {}
    unsent: set[Any] = set()
    for n, e in enumerate(entries):
        note = e.get("note")
        if isinstance(note, dict):
            if note.get("event") == "closing" and closing_at is None:
                closing_at = n
            elif note.get("event") == "stop":
                owners[note.get("stop")] = note.get("by")
            elif note.get("event") == "unsent":
                unsent.add(note.get("request"))
        send = e.get("send")
        if isinstance(send, dict) and send.get("type") == "prompt":
            sent.add(send.get("id"))
            if closing_at is not None:
                problems.append(
                    f"prompt {send.get('id')} was sent to the engine after closing began "
                    f"({entries[closing_at]['note']})"
                )
    for rid, r in live.items():
        if rid not in sent and (r.state != "rejected" or r.reason == "engine"):
            problems.append(f"{rid}: never written to the engine, but its receipt is {r.state}/{r.reason}")
        if (
            rid in sent
            and r.state == "rejected"
            and r.reason != "engine"
            and not (rid in unsent and r.reason == "engine-down")
        ):
            problems.append(f"{rid}: written to the engine, but its receipt is {r.state}/{r.reason}")
        want = {"interrupted": "controller", "timeout": "timeout", "closing": "closing"}.get(r.reason or "")
        if r.state == "failed" and want is not None:
            if r.stop is None:
                problems.append(f"{rid}: failed/{r.reason} names no stop")
            elif owners.get(r.stop) != want:
                problems.append(
                    f"{rid}: failed/{r.reason} by stop {r.stop!r}, whose note says by "
                    f"{owners.get(r.stop)!r}, not {want!r}"
                )
    return problems


def check_failed_journal(path: str | Path, live_receipts: dict[str, Any]) -> list[str]:
    """A journal that failed: readable up to its last complete line, and what it holds agrees
    with the live bridge (each receipt it recorded once, as reported live)."""
    problems, _ = check_journal_readable(path)
    live = {k: (Receipt.from_json(v) if isinstance(v, dict) else v) for k, v in live_receipts.items()}
    journaled = [e["receipt"] for e in read_journal(path) if isinstance(e.get("receipt"), dict)]
    counts = Counter(r.get("request") for r in journaled)
    for rid, n in counts.items():
        if n > 1:
            problems.append(f"the failed journal records {rid}'s receipt {n} times")
        if rid not in live:
            problems.append(f"the failed journal records a receipt for {rid!r}, which the controller never got")
    problems += receipts_disagree(journaled, live, "the failed journal's receipt")
    return problems


def fsize_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that caps every file the child writes at ``limit`` bytes
    (``RLIMIT_FSIZE``: past it a write fails with EFBIG; Python ignores SIGXFSZ)."""

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec
