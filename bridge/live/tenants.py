"""Cleaning a pool's engine between tenants (R13 of :mod:`bridge.core.pool`; issue 41).

A confined Pi's sandbox (:mod:`bridge.profiles.sandbox`) outlives its prompts: what a keyless
prompt's tools leave -- a process (``setsid nohup … &`` is orphaned to the sandbox's init, not
ended), files in the working folder, ``/tmp``, ``/dev`` and ``/dev/shm`` (bwrap's ``--dev`` is a
writable tmpfs), System V IPC objects (the sandbox's IPC namespace), files in its private config
folder -- would be there for the next prompt on that engine, another user's. :func:`clean`
takes all of it away, from outside, while the engine is idle; the rules give the engine no
prompt until it has. The steps, each with what it rests on:

1. **Find the sandbox's processes by PID namespace.** The engine process is the outer
   ``bwrap``; its one child is the sandbox's init (``--as-pid-1``), whose ``/proc/PID/ns/pid``
   names the namespace. Every process whose ``ns/pid`` link is the same is inside (a process
   cannot leave its PID namespace: ``pid_namespaces(7)``). The sandbox's own are the init, its
   children that started no later than Pi (``/proc/PID/stat`` field 22, clock ticks since
   boot) and what those (but Pi) started: the init starts the watch on the bridge (a subshell
   and its ``cat``, which may start after Pi) and ``--no-network``'s relay, then Pi; a tool runs
   only after Pi has started, as Pi's descendant or, orphaned, as the init's child started
   later (no subreaper in the sandbox: ``PR_SET_CHILD_SUBREAPER`` is set by none of the init's
   children). Pi is the earliest of the init's children whose argv is the launch's or Pi's
   title (``process.title = "pi-rpc"``): a tool's process may take that title, but never starts
   before Pi.
2. **Kill the rest.** ``SIGKILL`` to each, again until a scan finds none alive (a process
   forking while it is killed is found by the next scan; a zombie is dead: the init or Pi reaps
   it). Bounded (:data:`KILL_ROUNDS`): a tree that keeps growing past it is a failure.
3. **Empty** the working folder (when the engine's own, never one the user gave; a bind of the
   host's folder or a sized tmpfs), the sandbox's ``/tmp`` and ``/dev/shm``, all reached
   through ``/proc/INIT/root`` (the kernel
   resolves the rest of such a path in the sandbox's mount namespace) -- but not its mount
   points (``/proc/INIT/mountinfo``): the engine's own folders are bound in under ``/tmp``
   (the private root), and the folders leading to them are kept too -- and remove what is in
   its ``/dev`` beyond what bwrap puts there (:data:`DEV_ENTRIES`). ``shutil.rmtree`` removes a
   link without following it, and uses file descriptors (``openat``), so nothing a tool left
   redirects it outside (and nothing runs there to race it: step 2 came first).
4. **System V IPC**: ``ipcrm --all`` run in the sandbox's user and IPC namespaces
   (``nsenter -t INIT -U -i --preserve-credentials``): a message queue or shared memory segment
   outlives its creator.
5. **The config folder** back to what it was at the engine's start-up check, before any tool
   ran (``Launch.tenant_clean``; what else is there removed, but the session files, which the
   pool's scrub handles: :mod:`bridge.live.pool_moves`. Pi's
   ``settings.json`` is read again when a session's runtime is built, so a tool that changed
   its ``shellPath`` would run the next tenant's commands).

Any step that fails raises :class:`CleanError`: the pool stops the engine (R13), never gives it
the next prompt. Measured (docs/pages/guide/pool.md, "Tenants"): 12 ms median when the
tools left nothing, 31 ms when each prompt left a process and files; ``nsenter``'s spawn is
about 9 ms of it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

from bridge.live.engine import Engine

__all__ = ["DEV_ENTRIES", "KILL_ROUNDS", "CleanError", "clean", "sandbox_processes"]

#: Scans-and-kills before the clean-up gives up (a fork bomb outrunning SIGKILL).
KILL_ROUNDS: Final = 50
#: What ``bwrap --dev`` (0.8.0) makes in the sandbox's ``/dev`` (listed in a new sandbox here).
DEV_ENTRIES: Final = frozenset(
    {"console", "core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty"}
    | {"urandom", "zero"}
)
#: Pi's argv once it has set ``process.title`` (``pi-rpc`` in RPC mode, Pi 1.6.0's ``main.js``).
PI_TITLES: Final = (["pi-rpc"], ["pi"])
_IPC_TIMEOUT = 10.0


class CleanError(Exception):
    """The engine could not be cleaned (the words say what was left)."""


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(ppid, state, starttime)`` from ``/proc/PID/stat``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def _ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _argv(pid: int) -> list[str]:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
    while argv and not argv[-1]:  # (a process.title is padded with NULs over the old argv)
        argv.pop()
    return argv


def _init_of(bwrap: int) -> int:
    try:
        children = Path(f"/proc/{bwrap}/task/{bwrap}/children").read_text().split()
    except OSError as e:
        raise CleanError(f"the engine's sandbox is gone ({e})") from None
    if len(children) != 1:
        raise CleanError(f"the engine's bwrap has {len(children)} children, not its sandbox's init alone")
    return int(children[0])


def sandbox_processes(bwrap: int, pi_argv: list[str]) -> tuple[int, set[int], set[int]]:
    """The sandbox's init, its own processes (rule 1) and the others (live ones)."""
    init = _init_of(bwrap)
    ns = _ns(init)
    if ns is None or ns == _ns(os.getpid()):
        raise CleanError("the engine's init is not in a PID namespace of its own")
    members: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ns(int(entry)) == ns:
            st = _stat(int(entry))
            if st is not None:
                members[int(entry)] = st
    pis = [p for p, (ppid, _, _) in members.items() if ppid == init and _argv(p) in (pi_argv, *PI_TITLES)]
    if not pis:
        children = sorted(" ".join(_argv(p))[:40] for p, (ppid, _, _) in members.items() if ppid == init)
        raise CleanError(f"Pi is not running in the engine's sandbox (the init's children: {children})")
    # The earliest: a tool's process may take Pi's title, never start before Pi.
    pi = min(pis, key=lambda p: (members[p][2], p))
    started = members[pi][2]
    roots = {p for p, (ppid, _, t) in members.items() if ppid == init and t <= started}
    # With what those start (the watch's ``cat``: under load it started after Pi, and was
    # killed, and the watch then ended the whole sandbox), but not what Pi starts (the tools).
    own, below = {init} | roots, sorted(roots - {pi})
    while below:
        parent = below.pop()
        kids = [p for p, (ppid, _, _) in members.items() if ppid == parent and p not in own]
        own.update(kids)
        below += kids
    others = {p for p, (_, state, _) in members.items() if p not in own and state not in ("Z", "X")}
    return init, own, others


def _empty(folder: str, mounts: frozenset[str] = frozenset(), inside: str = "") -> None:
    """Remove everything in ``folder`` (links unfollowed), leaving the folder. ``mounts``: mount
    points as the sandbox sees them, ``inside`` the sandbox's path of ``folder``: a mount point
    (the engine's own folders, bound into the private root under its ``/tmp``) and the folders
    leading to one are kept, their other entries removed."""
    for entry in os.scandir(folder):
        here = f"{inside}/{entry.name}"
        if here in mounts:
            continue
        if any(m.startswith(here + "/") for m in mounts):
            _empty(entry.path, mounts, here)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _mounts(init: int) -> frozenset[str]:
    """The sandbox's mount points (``/proc/INIT/mountinfo``'s fifth field, octal escapes undone)."""
    points = set()
    for line in Path(f"/proc/{init}/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4]))
    return frozenset(points)


def clean(engine: Engine) -> None:
    """Steps 1-5 on ``engine`` (blocking: run it in a worker thread). Raises :class:`CleanError`."""
    launch = engine.launch
    if engine.pid is None or not engine.alive:
        raise CleanError("the engine process is not running")
    argv = launch.argv
    if "pi-bridge-probe" not in argv:
        raise CleanError("the engine is not confined: its processes and /tmp cannot be told apart from the host's")
    pi_argv = argv[argv.index("pi-bridge-probe") + 1 :]
    init = _kill_the_rest(engine.pid, pi_argv)
    root = f"/proc/{init}/root"
    try:
        mounts = _mounts(init)
        if launch.header.get("seal", {}).get("cwd") == "private-temp" and launch.cwd:
            # Through the sandbox: the working folder may be a sized tmpfs there (the limits').
            _empty(f"{root}{launch.cwd}", mounts, launch.cwd)
        _empty(f"{root}/tmp", mounts, "/tmp")
        _empty(f"{root}/dev/shm", mounts, "/dev/shm")
        for entry in os.scandir(f"{root}/dev"):
            if entry.name not in DEV_ENTRIES and f"/dev/{entry.name}" not in mounts:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        if launch.tenant_clean is not None:
            launch.tenant_clean()
    except OSError as e:
        raise CleanError(f"the engine's folders could not be emptied ({e})") from None
    _remove_ipc(init)


def _kill_the_rest(bwrap: int, pi_argv: list[str]) -> int:
    """Steps 1-2: returns the init's pid once nothing but the sandbox's own is alive."""
    for _ in range(KILL_ROUNDS):
        init, _own, others = sandbox_processes(bwrap, pi_argv)
        if not others:
            return init
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)  # (SIGKILL is delivered as the process next runs)
    raise CleanError(f"processes the tools started were still alive after {KILL_ROUNDS} rounds of SIGKILL")


def _remove_ipc(init: int) -> None:
    """Step 4."""
    argv = ["nsenter", "-t", str(init), "-U", "-i", "--preserve-credentials", "ipcrm", "--all"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_IPC_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CleanError(
            f"the sandbox's System V IPC objects could not be removed ({e}; nsenter is util-linux's)"
        ) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise CleanError(f"the sandbox's System V IPC objects could not be removed ({why})")
