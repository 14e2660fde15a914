"""The tool shell: the shell Pi runs its ``bash`` tool with, one Landlock domain deeper than Pi.

Standard library only, no package import: the confined Pi runs it through ``settings.json``'s
``shellPath`` (Pi 1.6.0 ``getShellConfig``: ``{shell: shellPath, args: ["-c"]}``) as a script the
seal writes into the private config folder (:func:`script`): a ``#!PYTHON -IS`` line, the
rules (``RULES = {...}``), then this file's text. Pi runs ``SCRIPT -c COMMAND``; the tool shell
confines itself and ``execv``s the real shell with the same arguments. Rules, and where they
come from (``landlock(7)``, ``Documentation/userspace-api/landlock.rst`` of Linux 6.18, checked
on this machine: kernel 6.18, ABI 7):

1. **No new privileges** (``prctl(PR_SET_NO_NEW_PRIVS)``): required by
   ``landlock_restrict_self`` without ``CAP_SYS_ADMIN``, and kept across the exec.
2. **A Landlock domain of the tool's own** (syscalls 444 ``landlock_create_ruleset``, 445
   ``landlock_add_rule``, 446 ``landlock_restrict_self`` on x86_64 and arm64), inherited by
   everything the tool starts and never lifted. Pi itself is not in it. Landlock then denies
   every ``ptrace_may_access`` from inside the domain to a process outside it (Pi, the
   sandbox's init, earlier tools: each call gets a sibling domain): no ``/proc/<pi>/fd/*``,
   ``/proc/<pi>/mem``, ``/proc/<pi>/environ``, ``ptrace``, ``pidfd_getfd`` (``EACCES`` /
   ``EPERM``). With ABI ≥ 6 ``LANDLOCK_SCOPE_SIGNAL`` also stops it signalling them (``kill
   -STOP <pi>`` fails with ``EPERM``); below, the header and the probe say signals are not
   scoped.
3. **Writes only beneath** ``RULES["write"]`` (the working folder, ``/tmp``, ``/dev`` and the
   ``--allow-write`` paths; never the private config folder): every write right of the ABI is
   handled (making, removing, writing, truncating (ABI 3), linking across folders (``REFER``,
   ABI 2)); reading and executing are left to the sandbox. Pipes and sockets are not paths:
   a tool still writes its own stdout and stderr (``/proc/self/fd/1``, ``/dev/stderr``).
4. **Fail closed**: anything that goes wrong before the exec (no Landlock, a refused rule) is a
   message on stderr and exit status 126 -- a failed tool call -- never an unconfined shell.
5. **The OOM killer's first choice**: before it confines itself, the tool shell raises its own
   ``oom_score_adj`` to ``RULES["oom"]`` (1000; no privilege needed to raise it; inherited by
   all the tool starts, and the tool cannot lower it again: rule 3 denies its writes to ``/proc``): at an engine's memory limit the kernel then kills the tool, not Pi
   (:mod:`bridge.profiles.limits` rule 2 measured it). Done here because rule 3 then denies the
   write (``/proc`` is not beneath the allowed folders), so the limits' ``BASH_ENV`` line that
   does the same cannot, under the tool shell.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: ``typing`` alone costs about as much as the rest of the start (``-X importtime``): it is
#: read by the type checker only (mypy takes any name ``TYPE_CHECKING`` as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: x86_64 and aarch64 (asm-generic) share these numbers.
SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

#: ``LANDLOCK_ACCESS_FS_*`` (include/uapi/linux/landlock.h).
WRITE_FILE = 1 << 1
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13
TRUNCATE = 1 << 14
#: ``LANDLOCK_SCOPE_SIGNAL`` (ABI 6).
SCOPE_SIGNAL = 1 << 1
#: The rights that apply to a file (not a folder) in a rule.
FILE_RIGHTS = WRITE_FILE | TRUNCATE

#: What the seal's script holds in place of this line (:func:`script`): ``write`` (the folders)
#: and ``shell`` (the shell to become).
RULES: dict[str, Any] = {}


def write_rights(abi: int) -> int:
    """Every write right the kernel's ABI knows (rule 3)."""
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG
    rights |= MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """Landlock could not be set up (rule 4)."""


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none -- not built in, not in the ``lsm=`` list, or no syscall)."""
    libc = _libc()
    abi = int(libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)))
    return abi if abi > 0 else 0


def restrict(write: list[str]) -> dict[str, Any]:
    """Confine this process (rules 1-3): writes only beneath ``write``, no ptrace of anything
    outside, no signals out with ABI ≥ 6. Returns what was enforced. Raises
    :class:`LandlockError` (the process is then unchanged but for ``NO_NEW_PRIVS``)."""
    libc = _libc()
    abi = abi_version()
    if abi < 1:
        raise LandlockError(ctypes.get_errno(), "Landlock is not available (kernel ≥ 5.13 with lsm=…,landlock)")
    rights = write_rights(abi)
    attr = _RulesetAttr(handled_access_fs=rights, handled_access_net=0, scoped=SCOPE_SIGNAL if abi >= 6 else 0)
    # Older kernels take the struct's prefix they know (copy_min_struct_from_user).
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    ruleset = int(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)))
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset failed")
    allowed: list[str] = []
    try:
        for path in write:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not there (e.g. no /dev/shm): nothing to allow
            try:
                access = rights if os.path.isdir(path) else rights & FILE_RIGHTS
                rule = _PathBeneath(allowed_access=access, parent_fd=fd)
                if libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    raise LandlockError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
                allowed.append(path)
            finally:
                os.close(fd)
        if libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return {"abi": abi, "write": allowed, "signals_scoped": abi >= 6}


def main(rules: dict[str, Any], argv: list[str]) -> int:
    """Confine, then become the real shell with ``argv`` (Pi's ``-c COMMAND``). Returns only on
    failure (126, rule 4)."""
    try:
        restrict(list(rules["write"]))
    except (OSError, KeyError, TypeError) as e:
        print(
            f"pi-bridge tool shell: the tool's sandbox could not be set up, the tool is not run: {e}", file=sys.stderr
        )
        return 126
    shell = str(rules.get("shell") or "/bin/bash")
    try:
        os.execv(shell, [os.path.basename(shell), *argv])
    except OSError as e:
        print(f"pi-bridge tool shell: {shell}: {e}", file=sys.stderr)
    return 126


_RULES_LINE = "RULES: dict[str, Any] = {}\n"


def script(python: str, rules: dict[str, Any]) -> str:
    """The tool shell as the seal writes it: ``#!PYTHON -IS``, then this file's text with
    ``rules`` in :data:`RULES`."""
    import json

    with open(__file__, encoding="utf-8") as f:
        body = f.read()
    assert body.count(_RULES_LINE) == 1
    return f"#!{python} -IS\n" + body.replace(_RULES_LINE, f"RULES: dict[str, Any] = {json.dumps(rules)}\n")


def raise_oom_score(rules: dict[str, Any]) -> None:
    """Rule 5, best effort: this process's ``oom_score_adj`` to ``RULES["oom"]``. Only ever in
    the tool shell's own process (its ``__main__``), before :func:`main` confines it: a caller
    that ran it in-process raised its own score, and every engine it started after inherited
    it -- Pi at 1000 too, so the kernel killed Pi, the largest (found by the suite: a unit test
    of ``main`` in a pytest worker, then that worker's limits tests)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(int(rules.get("oom", 1000))))
    except OSError:
        pass


if __name__ == "__main__":
    raise_oom_score(RULES)
    sys.exit(main(RULES, sys.argv[1:]))
