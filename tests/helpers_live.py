"""Helpers for the live tests (real subprocesses over real pipes).

The checks ``tools/soak/soak`` uses too live in :mod:`tests.shared.checks` (the tests import
nothing from ``tools/``); this module re-exports the ones the tests use, beside the helpers
only the tests need:

- :func:`fake_engine_argv`: the argv of ``tools/fake_engine.py`` with a scenario.
- :class:`SeededFakeProfile` / :class:`SequenceProfile`: an engine profile that gives every engine
  process it prepares a fresh ``--seed`` / its own scenario (so a recycled engine does not replay
  the same faults).
- :func:`leftovers` / :func:`wait_gone`: what is left of an engine process and its group (/proc);
  :func:`vm_hwm`: a process's peak RSS.
- :func:`faults_in_journal`: the fake engine's faults a journal's stderr lines report.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from typing import Any

import attrs
import trio

from bridge.profiles.command import Launch, filtered_env
from tests.shared.checks import (  # noqa: F401  (re-exported)
    FAKE,
    ROOT,
    STOP_PLANS,
    ServeProc,
    all_pids,
    check_journal_readable,
    check_receipt,
    collect_text,
    compare_journal,
    controller_action,
    failing_journal,
    fast_config,
    generations_argv,
    leaves,
    proc_stat,
    read_journal,
    zombie_children,
)


def fake_engine_argv(scenario: dict[str, Any] | None = None, seed: int | None = None) -> list[str]:
    """``python tools/fake_engine.py --scenario-json … [--seed N]``."""
    argv = [sys.executable, str(FAKE), "--scenario-json", json.dumps(scenario or {})]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return argv


@attrs.define
class SeededFakeProfile:
    """Like ``CommandProfile(fake_engine_argv(scenario))`` but each engine gets its own seed."""

    scenario: dict[str, Any]
    rng: random.Random
    name: str = "fake-seeded"
    seeds: list[int] = attrs.field(factory=list)

    def prepare(self) -> Launch:
        seed = self.rng.randrange(1 << 30)
        self.seeds.append(seed)
        argv = fake_engine_argv(self.scenario, seed)
        return Launch(
            argv=argv, env=filtered_env(None), clearing=("clear_queue",), header={"engine": "command", "argv": argv}
        )


@attrs.define
class SequenceProfile:
    """The n-th engine this profile prepares runs ``scenarios[n]`` (the last one repeats).

    The fake engine counts prompts per process, so a recycled engine would start its
    scenario over; this gives each generation its own story.
    """

    scenarios: list[dict[str, Any]]
    name: str = "fake-sequence"
    launches: int = 0
    #: ``--seed`` of the n-th engine (its generation) instead of none.
    seed_by_generation: bool = False

    def prepare(self) -> Launch:
        scenario = self.scenarios[min(self.launches, len(self.scenarios) - 1)]
        self.launches += 1
        argv = fake_engine_argv(scenario, self.launches if self.seed_by_generation else None)
        return Launch(
            argv=argv, env=filtered_env(None), clearing=("clear_queue",), header={"engine": "command", "argv": argv}
        )


def vm_hwm(pid: int) -> int | None:
    """Peak resident set size of ``pid`` in bytes (/proc/PID/status ``VmHWM``), None when gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def leftovers(pid: int, parent: int | None = None) -> list[str]:
    """What is left of an engine process ``pid`` (and its own group/session): [] when gone.

    ``parent`` given: only a process that is still ``parent``'s child counts as the
    engine (a pid reused by an unrelated process is not a leftover). ``parent``
    None: any live process with that pid counts (its parent may have died).
    """
    found = []
    for other in all_pids():
        st = proc_stat(other)
        if st is None:
            continue
        state, ppid, pgrp, sid = st
        if other == pid:
            if parent is None or ppid == parent:
                found.append(f"engine pid {pid} still there (state {state}, parent {ppid})")
        elif pgrp == pid or sid == pid:
            found.append(f"pid {other} left in the engine's group {pid} (state {state})")
    return found


async def wait_gone(pid: int, parent: int | None = None, timeout: float = 3.0) -> list[str]:
    """Poll until the engine ``pid`` is gone; return what is left after ``timeout``."""
    with trio.move_on_after(timeout):
        while leftovers(pid, parent):
            await trio.sleep(0.02)
    return leftovers(pid, parent)


FAULT_RE = re.compile(r"fake-engine: fault (\S+) at (\d+)")


def faults_in_journal(entries: list[dict[str, Any]]) -> Counter[str]:
    """The fake engine's ``fault KIND at STEP`` stderr lines, counted by kind."""
    c: Counter[str] = Counter()
    for e in entries:
        text = e.get("stderr")
        if isinstance(text, str):
            m = FAULT_RE.search(text)
            if m:
                c[m.group(1)] += 1
    return c


def carried(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The conversation a model request (one of the scripted server's ``requests``) carried: the
    (role, text) of each user and assistant message, in order."""
    out = []
    for m in request["body"]["messages"]:
        if m["role"] not in ("user", "assistant"):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append((m["role"], content or ""))
    return out
