"""Confinement: the sealed Pi's process tree runs in a bubblewrap sandbox (SPEC §2).

The seal keeps Pi's discovery closed; confinement keeps its tools in. Pi's ``bash``, ``write``
and ``edit`` tools run with the bridge user's rights and Pi has no sandbox of its own, so the
whole engine runs under ``bwrap`` (Debian's ``bubblewrap``, 0.8.0 here). The rules, each with
where it comes from (``bwrap(1)`` of 0.8.0; verified on this machine, see the tests):

1. **Read-only everywhere** (``--ro-bind / /``, recursive: every submount read-only too), a
   minimal ``/dev`` (``--dev``: null, zero, random, tty…, never the host's disks) and the new
   PID namespace's own ``/proc``.
2. **Writable**: the engine's working folder and its private config folder (``--bind``), a
   private ``/tmp`` (``--tmpfs``; ``TMPDIR`` is set to it), and each ``--allow-write PATH``.
3. **The user's home hidden**: an empty tmpfs over ``$HOME``, remounted read-only (a write
   there fails with ``EROFS``), unless a ``--allow-read`` / ``--allow-write`` path is the home
   or holds it. ``--allow-read PATH`` shows one path read-only. What Pi itself needs is bound
   back read-only wherever it lives (its install, its Node, explicit extensions).
4. **The journals and the private folders out of sight**: each folder in
   :attr:`Sandbox.hidden` (the bridge's journal folder, those other live bridges registered)
   and the per-user root of every bridge's private folders (``private``:
   :mod:`bridge.profiles.orphans`, whatever ``TMPDIR`` is) gets an empty read-only tmpfs
   *after* the allowed paths, so allowing a parent does not show it; a folder the engine needs
   inside it (its own config and working folders in the root) is bound back on top. The probe
   lists each and expects exactly those.
5. **Nothing outlives the engine**: a new PID namespace (``--unshare-pid``) whose init (PID 1)
   is the probe's ``sh`` (``--as-pid-1``), which runs Pi as its child, reaps whatever is
   orphaned to it while it waits, and exits with Pi's status. When PID 1 exits, the kernel
   kills every process left in the namespace: ``setsid``, ``nohup`` and double forks do not
   leave it. The close ladder's SIGTERM / SIGKILL go to the engine's process group, which the
   init and Pi share with the outer ``bwrap``; a bridge that is SIGKILLed closes Pi's stdin, Pi
   exits, and the init with it. Not ``--die-with-parent``: its ``PR_SET_PDEATHSIG`` is tied to
   the *thread* that forked ``bwrap``, and trio forks in a worker thread that ends after 10 s
   idle, so every engine was SIGKILLed 10 s after its start. Not bwrap's own init (without ``--as-pid-1``): the
   outer ``bwrap`` exits on its status without reaping it, and the zombie waits for the
   system's init (seen here for up to 2 s).
6. **No way back out**: a new user namespace (``--unshare-user``) with every capability
   dropped (``--cap-drop ALL``: bwrap run by root otherwise *keeps* them, and a root with
   ``CAP_SYS_ADMIN`` could unmount the hidden home), no further user namespaces
   (``--disable-userns``, bwrap ≥ 0.8.0), and a new IPC namespace.
7. **Network** (:attr:`Sandbox.network`): the host's by default — the provider must be
   reached. ``--no-network``: a network namespace of its own with a relay to the provider
   alone (:mod:`bridge.profiles.netjail`).
8. **Fail closed** (:func:`find_bwrap`): no ``bwrap`` or a kernel that refuses the namespaces
   is a :class:`~bridge.profiles.command.ProfileError` naming the fix — never a fallback to an
   unconfined engine. ``--no-sandbox`` opts out, and the journal header says so.
9. **Verified from inside** at start-up: before starting Pi, a small ``sh`` probe *inside*
   the sandbox (:data:`PROBE`) tries to write outside the allowed folders, inside them, lists
   the home and the hidden folders, reads its PID, its namespace's init and its capabilities,
   and writes what it saw into the private config folder. :func:`check_probe` turns that
   into the seal check's problems and the journal's ``confinement`` note.
10. **Node's compile cache**, shared by the confined engines, read-only to them
    (:func:`compile_cache`).
11. **Tools one Landlock domain deeper than Pi** (issue 41, "evidence only from the engine"):
    Pi's ``bash`` tool runs through the tool shell (:mod:`bridge.profiles.toolshell`, Pi's
    ``shellPath``), which confines itself with Landlock before it becomes ``bash``: no ptrace
    of Pi or the init (so no ``/proc/<pi>/fd/*``, ``/proc/<pi>/mem``, ``pidfd_getfd``), no
    signals to them (ABI ≥ 6), writes only beneath the working folder, ``/tmp``, ``/dev`` and
    the ``--allow-write`` paths (:class:`Tools`). The tool shell, ``settings.json`` (its
    ``shellPath``) and the interpreter are shown read-only (a read-only bind on a file in the
    writable config folder is a mount point: it cannot be written, renamed or removed, by a
    tool or by Pi's own ``write`` tool). Fail closed (:func:`find_landlock`): a kernel without
    Landlock is a :class:`~bridge.profiles.command.ProfileError` naming the fix; the probe (rule
    9) runs the tool shell and checks from inside that it cannot open the init's
    ``/proc/1/fd/*``, signal it or write the config folder. The engine's stdio being sockets
    (:mod:`bridge.live.engine`) covers what runs inside Pi's own process.
12. **Limits** (:mod:`bridge.profiles.limits`): the engine joins its cgroup before ``bwrap``
    runs (an argv prefix), ``/tmp`` and a working folder the bridge made are sized tmpfs
    (``--size``, bubblewrap ≥ 0.7.0), and the probe reads from inside what it can verify.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from bridge.profiles import toolshell
from bridge.profiles.command import ProfileError
from bridge.profiles.limits import PROBE as LIMITS_PROBE
from bridge.profiles.limits import EngineLimits, check_limits

__all__ = [
    "BWRAP_ENV",
    "PROBE_FILE",
    "Bwrap",
    "Confined",
    "Sandbox",
    "Tools",
    "check_probe",
    "confine",
    "find_bwrap",
    "find_landlock",
]

#: Names the ``bwrap`` to use (default: ``bwrap`` on PATH).
BWRAP_ENV: Final = "PI_BRIDGE_BWRAP"
#: Where, in the private config folder, the probe writes what it saw.
PROBE_FILE: Final = "sandbox-probe"
_PROBE_TIMEOUT = 10.0
_FIX = (
    "run tools/setup/setup (it installs Debian's bubblewrap) or `apt-get install bubblewrap`, "
    "or pass --no-sandbox to run the engine unconfined"
)
_USERNS_FIX = (
    "the kernel must allow user namespaces (sysctl user.max_user_namespaces > 0; on Debian/Ubuntu "
    "kernel.unprivileged_userns_clone=1 and kernel.apparmor_restrict_unprivileged_userns=0), "
    "or pass --no-sandbox to run the engine unconfined"
)


@attrs.frozen
class Sandbox:
    """What the confined engine may see and write (``enabled=False``: ``--no-sandbox``)."""

    enabled: bool = True
    #: Shown read-only (``--allow-read``).
    allow_read: tuple[str, ...] = ()
    #: Shown read-write (``--allow-write``).
    allow_write: tuple[str, ...] = ()
    #: Folders made invisible (the journal's; the bridge adds it, see ``open_bridge``).
    hidden: tuple[str, ...] = ()
    #: False: ``--no-network`` (only the provider is reachable).
    network: bool = True


@attrs.frozen
class Bwrap:
    """A working bubblewrap."""

    path: str
    version: str
    #: ``--disable-userns`` (bubblewrap ≥ 0.8.0).
    disable_userns: bool
    #: ``--size`` for ``--tmpfs`` (bubblewrap ≥ 0.7.0: its ``--help`` lists it).
    tmpfs_size: bool = True


_found: dict[str, Bwrap] = {}


def find_bwrap() -> Bwrap:
    """The ``bwrap`` to use, checked once per process to create the sandbox's namespaces
    (rule 8). Raises :class:`ProfileError` naming the fix: no silent fallback."""
    named = os.environ.get(BWRAP_ENV)
    path = named or shutil.which("bwrap")
    if not path or not os.access(path, os.X_OK):
        where = f"{BWRAP_ENV}={named} is not an executable" if named else "no bwrap on PATH"
        raise ProfileError(f"the engine sandbox needs bubblewrap and there is none ({where}): {_FIX}")
    if path in _found:
        return _found[path]
    version = _run([path, "--version"], path).stdout.strip()
    m = re.search(r"(\d+)\.(\d+)", version)
    disable_userns = m is not None and (int(m[1]), int(m[2])) >= (0, 8)
    trial = [path, "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid", "--as-pid-1", "--die-with-parent"]
    trial += ["--cap-drop", "ALL", *(["--disable-userns"] if disable_userns else []), "--", "true"]
    done = _run(trial, path)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ProfileError(f"bubblewrap ({path}) cannot create the engine sandbox here ({why}): {_USERNS_FIX}")
    sized = "--size" in _run([path, "--help"], path).stdout
    found = _found[path] = Bwrap(
        path=path, version=version or "bubblewrap ?", disable_userns=disable_userns, tmpfs_size=sized
    )
    return found


_LANDLOCK_FIX = (
    "the engine's tools are confined with Landlock, which this kernel does not offer (Linux ≥ 5.13 "
    "built with CONFIG_SECURITY_LANDLOCK=y and landlock in its lsm= list; ≥ 6.12 also scopes "
    "signals): boot such a kernel, or pass --no-sandbox to run the engine unconfined"
)


def find_landlock() -> int:
    """The kernel's Landlock ABI (rule 11), ≥ 1. Raises :class:`ProfileError` naming the fix:
    no silent fallback to unconfined tools."""
    try:
        abi = toolshell.abi_version()
    except (OSError, AttributeError) as e:
        raise ProfileError(f"{_LANDLOCK_FIX} ({e})") from e
    if abi < 1:
        raise ProfileError(_LANDLOCK_FIX)
    return abi


@attrs.frozen
class Tools:
    """The tool shell (rule 11): the script in the config folder Pi's ``shellPath`` names,
    what it lets tools write, and the interpreter it runs with."""

    #: The script (:func:`bridge.profiles.toolshell.script`), inside the config folder.
    shell: str
    #: The kernel's Landlock ABI (:func:`find_landlock`).
    abi: int
    #: Folders tools may write beneath.
    write: tuple[str, ...]
    #: What the sandbox shows read-only for it: the interpreter, its prefix, ``settings.json``.
    needs: tuple[str, ...]

    def header(self) -> dict[str, Any]:
        """The journal header's ``tools``: what was enforced on every tool."""
        return {
            "confined": f"landlock ABI {self.abi}",
            "shell": self.shell,
            "write": list(self.write),
            "ptrace": "none out of the tool's domain (no /proc/<pi>/fd, /proc/<pi>/mem, pidfd_getfd)",
            "signals": "none out of the tool's domain"
            if self.abi >= 6
            else f"not scoped (Landlock ABI {self.abi} < 6)",
            "settings": "read-only",
        }


def _run(argv: list[str], path: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProfileError(f"bubblewrap ({path}) does not run ({e}): {_FIX}") from e


# --------------------------------------------------------------------------- the launch


@attrs.frozen
class Confined:
    """One engine's confinement: the argv to run, what the header says, and what the probe must see."""

    argv: list[str]
    header: dict[str, Any]
    probe: str
    expect: Mapping[str, Any]


def _real(p: str | Path) -> str:
    return os.path.realpath(os.path.expanduser(str(p)))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _existing(paths: Iterable[str], flag: str) -> list[str]:
    out: list[str] = []
    for p in paths:
        real = _real(p)
        if "\n" in real or not os.path.exists(real):
            raise ProfileError(f"{flag} {p}: no such file or folder")
        if real == "/" or any(_within(real, k) for k in ("/proc", "/dev", "/sys")):
            # / would undo the sandbox; the kernel's file systems cannot be bound into it
            # (tried: every start-up check then failed, five times, then engine-down).
            raise ProfileError(f"{flag} {p}: not a path the sandbox can open (give a folder or file of yours)")
        out.append(real)
    return out


def user_homes() -> list[str]:
    """The user's homes (rule 3): ``$HOME`` and the passwd entry's, real paths, existing
    folders other than ``/``, an inner one left out when the other holds it. Both: with
    ``HOME`` unset, ``/`` or pointing elsewhere, the passwd home (``/root``) is still the user's."""
    found: set[str] = set()
    candidates = [os.environ.get("HOME") or ""]
    try:
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    for c in candidates:
        real = _real(c) if c else "/"
        if real != "/" and os.path.isdir(real):
            found.add(real)
    return sorted(h for h in found if not any(_within(h, o) and h != o for o in found))


@attrs.frozen
class _Layout:
    """Where things are, as the sandbox shows them (real paths)."""

    #: The user's homes (:func:`user_homes`).
    homes: list[str]
    #: Those hidden (an empty read-only tmpfs): all but one an allowed path is or holds.
    hidden_homes: list[str]
    #: (bwrap flag, path) in mount order: what Pi needs and ``--allow-read`` read-only, then
    #: ``--allow-write``, the working and the config folder read-write, then the folders between
    #: those and what Pi needs inside them pinned (:func:`_pinned`), then again read-only what
    #: Pi needs that lies in one of those (a writable parent must not cover it).
    binds: list[tuple[str, str]]
    #: Folders hidden on top of the binds (those not already out of sight).
    hidden: list[str]


def _layout(
    sandbox: Sandbox, reads: list[str], writes: list[str], needed: list[str], own: list[str], private: str | None = None
) -> _Layout:
    homes = user_homes()
    hidden_homes = [h for h in homes if not any(_within(h, a) for a in reads + writes)]
    writable = writes + own
    again = [p for p in needed if any(_within(p, w) for w in writable)]
    binds = [("--ro-bind", p) for p in needed + reads] + [("--bind", p) for p in writable]
    binds += [("--bind", d) for d in _pinned(again, writable)]
    binds += [("--ro-bind", p) for p in again]
    covered = ["/tmp", *hidden_homes]
    hidden = sorted(
        h
        for h in {_real(h) for h in [*sandbox.hidden, *([private] if private else [])] if os.path.isdir(h)} - {"/"}
        # Under the private /tmp or a hidden home it is out of sight already, unless a bind shows it.
        if not any(_within(h, c) for c in covered) or any(_within(h, p) for _, p in binds)
    )
    # A hidden folder inside another (a pool's conversations in the bridges' private root) is
    # out of sight with it: its own tmpfs would need a folder made in the other's, which is
    # read-only by then (bwrap: "Can't mkdir …: Read-only file system", every start refused).
    hidden = [h for h in hidden if not any(o != h and _within(h, o) for o in hidden)]
    return _Layout(homes=homes, hidden_homes=hidden_homes, binds=binds, hidden=hidden)


def _pinned(again: list[str], writable: list[str]) -> list[str]:
    """The folders between a writable folder and what Pi needs inside it, parents first: each
    is bound onto itself (still writable), which makes it a mount point, and a mount point
    cannot be renamed or removed. A read-only bind protects what it covers, but a writable
    parent that is not itself a mount point can be renamed away with the mount in it, and a
    folder the tool made put in its place (``mv tools tools.moved; mkdir -p tools/pi``): the next
    Pi would run from that (found by a new-user trial)."""
    pins: set[str] = set()
    for p in again:
        root = max((w for w in writable if _within(p, w)), key=len)
        d = os.path.dirname(p)
        while d != root and _within(d, root):
            pins.add(d)
            d = os.path.dirname(d)
    return sorted(pins, key=lambda d: (d.count("/"), d))


#: What ``--no-network`` hides under an empty read-only tmpfs (rule 7): the host's unix sockets
#: (docker, databases, D-Bus) live there, and a read-only mount does not stop a ``connect()``.
RUN_DIRS: Final = ("/run", "/var/run")


def _run_dirs() -> list[str]:
    """:data:`RUN_DIRS` that exist, each once (``/var/run`` is usually a link to ``/run``)."""
    return sorted({_real(d) for d in RUN_DIRS if os.path.isdir(d)} - {"/"})


def _bwrap_args(lay: _Layout, sandbox: Sandbox, bwrap: Bwrap, cwd: str, limits: EngineLimits | None) -> list[str]:
    """The mounts in order (rules 1–4: later ones go on top), then the namespaces (5–7); the
    sizes of ``/tmp`` and of a working folder the bridge made (rule 11)."""
    tmp = limits.limits.tmp if limits is not None else None
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += [*(["--size", str(tmp)] if tmp else []), "--tmpfs", "/tmp"]
    runs = [] if sandbox.network else _run_dirs()
    for d in runs + lay.hidden_homes:
        args += ["--tmpfs", d]

    def bind(flag: str, p: str) -> list[str]:
        # A working folder the bridge made is a sized tmpfs (rule 12), also where it is mounted
        # again on a hidden folder that holds it (the bridges' private root, rule 4).
        if p == cwd and limits is not None and limits.cwd_tmpfs:
            return ["--size", str(limits.limits.disk), "--tmpfs", p]
        return [flag, p, p]

    for flag, p in lay.binds:
        args += bind(flag, p)
    for h in lay.hidden:
        args += ["--tmpfs", h]
        for flag, p in lay.binds:
            if _within(p, h) and p != h:
                args += bind(flag, p)
        args += ["--remount-ro", h]
    for d in runs + lay.hidden_homes:
        args += ["--remount-ro", d]
    # Not --die-with-parent: its PR_SET_PDEATHSIG belongs to the *thread* that forked bwrap, and
    # trio forks in a worker thread that ends after 10 s idle -- which killed every engine 10 s
    # after its start (found by trying it). Rule 5 says what ends the namespace instead.
    args += ["--unshare-user", "--unshare-pid", "--as-pid-1", "--unshare-ipc"]
    args += ["--cap-drop", "ALL"]
    args += ["--disable-userns"] if bwrap.disable_userns else []
    args += [] if sandbox.network else ["--unshare-net"]
    return args + ["--chdir", cwd]


def confine(
    sandbox: Sandbox,
    bwrap: Bwrap,
    argv: Sequence[str],
    *,
    cwd: str,
    config: str,
    needs: Iterable[str],
    own_cwd: bool,
    relay: str = "",
    provider: str | None = None,
    cache: str | None = None,
    watch_fd: int | None = None,
    limits: EngineLimits | None = None,
    tool_shell: str | None = None,
    tools: Tools | None = None,
    private: str | None = None,
) -> Confined:
    """Wrap ``argv`` (Pi's) in bwrap and the probe. ``needs``: what Pi reads (its install,
    its Node, extensions), bound back read-only wherever it is; ``relay``: ``sh`` lines run
    before Pi (``--no-network``'s); ``cache``: Node's compile cache, read-only; ``watch_fd``:
    the read end of a pipe only the bridge writes to (:data:`WATCH`), passed to bwrap;
    ``tools``: the tool shell (rule 11), shown read-only with what it needs, run by the probe;
    ``limits``: the engine's (rule 12), ``tool_shell`` their file (in ``needs``: read-only);
    ``private``: the per-user root of the bridges' private folders (rule 4), which holds
    ``cwd`` and ``config``."""
    if tools is not None:
        needs = [*needs, tools.shell, *tools.needs]
    if limits is not None and (limits.limits.tmp or limits.cwd_tmpfs) and not bwrap.tmpfs_size:
        raise ProfileError(
            f"{bwrap.version} cannot size the engine's /tmp and working folder (--size needs bubblewrap 0.7.0 or "
            "later): upgrade bubblewrap, or pass --engine-tmp-size 0 --engine-disk 0 to run without those limits"
        )
    reads = _existing(sandbox.allow_read, "--allow-read")
    writes = _existing(sandbox.allow_write, "--allow-write")
    cwd, config = _real(cwd), _real(config)
    if cwd == "/" or any(_within(cwd, k) for k in ("/proc", "/dev", "/sys")):
        # / writable would undo the sandbox (bwrap cannot even make the rest read-only under
        # it: every start failed, five times, then engine-down).
        raise ProfileError(f"--engine-cwd {cwd}: not a folder the sandbox can give the engine (give a folder of yours)")
    needed = sorted({_real(p) for p in [*needs, *([cache] if cache else [])] if os.path.exists(p)})
    for flag, w in [*(("--allow-write", w) for w in writes), ("--engine-cwd", cwd)]:
        inside = next((p for p in needed if _within(w, p)), None)
        if inside is not None:
            # Shown writable it would let a tool change what every later Pi runs; shown
            # read-only it would not be what was asked for.
            raise ProfileError(
                f"{flag} {w} is inside {inside}, which the engine runs from (Pi's install, its Node, "
                "an extension or its compile cache) and the sandbox shows read-only: give another folder"
            )
    private = _real(private) if private else None
    lay = _layout(sandbox, reads, writes, needed, [cwd, config], private)
    for h in lay.hidden:
        if h == private:
            continue  # the engine's own folders in it are bound back
        # The hidden folder would be mounted over what was asked for: Pi would see it empty and
        # read-only, and say nothing (found by new-user trials of bridge acp and of the sandbox).
        if _within(cwd, h):
            raise ProfileError(
                f"the engine's working folder {cwd} is inside {h}, a journal folder the sandbox hides "
                "from the engine: put the journal (--journal) somewhere else"
            )
        for w in writes:
            if _within(w, h):
                raise ProfileError(
                    f"--allow-write {w} is inside {h}, a journal folder the sandbox hides from the engine: "
                    "put the journal (--journal) somewhere else, or give another folder"
                )
    for h in lay.hidden_homes:
        if cwd == h:
            # The home is hidden by an empty, read-only folder mounted over it, which would be
            # the working folder too.
            raise ProfileError(
                f"the engine's working folder {cwd} is the home the sandbox hides from the engine: "
                f"work in a folder inside it, or show it with --allow-write {cwd}"
            )
    homes = lay.hidden_homes
    writable = [config, "/tmp"] + ([cwd] if own_cwd else [])
    runs = [] if sandbox.network else _run_dirs()
    refused = [p for p in homes + lay.hidden + runs + ["/"] if not any(_within(p, w) for w in writes)]
    shown = {h: sorted({_first_below(p, h) for _, p in lay.binds if _within(p, h) and p != h}) for h in lay.hidden}
    probe = os.path.join(config, PROBE_FILE)
    script = _probe_script(probe, refused=refused, writable=writable, homes=homes, hidden=lay.hidden)
    watch = WATCH.replace("{fd}", str(int(watch_fd))) if watch_fd is not None else ""
    limit_lines = ""
    if limits is not None:
        shell = shlex.quote(tool_shell) if tool_shell else "/dev/null"
        limit_lines = LIMITS_PROBE.replace("{cwd}", shlex.quote(cwd)).replace("{shell}", shell)
    script = script.replace("{limits}", limit_lines).replace("{watch}", watch).replace("{relay}", relay)
    script = script.replace(
        "{tools}", _tool_probe(tools, config=config, cwd=cwd if own_cwd else None) if tools is not None else ""
    )
    prefix = limits.prefix if limits is not None else []
    full = [*prefix, bwrap.path, *_bwrap_args(lay, sandbox, bwrap, cwd, limits), "--", "/bin/sh", "-c", script]
    expect = {
        "refused": refused,
        "writable": writable,
        "home": ", ".join(homes) or None,
        "home_entries": sorted({_first_below(p, h) for _, p in lay.binds for h in homes if _within(p, h) and p != h}),
        "hidden": lay.hidden,
        "hidden_shown": shown,
        "network": sandbox.network,
        **({"limits": {**limits.expect, "cwd_path": cwd}} if limits is not None else {}),
        "tools": {"abi": tools.abi, "cwd": own_cwd} if tools else None,
    }
    header = {
        "tool": bwrap.version,
        "read_only": "/",
        "write": [cwd, config, "/tmp (private)", *writes],
        "read": reads,
        "home": _home_words(lay),
        "hidden": lay.hidden,
        "pid_namespace": True,
        "die_with_parent": False,
        "capabilities": "none",
        "compile_cache": f"{cache} (read-only)" if cache else None,
        "network": "host" if sandbox.network else f"none but the provider at {provider}",
        "limits": limits.header if limits is not None else "none",
        **({"tools": tools.header()} if tools is not None else {}),
    }
    return Confined(argv=[*full, "pi-bridge-probe", *argv], header=header, probe=probe, expect=expect)


def _home_words(lay: _Layout) -> str:
    """The header's ``home``: what was hidden, what the user allowed, or that none was found."""
    words = [f"{', '.join(lay.hidden_homes)} hidden (empty, read-only)"] if lay.hidden_homes else []
    shown = [h for h in lay.homes if h not in lay.hidden_homes]
    words += [f"{', '.join(shown)} visible (allowed)"] if shown else []
    return "; ".join(words) or "none found ($HOME unset or /, and no passwd home)"


def compile_cache(
    bwrap: Bwrap, pi_version: str, pi_argv: Sequence[str], *, needs: Sequence[str], env: Mapping[str, str], scratch: str
) -> str | None:
    """Node's compile cache for the confined Pi, read-only to it (rule 10); None when it cannot
    be made (the engine then only starts slower).

    Pi turns Node's compile cache on (``module.enableCompileCache()``), in ``$TMPDIR`` by
    default: in the private ``/tmp`` it is empty at every start, and compiling Pi's bundle
    again costs about 200 ms of CPU per start (``tools/bench/bench_sandbox``). A cache the engine
    could write would outlive it and be loaded by the next engine — code a tool left behind
    would run in every later Pi — so the engine only reads it. It is filled once per Pi version
    by ``pi --version`` (no model, no tools: it loads the same 23 files as an RPC start) in a
    sandbox where the cache alone is writable.
    """
    folder = compile_cache_folder(pi_version, pi_argv)
    if folder is None:
        return None
    if (folder / ".warm").exists():
        return str(folder)
    work = tempfile.mkdtemp(prefix="warm-up-", dir=scratch)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        warm = confine(
            Sandbox(allow_write=(str(folder),)),
            bwrap,
            [*pi_argv, "--version"],
            cwd=work,
            config=work,
            needs=needs,
            own_cwd=False,
        )
        if _run_group(warm.argv, {**env, "NODE_COMPILE_CACHE": str(folder), "TMPDIR": "/tmp"}, work) != 0:
            return None
        (folder / ".warm").touch()
    except (OSError, subprocess.TimeoutExpired, ProfileError):
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(folder)


def compile_cache_folder(pi_version: str, pi_argv: Sequence[str]) -> Path | None:
    """Where :func:`compile_cache` keeps one install's cache (made or not yet): one per install
    and runtime, as V8 refuses another version's entries anyway. None when there is no cache
    folder to make it in (:func:`_cache_base`). (The suite also asks it whether a test started
    the real pinned Pi: tests/conftest.py.)"""
    base = _cache_base()
    if base is None:
        return None
    key = hashlib.sha256("\0".join([pi_version, *map(_real, pi_argv)]).encode()).hexdigest()[:12]
    return base / "pi-bridge" / "node-compile-cache" / f"pi-{pi_version}-{key}"


def _cache_base() -> Path | None:
    """``$XDG_CACHE_HOME`` (its parent must exist), else ``.cache`` in the user's home: ``$HOME``
    when it is a folder other than ``/``, else the passwd home. None when there is neither:
    nothing is made under ``/`` or under a home that does not exist."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg) and _real(xdg) != "/":
        return Path(xdg) if os.path.isdir(os.path.dirname(_real(xdg))) else None
    home = os.environ.get("HOME") or ""
    if not home or _real(home) == "/" or not os.path.isdir(home):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return None
    if not home or _real(home) == "/" or not os.path.isdir(home):
        return None
    return Path(home) / ".cache"


def _run_group(argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout: float = 60.0) -> int | None:
    """Run ``argv`` in a process group of its own and wait (at most ``timeout``); whatever ends
    the wait -- the timeout, a signal's SystemExit, KeyboardInterrupt -- the whole group is
    killed first: without ``--die-with-parent``, the sandbox's own init outlives a bwrap that
    was killed alone (found by a SIGTERM during a warm-up). Returns the exit status (None: killed)."""
    proc = subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _first_below(path: str, folder: str) -> str:
    return path[len(folder.rstrip("/")) + 1 :].split("/", 1)[0]


def disabled_header() -> dict[str, Any]:
    """The header's ``sandbox`` when the user opted out."""
    return {"enabled": False, "why": "--no-sandbox", "tools": "unconfined (--no-sandbox)"}


# --------------------------------------------------------------------------- the probe

#: Run by ``/bin/sh`` as the sandbox's PID 1, before it runs Pi (rules 5 and 9). ``{…}`` are
#: filled with shell-quoted words. Its standard input is ``/dev/null``, not the engine's stdin: that
#: is a socket (:mod:`bridge.live.engine`), and a ``bash`` whose stdin is a socket takes itself
#: for one started by ``sshd`` and reads ``/etc/bash.bashrc`` instead of ``BASH_ENV`` (Debian's
#: bash, ``SSH_SOURCE_BASHRC``; found when the limits' probe saw a tool's ``oom_score_adj`` 0).
#: ``true > F`` rather than ``: > F``: a failed redirection of a special builtin ends ``sh``.
PROBE: Final = r"""{
echo "pid=$$"
echo "init=$(cat /proc/1/comm 2>/dev/null)"
echo "caps=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)"
for d in {refused}; do
  if (true > "$d/.pi-bridge-probe") 2>/dev/null; then rm -f "$d/.pi-bridge-probe"; echo "writable=$d"
  else echo "refused=$d"; fi
done
for d in {writable}; do
  if (true > "$d/.pi-bridge-probe") 2>/dev/null; then rm -f "$d/.pi-bridge-probe"; echo "wrote=$d"
  else echo "unwritable=$d"; fi
done
for d in {homes}; do ls -A "$d" 2>/dev/null | sed 's/^/home-entry=/'; done
for d in {hidden}; do echo "hidden-entries=$(ls -A "$d" 2>/dev/null | wc -l) $d"; ls -A "$d" 2>/dev/null | sed "s|^|hidden-entry=$d/|"; done
sed -n '3,$s/^ *\([^:]*\):.*/net=\1/p' /proc/net/dev
{limits}{tools}} </dev/null > {probe} 2>/dev/null
{watch}{relay}"$@"
exit $?
"""

#: The init's watch on the bridge (rule 5): ``cat`` reads a pipe whose only writer is the
#: bridge (``{fd}``, given to bwrap with ``pass_fds``) and sees EOF when the bridge is gone,
#: however it ended; then ``kill -KILL -1`` ends every process of the namespace but the init,
#: Pi among them (also a stopped Pi, which never reads the EOF on its stdin), and the init
#: exits. A path, not a redirection: ``dash`` takes no fd above 9, and opening an anonymous
#: pipe through ``/proc`` never blocks. ``-KILL -1``, not ``-s KILL -1`` (dash refuses it).
WATCH: Final = "(cat /proc/self/fd/{fd} >/dev/null 2>&1; kill -KILL -1) </dev/null >/dev/null 2>&1 &\n"


#: Run by the tool shell inside the probe (rule 11; ``bash -c``): a tool must not open the
#: init's descriptors (its stdio are sockets, which no one can open through ``/proc``; the
#: watch is a pipe, which anyone who may ptrace the init can), read where they lead, signal
#: it, or write the config folder; it must write the working folder. ``{…}``: shell-quoted.
TOOL_PROBE: Final = r"""echo tool-run=1
for f in /proc/1/fd/*; do
  if (true < "$f") 2>/dev/null; then echo "tool-opened=$f"; fi
  if readlink "$f" >/dev/null 2>&1; then echo "tool-readlink=$f"; fi
done
if kill -0 1 2>/dev/null; then echo tool-signal=sent; else echo tool-signal=refused; fi
if (true > {config}/.pi-bridge-probe) 2>/dev/null; then rm -f {config}/.pi-bridge-probe; echo tool-config=writable
else echo tool-config=refused; fi
"""
#: Added to :data:`TOOL_PROBE` when the working folder is the engine's own (the probe leaves
#: a user's folder alone, as rule 9's writes do).
TOOL_PROBE_CWD: Final = r"""if (true > {cwd}/.pi-bridge-probe) 2>/dev/null; then rm -f {cwd}/.pi-bridge-probe; echo tool-cwd=wrote
else echo tool-cwd=unwritable; fi
"""


def _tool_probe(tools: Tools, *, config: str, cwd: str | None) -> str:
    """The probe's lines that run :data:`TOOL_PROBE` through the tool shell (its errors kept);
    ``cwd``: the engine's own working folder, tried too."""
    body = TOOL_PROBE.replace("{config}", shlex.quote(config))
    body += TOOL_PROBE_CWD.replace("{cwd}", shlex.quote(cwd)) if cwd is not None else ""
    run = f"{shlex.quote(tools.shell)} -c {shlex.quote(body)} 2>&1 | sed '/^tool-/!s/^/tool-error=/'\n"
    return run


def _probe_script(probe: str, *, refused: list[str], writable: list[str], homes: list[str], hidden: list[str]) -> str:
    def words(paths: Sequence[str]) -> str:
        return " ".join(shlex.quote(p) for p in paths) or "''"

    fill = {
        "{refused}": words(refused),
        "{writable}": words(writable),
        "{homes}": words(homes),
        "{hidden}": words(hidden),
        "{probe}": shlex.quote(probe),
    }
    script = PROBE
    for k, v in fill.items():
        script = script.replace(k, v)
    # An empty word list must not run the loop body on ''.
    return script.replace("for d in ''; do", "for d in; do").replace("for d in ; do", "for d in; do")


def check_probe(probe: str, expect: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The seal check's problems with the confinement the probe saw, and what it verified
    (the journal's ``confinement`` note)."""
    try:
        text = Path(probe).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ["the sandbox probe left no report: the confinement could not be verified from inside"], {}
    seen: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        seen.setdefault(key, []).append(value)
    problems: list[str] = []
    pid, init, caps = (seen.get(k, ["?"])[0] for k in ("pid", "init", "caps"))
    if pid != "1":
        problems.append(f"the engine is not in its own PID namespace (its init has pid {pid}, not 1)")
    if caps.strip("0") != "":
        problems.append(f"the engine kept capabilities ({caps}) in its sandbox")
    for d in seen.get("writable", []):
        problems.append(f"the engine could write to {d}, outside its allowed folders")
    problems += [f"the engine cannot write to its own folder {d}" for d in seen.get("unwritable", [])]
    missing = set(expect["refused"]) - set(seen.get("refused", []))
    problems += [f"the probe did not try writing to {d}" for d in sorted(missing - set(seen.get("writable", [])))]
    extra = sorted(set(seen.get("home-entry", [])) - set(expect["home_entries"]))
    if extra:
        problems.append(f"the hidden home {expect['home']} shows {', '.join(extra[:5])}")
    shown: Mapping[str, list[str]] = expect.get("hidden_shown", {})
    for entry in seen.get("hidden-entries", []):
        count, _, folder = entry.partition(" ")
        listed = [e[len(folder) + 1 :] for e in seen.get("hidden-entry", []) if e.startswith(folder + "/")]
        extra = sorted(set(listed) - set(shown.get(folder, [])))
        if count.strip() != str(len(shown.get(folder, []))) or extra:
            problems.append(f"the hidden folder {folder} shows {count.strip()} entries to the engine")
    nets = sorted(set(seen.get("net", [])) - {"lo"})
    if not expect["network"] and nets:
        problems.append(f"--no-network, but the engine sees the network interfaces {', '.join(nets)}")
    limited: dict[str, Any] | None = None
    if "limits" in expect:
        more, limited = check_limits(seen, expect["limits"])
        problems += more
    tools = expect.get("tools")
    if tools:
        problems += _tool_problems(seen, tools)
    verified = {
        "pid": pid,
        "init": init,
        "capabilities": caps,
        "writes_refused": seen.get("refused", []),
        "writes_allowed": seen.get("wrote", []),
        "home_entries": seen.get("home-entry", []),
        "hidden_entries": {e.partition(" ")[2]: e.partition(" ")[0] for e in seen.get("hidden-entries", [])},
        "network_interfaces": seen.get("net", []),
        **({"limits": limited} if limited is not None else {}),
    }
    if tools:
        verified["tools"] = {
            "ran": bool(seen.get("tool-run")),
            "init_fds_opened": seen.get("tool-opened", []),
            "init_fds_read": seen.get("tool-readlink", []),
            "signal_to_init": (seen.get("tool-signal") or ["?"])[0],
            "config_write": (seen.get("tool-config") or ["?"])[0],
            "cwd_write": (seen.get("tool-cwd") or ["?"])[0],
        }
    return problems, verified


def _tool_problems(seen: Mapping[str, list[str]], tools: Mapping[str, Any]) -> list[str]:
    """The seal check's problems with the tool shell (rule 11) as :data:`TOOL_PROBE` saw it."""
    if not seen.get("tool-run"):
        why = "; ".join(seen.get("tool-error", [])[-3:]) or "no output"
        return [f"the tool shell did not run in the sandbox ({why}): tools cannot be confined"]
    problems = [f"a tool could open the sandbox init's {f}" for f in seen.get("tool-opened", [])]
    problems += [f"a tool could read where the sandbox init's {f} leads" for f in seen.get("tool-readlink", [])]
    if tools["abi"] >= 6 and seen.get("tool-signal") != ["refused"]:
        problems.append("a tool could signal the sandbox's init (Landlock's signal scope is not in force)")
    if seen.get("tool-config") != ["refused"]:
        problems.append("a tool could write the engine's private config folder")
    if tools["cwd"] and seen.get("tool-cwd") != ["wrote"]:
        problems.append("a tool cannot write the engine's working folder")
    return problems
