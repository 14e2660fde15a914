"""Limits: what one confined engine may take of the machine (SPEC §5, the tool boundary).

Pi's tools run attacker code; without limits one ``bash`` call allocated 500 MiB, started 200
processes and wrote 100 MiB into a 12 GB private ``/tmp`` (issue 41). Each engine gets four
limits (:class:`Limits`; ``None``: lifted), enforced as strongly as the machine allows, and the
journal header says which way (:attr:`EngineLimits.header`). The rules, and where they come from:

1. **A cgroup per engine** (memory and process count), when the bridge may make one:

   - *cgroup v2*: the bridge's own cgroup (``0::PATH`` in ``/proc/self/cgroup``) is writable and
     has ``memory`` and ``pids`` in its ``cgroup.subtree_control`` (a delegated subtree,
     ``Documentation/admin-guide/cgroup-v2.rst`` "Delegation"): a child ``pi-bridge-PID-N`` with
     ``memory.max``, ``memory.swap.max`` 0 and ``pids.max``. v2's "no internal processes" rule
     lets only the root cgroup (or one without processes) enable controllers for its children,
     and the bridge is in its own: in practice v2 is used when the bridge runs in the root
     cgroup. Moving the bridge into a leaf, or a launcher-made scope per engine (``systemd-run
     --scope``), would widen it; not done (no v2 controllers on this machine to try them).
   - *cgroup v1*: the ``memory`` and ``pids`` hierarchies, the bridge's own cgroup in each
     writable (root, as CI here; kernel 6.18 still has both): a child in each, with
     ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, so swap does not extend it,
     where swap is accounted) and ``pids.max``.

   The engine joins it before anything of it runs (:attr:`EngineLimits.prefix`): its argv starts
   with ``sh -c`` writing its own pid into each ``cgroup.procs`` and then ``exec``-ing ``bwrap``
   (same pid), so there is no moment where a child could start outside. Inside, the cgroup files
   are on the read-only ``/`` (sandbox rule 1): a tool cannot move itself out (``EROFS``; the
   probe checks it, :data:`PROBE`). The cgroup is removed when the engine is reaped (every task
   in it is gone once the sandbox's PID 1 has exited); one a killed bridge left is swept by the
   next (:func:`sweep_cgroups`, named for the bridge's pid as the private folders are).
   A pids limit counts tasks, threads included: Pi's Node has about a dozen.

2. **The OOM killer takes the tool, not Pi.** Pi and its tools share the memory cgroup; at the
   limit the kernel kills the task with the highest ``oom_badness`` (its RSS plus
   ``oom_score_adj`` x the limit / 1000, ``mm/oom_kill.c``). Pi's Node holds ~150 MiB, so under a
   small limit a tool's allocation could get Pi killed instead (measured: see
   ``docs/pages/guide/confinement.md`` "Limits"). Every tool raises its own ``oom_score_adj`` to
   :data:`TOOL_OOM_SCORE_ADJ` first (raising needs no privilege; ``proc(5)``): the tool shell
   does it before it confines itself (:mod:`bridge.profiles.toolshell` rule 5), and its Landlock
   rules then deny the tool any write to ``/proc``, so it cannot lower it again; ``BASH_ENV``
   (:data:`TOOL_SHELL_FILE` in the private config folder, read-only in the sandbox, sourced by
   ``bash -c`` before the command: ``bash(1)`` INVOCATION) does the same where no tool shell
   runs. Pi stays at the bridge's value.

3. **Otherwise rlimits**, weaker, set in the same tool shell (hard and soft, so a tool cannot
   raise them again; Pi itself is not limited): ``RLIMIT_DATA`` for memory (per process: ten
   processes may take ten times it), not ``RLIMIT_AS``, which counts address space V8 only
   reserves (Node needs gigabytes of it for its heap cage and WebAssembly, and fails to start
   under a small one); ``RLIMIT_NPROC`` for processes, which counts the uid's tasks in the
   sandbox's own user namespace (ucounts, Linux 5.14: measured, 30 processes of the same uid
   outside did not count, 19 forks inside passed a limit of 20), and which the kernel never
   enforces for root (``kernel/fork.c``
   ``copy_process``: ``INIT_USER`` passes): as root with no cgroup to make, a process limit
   cannot be kept and is refused (fail closed; ``--engine-processes 0`` runs without).

4. **Sizes of the writable folders**: ``/tmp`` is ``bwrap --size BYTES --tmpfs /tmp``
   (``--size`` is in bubblewrap 0.7.0's and later ``--help``; an older one is refused, naming
   the fix). The working folder the bridge makes itself (``pi-bridge-cwd-*``) is a sized tmpfs
   mounted at its path in the sandbox, so Pi sees the same path; its files live in the sandbox's
   mount namespace (the host folder stays empty; the bridge reaches them, as root, under
   ``/proc/PID/root``) and go with the engine. A working folder the user gives
   (``--engine-cwd``) is theirs, on their disk and its quotas: not bounded (said in the header).
   Both tmpfs are memory: with a memory cgroup, what a tool writes there counts in it too.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from bridge.profiles.command import ProfileError

__all__ = [
    "DEFAULT_LIMITS",
    "TOOL_SHELL_FILE",
    "EngineLimits",
    "Limits",
    "check_limits",
    "format_size",
    "parse_count",
    "parse_size",
    "sweep_cgroups",
]

_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_OFF: Final = ("0", "none", "off")


def parse_size(text: str | int | None) -> int | None:
    """``2G``, ``512M``, ``16MiB``, ``1048576`` (bytes; binary units) -> bytes; ``0``/``none`` -> None (lifted)."""
    if text is None or isinstance(text, int):
        return text or None
    if text.strip().lower() in _OFF:
        return None
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size (e.g. 512M, 2G; 0 or none lifts the limit)")
    value = int(float(m[1]) * _UNITS[m[2].lower()])
    if value < 1 << 20:
        raise ValueError(f"{text!r} is less than 1 MiB (0 or none lifts the limit)")
    return value


def parse_count(text: str | int | None) -> int | None:
    """A process count; ``0``/``none`` -> None (lifted)."""
    if text is None or isinstance(text, int):
        return text or None
    if text.strip().lower() in _OFF:
        return None
    if not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a whole number (0 or none lifts the limit)")
    return int(text) or None


def format_size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


@attrs.frozen
class Limits:
    """One engine's limits (``None``: lifted). Strings are parsed (``"2G"``, ``"none"``)."""

    #: Memory of the engine: Pi and its tools together in a cgroup; each tool process's data
    #: (``RLIMIT_DATA``) without one. Default 2 GiB.
    memory: int | None = attrs.field(default=2 << 30, converter=parse_size)
    #: Processes (tasks, threads included, in a cgroup; the uid's without one). Default 512.
    processes: int | None = attrs.field(default=512, converter=parse_count)
    #: The private ``/tmp`` (a tmpfs). Default 512 MiB: both tmpfs full leave Pi and its tools
    #: half the default memory (their pages count in the memory cgroup, and without swap they
    #: cannot be reclaimed: at the limit the OOM killer takes the tools, then Pi).
    tmp: int | None = attrs.field(default=512 << 20, converter=parse_size)
    #: The private working folder (a tmpfs; a given ``--engine-cwd`` is not bounded). Default 512 MiB.
    disk: int | None = attrs.field(default=512 << 20, converter=parse_size)


DEFAULT_LIMITS: Final = Limits()

#: The tool shell's file in the private config folder (``BASH_ENV``; rules 2 and 3).
TOOL_SHELL_FILE: Final = "tool-shell.sh"
#: What the tool shell raises its ``oom_score_adj`` to (rule 2; the kernel's maximum).
TOOL_OOM_SCORE_ADJ: Final = 1000
#: The engine's argv prefix (rule 1): join each cgroup named before ``--``, then exec the rest.
JOIN: Final = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
_JOIN_NAME: Final = "pi-bridge-cgroup"
#: The cgroups a bridge makes: ``pi-bridge-PID-N`` (PID: the bridge's).
_CGROUP_NAME: Final = re.compile(r"pi-bridge-(\d+)-\d+$")
_counter = itertools.count(1)


# --------------------------------------------------------------------------- where cgroups go


@attrs.frozen
class CgroupRoot:
    """Where this bridge may make cgroups: ``version`` 2 (one folder) or 1 (``memory`` and ``pids``)."""

    version: int
    #: controller -> the bridge's own cgroup folder there (v2: both the same folder).
    folders: Mapping[str, str]


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """``/proc/self/cgroup`` -> {controller (``""`` for v2): path}."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                out[c] = parts[2]
    return out


def _mounts(mountinfo: str) -> dict[str, str]:
    """``/proc/self/mountinfo`` -> {controller (``""`` for cgroup2): mount point}, the root of each
    hierarchy only (a bind of a sub-cgroup has another root and is left out)."""
    out: dict[str, str] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or fields[3] != "/":
            continue
        point = fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2":
            out.setdefault("", point)
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                out.setdefault(opt, point)
    return out


def find_cgroup_root(proc: str = "/proc/self") -> CgroupRoot | None:
    """Where this bridge may make an engine's cgroup (rule 1), or None: v2 first, then v1."""
    try:
        own = _own_cgroups(Path(proc, "cgroup").read_text())
        mounts = _mounts(Path(proc, "mountinfo").read_text())
    except OSError:
        return None
    if "" in own and "" in mounts:
        folder = os.path.join(mounts[""], own[""].lstrip("/"))
        try:
            enabled = Path(folder, "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        if {"memory", "pids"} <= set(enabled) and _writable(folder, "cgroup.procs"):
            return CgroupRoot(2, {"memory": folder, "pids": folder})
    folders: dict[str, str] = {}
    for c in ("memory", "pids"):
        if c not in own or c not in mounts:
            return None
        folder = os.path.join(mounts[c], own[c].lstrip("/"))
        if not _writable(folder, "cgroup.procs"):
            return None
        folders[c] = folder
    return CgroupRoot(1, folders)


def _writable(folder: str, file: str) -> bool:
    return os.access(folder, os.W_OK) and os.access(os.path.join(folder, file), os.W_OK)


# --------------------------------------------------------------------------- one engine's


@attrs.define
class EngineLimits:
    """One engine's limits as made: the cgroup folders (removed by :meth:`remove`), the argv
    prefix that joins them, the tool shell's lines, the sandbox's tmpfs sizes, the journal
    header's words and what the probe must see."""

    limits: Limits
    #: The cgroup folders made (v1: memory's, pids'; v2: one).
    cgroups: list[str] = attrs.field(factory=list)
    cgroup_version: int | None = None
    #: The engine's argv starts with this (rule 1; empty without a cgroup).
    prefix: list[str] = attrs.field(factory=list)
    #: The tool shell (``BASH_ENV``; rules 2, 3).
    tool_shell: str = ""
    header: dict[str, Any] = attrs.field(factory=dict)
    #: ``check_limits``'s expectations.
    expect: dict[str, Any] = attrs.field(factory=dict)
    #: The working folder is a sized tmpfs (the bridge made it).
    cwd_tmpfs: bool = False

    @classmethod
    def make(cls, limits: Limits, *, own_cwd: bool, root: CgroupRoot | bool | None = True) -> EngineLimits:
        """Make the cgroup (or plan the rlimits) for one engine. ``root``: where cgroups go (True:
        :func:`find_cgroup_root`; None: nowhere). Raises :class:`ProfileError` for a limit that
        cannot be kept here (rule 3), naming the fix."""
        where = find_cgroup_root() if root is True else root if isinstance(root, CgroupRoot) else None
        made = cls(limits=limits, cwd_tmpfs=own_cwd and limits.disk is not None)
        try:
            made._apply(where)
        except BaseException:
            made.remove()
            raise
        return made

    def _apply(self, where: CgroupRoot | None) -> None:
        lim = self.limits
        shell = [f"{{ echo {TOOL_OOM_SCORE_ADJ} > /proc/self/oom_score_adj; }} 2>/dev/null"]
        header: dict[str, Any] = {}
        wants_cgroup = lim.memory is not None or lim.processes is not None
        if wants_cgroup and where is not None:
            self._make_cgroup(where)
            how = f"cgroup v{where.version}"
            header["memory"] = f"{format_size(lim.memory)} ({how}, Pi and its tools)" if lim.memory else "none"
            header["processes"] = f"{lim.processes} ({how}, tasks)" if lim.processes else "none"
            header["cgroup"] = list(self.cgroups)
        else:
            if lim.memory is not None:
                shell.append(f"ulimit -H -S -d {lim.memory // 1024} 2>/dev/null")
                header["memory"] = f"{format_size(lim.memory)} (RLIMIT_DATA of each tool process: no cgroup here)"
            else:
                header["memory"] = "none"
            if lim.processes is not None:
                if os.geteuid() == 0:
                    raise ProfileError(
                        f"the engine's process limit ({lim.processes}) cannot be kept here: the bridge may make "
                        "no cgroup (none writable with memory and pids) and RLIMIT_NPROC does not bind root; run "
                        "the bridge as another user or in a delegated cgroup, or pass --engine-processes 0 "
                        "(in the Python API: Limits(processes=None)) to run without one"
                    )
                shell.append(f"ulimit -H -S -u {lim.processes} 2>/dev/null")
                header["processes"] = (
                    f"{lim.processes} (RLIMIT_NPROC of each tool, the uid's in the sandbox: no cgroup here)"
                )
            else:
                header["processes"] = "none"
        header["tmp"] = f"{format_size(lim.tmp)} (tmpfs)" if lim.tmp else "none (tmpfs of half the RAM)"
        if self.cwd_tmpfs:
            header["working_folder"] = f"{format_size(lim.disk or 0)} (tmpfs)"
        elif lim.disk is None:
            header["working_folder"] = "none"
        else:
            header["working_folder"] = "not bounded (given: --engine-cwd)"
        header["tools_oom_score_adj"] = TOOL_OOM_SCORE_ADJ
        self.header = header
        self.tool_shell = (
            "# pi-bridge: each tool's shell (BASH_ENV; bridge/profiles/limits.py)\n" + "\n".join(shell) + "\n"
        )
        self.expect = {
            "cgroups": [self._inside(c) for c in self.cgroups],
            "tmp": lim.tmp,
            "cwd": lim.disk if self.cwd_tmpfs else None,
            "data": lim.memory if not self.cgroups else None,
            "nproc": lim.processes if not self.cgroups else None,
        }

    def _make_cgroup(self, where: CgroupRoot) -> None:
        name = f"pi-bridge-{os.getpid()}-{next(_counter)}"
        lim = self.limits
        if where.version == 2:
            folder = os.path.join(where.folders["memory"], name)
            self._mkdir(folder)
            writes = [
                ("memory.max", lim.memory),
                ("memory.swap.max", 0 if lim.memory else None),
                ("pids.max", lim.processes),
            ]
            for file, value in writes:
                if value is not None:
                    self._write(folder, file, value, required=file != "memory.swap.max")
        else:
            for c in ("memory", "pids"):
                self._mkdir(os.path.join(where.folders[c], name))
            mem, pids = (os.path.join(where.folders[c], name) for c in ("memory", "pids"))
            if lim.memory is not None:
                self._write(mem, "memory.limit_in_bytes", lim.memory, required=True)
                self._write(mem, "memory.memsw.limit_in_bytes", lim.memory, required=False)
            if lim.processes is not None:
                self._write(pids, "pids.max", lim.processes, required=True)
        self.cgroup_version = where.version
        self.prefix = [
            "/bin/sh",
            "-c",
            JOIN,
            _JOIN_NAME,
            *(os.path.join(c, "cgroup.procs") for c in self.cgroups),
            "--",
        ]

    def _mkdir(self, folder: str) -> None:
        try:
            os.mkdir(folder, 0o755)
        except OSError as e:
            raise ProfileError(f"cannot make the engine's cgroup {folder} ({e.strerror or e}): {_CGROUP_FIX}") from e
        self.cgroups.append(folder)

    def _write(self, folder: str, file: str, value: int, *, required: bool) -> None:
        path = os.path.join(folder, file)
        if not required and not os.path.exists(path):
            return
        try:
            Path(path).write_text(str(value))
        except OSError as e:
            if required:
                raise ProfileError(f"cannot set the engine's limit {path} ({e.strerror or e}): {_CGROUP_FIX}") from e

    @staticmethod
    def _inside(folder: str) -> str:
        """How ``/proc/self/cgroup`` names ``folder`` (its path below the hierarchy's mount)."""
        mounts = sorted(_mounts(_read("/proc/self/mountinfo")).values(), key=len, reverse=True)
        for m in mounts:
            if folder.startswith(m.rstrip("/") + "/"):
                return folder[len(m.rstrip("/")) :]
        return folder

    def remove(self) -> None:
        """Remove the cgroups (the engine is reaped: nothing should be left in them; what is, is
        SIGKILLed first). One that cannot be removed now is left for :func:`sweep_cgroups`."""
        for folder in reversed(self.cgroups):
            _remove_cgroup(folder)
        self.cgroups = []


_CGROUP_FIX: Final = (
    "the engine's memory and process limits need a cgroup; pass --engine-memory 0 --engine-processes 0 "
    "to run without them (the journal header says so)"
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _remove_cgroup(folder: str, tries: int = 20) -> bool:
    """Kill what is left in ``folder`` and remove it; a few quick tries (a task that was just
    killed leaves the cgroup when it is reaped). Returns whether it is gone."""
    for _ in range(tries):
        try:
            os.rmdir(folder)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        for pid in _read(os.path.join(folder, "cgroup.procs")).split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.005)
    return False


def sweep_cgroups(root: CgroupRoot | bool | None = True) -> list[str]:
    """Remove the engine cgroups bridges that died left in this bridge's cgroup (named for a pid
    that is gone; rule 1). Returns what was removed."""
    where = find_cgroup_root() if root is True else root
    if not isinstance(where, CgroupRoot):
        return []  # (nowhere to look)
    removed = []
    for parent in sorted(set(where.folders.values())):
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            m = _CGROUP_NAME.match(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                os.kill(int(m[1]), 0)
                continue  # its bridge lives
            except ProcessLookupError:
                pass
            except OSError:
                continue
            if _remove_cgroup(entry.path):
                removed.append(entry.path)
    return removed


# --------------------------------------------------------------------------- the probe

#: Sandbox probe lines (``sandbox.PROBE``'s ``{limits}``): the cgroups the engine is in, whether
#: any ``cgroup.procs`` is writable (a way out), the tmpfs sizes, and the tool shell's limits as
#: a tool sees them (``BASH_ENV`` set, as Pi's bash tool has it). ``{cwd}``, ``{shell}``: quoted.
#: Two processes (``stat``, ``bash``): with a fork per line it cost ~30 ms of the start-up.
PROBE: Final = r"""while IFS= read -r l; do echo "cgroup=${l#*:}"; done < /proc/self/cgroup
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do [ -w "$f" ] && echo "cgroup-writable=$f"; done
stat -f -c 'fs-size=%b %S %n' /tmp {cwd} 2>/dev/null
BASH_ENV={shell} bash -c 'read -r o < /proc/self/oom_score_adj; echo "tool-oom=$o"; printf tool-data=; ulimit -d; printf tool-nproc=; ulimit -u' 2>/dev/null
"""


def _sizes(lines: list[str]) -> dict[str, int]:
    """``fs-size=BLOCKS BLOCK_SIZE PATH`` lines -> {path: bytes}."""
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            out.setdefault(parts[2], int(parts[0]) * int(parts[1]))
    return out


def check_limits(seen: Mapping[str, list[str]], expect: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The seal check's problems with the limits the probe saw, and what it verified."""
    problems: list[str] = []
    cgroups = seen.get("cgroup", [])
    for path in expect.get("cgroups", []):
        if not any(line.partition(":")[2] == path for line in cgroups):
            problems.append(f"the engine is not in its cgroup {path} (it is in {', '.join(cgroups) or 'none'})")
    for f in seen.get("cgroup-writable", []):
        problems.append(f"the engine can write {f}: a tool could leave its cgroup")
    page = os.sysconf("SC_PAGE_SIZE")
    sizes = {}
    found = _sizes(seen.get("fs-size", []))
    for key, path, what in (("tmp", "/tmp", "/tmp"), ("cwd", expect.get("cwd_path"), "the working folder")):
        want, got = expect.get(key), found.get(str(path))
        sizes[key] = got
        if want is not None and got != -(-want // page) * page:
            problems.append(f"{what} holds {got} bytes in the sandbox, not the {want} asked for")
    oom = (seen.get("tool-oom") or ["?"])[0]
    if oom == "?":
        # Pi runs its tools with sh where there is no bash, and sh reads no BASH_ENV.
        problems.append("no bash in the sandbox ran the tools' shell: the tools' limits and OOM score are not applied")
    elif oom != str(TOOL_OOM_SCORE_ADJ):
        problems.append(
            f"a tool's oom_score_adj is {oom}, not {TOOL_OOM_SCORE_ADJ}: Pi is not protected from the OOM killer"
        )
    for key, flag in (("data", "tool-data"), ("nproc", "tool-nproc")):
        want, said = expect.get(key), (seen.get(flag) or ["?"])[0]
        if want is not None and said != str(want // 1024 if key == "data" else want):
            problems.append(f"a tool's {'RLIMIT_DATA' if key == 'data' else 'RLIMIT_NPROC'} is {said}, not {want}")
    verified = {
        "cgroups": cgroups,
        "tmp_bytes": sizes.get("tmp"),
        "working_folder_bytes": sizes.get("cwd"),
        "tool_oom_score_adj": oom,
        "tool_rlimit_data_kib": (seen.get("tool-data") or ["?"])[0],
        "tool_rlimit_nproc": (seen.get("tool-nproc") or ["?"])[0],
    }
    return problems, verified
