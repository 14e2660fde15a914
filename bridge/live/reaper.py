"""The reaper: a tiny parent an engine runs under, so that nothing it starts outlives it.

Run as ``python -I -S reaper.py STATUS_FD -- ARGV...`` (by its path, standard library only:
no package import; ~30 ms with ``ctypes``). It is the process the bridge spawns; the engine is
its only child, started with ``posix_spawnp`` in the reaper's process group, with the stdin, stdout and
stderr the bridge gave it (the reaper keeps no copy of them: the engine's pipes are direct,
and a closed stdout means what it meant without the reaper).

Rules, and where they come from:

- **A child subreaper** (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4; prctl(2)): a process
  orphaned anywhere below it -- ``setsid sleep &``, a double-forked daemon, ``nohup … &`` --
  is re-parented to the reaper, not to the system's init, so the reaper can always find and
  kill it. Set here, never on the bridge's own process (it may be a user's program).
- **When the engine exits**, every process left below the reaper is SIGKILLed and reaped:
  the reaper's children (those it adopted, which it has not reaped, so their pids are still
  theirs) are killed, each reaped as it ends; the orphans of those come to the reaper in turn
  and are killed next, until none is left (``waitpid`` answers ECHILD). Then the reaper exits
  with the engine's own status: its exit code, or the signal that killed it (the reaper kills
  itself with it, core dumps off), so the journal's ``exit`` and the receipts are as before.
- **Signals**: SIGTERM, SIGINT and SIGHUP sent to the reaper are passed to the engine (the
  close ladder's SIGTERM goes to the whole process group, which the engine is in, so it is
  passed on only when the engine left the group). SIGUSR1 is the ladder's last rung for an
  engine under a reaper (:class:`bridge.live.engine.Engine`): the engine is SIGKILLed, and
  everything below follows as above -- a SIGKILL of the reaper itself would orphan them.
- **A launch that fails** (no such program, not executable) is reported on ``STATUS_FD`` (a
  pipe from the bridge, closed on a successful start: ``errno`` as text), so the bridge raises
  the same OSError it raised when it spawned the engine itself.

- **When the bridge dies** (SIGKILLed, or any death that runs none of its code): the reaper
  asked the kernel for SIGUSR2 at its parent's death (``prctl(PR_SET_PDEATHSIG)``), and on it,
  if its parent is no longer the bridge (``getppid()`` changed: the signal also comes when the
  bridge's *thread* that spawned it ends, trio spawning from a worker thread, and then the
  parent is still the bridge), SIGKILLs the engine; everything below follows as above. Before,
  only the engine's stdin's EOF told it, and an engine that ignored the EOF outlived the
  bridge with all it started (the confined Pi's PID namespace covered that case already:
  :mod:`bridge.profiles.sandbox`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: prctl(2)'s option numbers (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

#: The signals Python starts ignored (SIGPIPE, SIGXFSZ) are reset for the engine, as
#: ``subprocess``'s ``restore_signals`` does; the reaper's own handlers reset with them.
_DEFAULT_FOR_ENGINE = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
)

#: While children are left: how long between two looks (only after the engine's exit).
POLL = 0.005


def _subreaper() -> bool:
    """Become the child subreaper, and ask for SIGUSR2 when the parent dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR2, 0, 0, 0)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    """The reaper's children now (``/proc/PID/task/TID/children``; else a scan of ``/proc``)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me:
                found.append(int(name))
    return found


def _kill_the_rest() -> None:
    """SIGKILL and reap everything left below the reaper; ends when nothing is (ECHILD)."""
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(POLL)


def _exit_as(status: int) -> None:
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        os._exit(code)
    sig = -code
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        pass
    try:
        signal.signal(sig, signal.SIG_DFL)  # (SIGKILL's cannot be set, nor needs to be)
    except (OSError, ValueError):
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(args: list[str]) -> None:
    status_fd, sep, argv = int(args[0]), args[1], args[2:]
    if sep != "--" or not argv:
        os.write(2, b"usage: reaper.py STATUS_FD -- ARGV...\n")
        os._exit(2)
    bridge = os.getppid()
    _subreaper()
    engine = 0
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        if sig == signal.SIGUSR2 and os.getppid() == bridge:
            return  # a thread of the bridge ended, not the bridge
        if not engine:
            pending.append(sig)
            return
        try:
            if sig in (signal.SIGUSR1, signal.SIGUSR2):
                os.kill(engine, signal.SIGKILL)
            elif os.getpgid(engine) != os.getpgrp():
                os.kill(engine, sig)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    if os.getppid() != bridge:  # the bridge died before the kernel was asked
        pending.append(signal.SIGUSR2)
    os.set_inheritable(status_fd, False)
    try:
        engine = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=_DEFAULT_FOR_ENGINE, setsigmask=())
    except OSError as e:
        os.write(status_fd, str(e.errno or 0).encode())
        os._exit(127)
    os.close(status_fd)
    # The engine's stdio is its own: the reaper's copies go, so an EOF means what it meant.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for late in pending:
        forward(late, None)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # the engine, or an orphan that ended first
        except ChildProcessError:  # (cannot be: the engine is a child until it is reaped here)
            os._exit(0)
        if pid == engine:
            break
    _kill_the_rest()
    _exit_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
