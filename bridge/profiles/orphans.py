"""The bridge's private folders: one root per user, out of every sandbox's sight, swept by pid.

Rules (issue 41, "Tenants"; the sandbox's side is rule 4 of :mod:`bridge.profiles.sandbox`):

1. **One root per user, whatever ``TMPDIR`` is.** Every private folder a bridge makes -- Pi's
   config folder (``pi-bridge-pi-PID-…``: settings, maybe a key, the session files, the
   ``--no-network`` relay's socket), its working folder (``pi-bridge-cwd-PID-…``), a pool's
   conversations (``pi-bridge-pool-PID-…``), the install probe's scratch
   (``pi-bridge-probe-PID-…``) -- is made in :func:`private_root`, ``/var/tmp/pi-bridge-UID``
   (0700, ours, not a link: checked at every use, tightened if ours and looser, refused if
   not ours). Fixed, not ``$TMPDIR``: bridges of one user started with different ``TMPDIR``s
   (``/var/tmp/x``, a folder in the home) must still find each other's folders in one place,
   which every sandbox hides -- and a folder made *after* a sandbox started is inside that
   hidden root, so it is out of that sandbox's sight too (a hidden folder cannot be hidden
   after the fact: a mount is made at the start). As tmux's ``/tmp/tmux-UID``, but in
   ``/var/tmp``: the tools may write beneath ``/tmp`` (their Landlock rule,
   :mod:`bridge.profiles.toolshell`), and Landlock allows everything beneath a rule, across
   mounts, so an engine's config folder bound back at ``/tmp/pi-bridge-UID/…`` would be
   writable by every tool (the probe caught it). The relay's socket path stays far below the
   107 bytes a unix socket's path may have.
2. **Hidden from every sandbox**: the root gets an empty read-only tmpfs in every sandbox, with
   the engine's own config and working folders bound back on top. A sandboxed engine whose
   tools could write the root (an ``--engine-cwd`` or ``--allow-write`` folder that holds it)
   is refused (:meth:`bridge.profiles.pi.PiProfile.prepare`).
3. **Journals and conversation stores registered.** A bridge writes the folders its engines
   must not see and a later sandbox might not know (its ``--journal`` folder, its default
   journal and conversation folders, which follow its own ``XDG_STATE_HOME``) into
   ``pi-bridge-hides-PID`` in the root (:func:`register_hidden`); every sandbox started
   while that bridge lives hides them (:func:`registered_hidden`). A sandbox started *before*
   a folder was registered does not hide it (rule 1's reason): put journals in the default
   folder, which every bridge hides from the start.
4. **Swept by pid** (:func:`remove_orphans`, once per process, before the first folder is
   made): every ``pi-bridge-(pi|cwd|pool|probe|hides)-PID…`` entry of the root whose pid is
   gone (SIGKILL, a closed terminal) is removed; the same names in ``$TMPDIR`` and ``/tmp``
   too, where bridges before this rule made them, and the pid-less
   ``pi-bridge-pool-conversations-…`` of those when no conversation lock in it is held.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Final

from bridge.profiles.command import ProfileError

#: Where the per-user root is made (rule 1); tests point it elsewhere.
ROOT_BASE: str = "/var/tmp"
#: The root itself, when set (tests: ``private_tmp``); else ``ROOT_BASE/pi-bridge-UID``.
ROOT: str | None = None

#: The private entries a bridge makes, named for its pid (rule 4).
_PRIVATE_DIR: Final = re.compile(r"pi-bridge-(?:pi|cwd|pool|probe|hides)-(\d+)(?:-|$)")
#: A pool's conversations before they carried a pid.
_OLD_POOL: Final = re.compile(r"pi-bridge-pool-conversations-")
_orphans_checked = False
_registering = threading.Lock()
_registered: set[str] = set()


def state_folder(variable: str, name: str) -> Path:
    """One of the bridge's state folders (journals, conversations, the ledger): ``$variable``
    when set, else ``$XDG_STATE_HOME/pi-bridge/NAME``, else ``~/.local/state/pi-bridge/NAME``."""
    env = os.environ.get(variable)
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state else Path.home() / ".local" / "state"
    return base / "pi-bridge" / name


def private_root() -> Path:
    """The per-user root (rule 1), made 0700 if absent. :class:`ProfileError` naming the fix when
    it cannot be made, or what is there is not a folder of ours."""
    root = Path(ROOT) if ROOT is not None else Path(ROOT_BASE) / f"pi-bridge-{os.getuid()}"
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ProfileError(
            f"the bridge's private folder {root} cannot be made ({e}): {ROOT_BASE} must be writable"
        ) from e
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ProfileError(
            f"{root} is not a folder of yours (a link, a file or another user's): the bridge keeps its "
            "private folders there; remove it"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(root, 0o700)
    return root


def private_folder(kind: str) -> Path:
    """A new private folder ``pi-bridge-KIND-PID-XXXXXXXX`` (0700) in the root. Sweeps first."""
    remove_orphans_once()
    return Path(tempfile.mkdtemp(prefix=f"pi-bridge-{kind}-{os.getpid()}-", dir=private_root()))


def register_hidden(folder: str | Path) -> None:
    """Rule 3: list ``folder`` (real path) for every sandbox started while this process lives."""
    real = os.path.realpath(folder)
    with _registering:
        if real in _registered or "\n" in real:
            return
        path = private_root() / f"pi-bridge-hides-{os.getpid()}"
        if not _registered:
            atexit.register(_unregister, path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (real + "\n").encode())  # one short append: whole or not at all
        finally:
            os.close(fd)
        _registered.add(real)


def _unregister(path: Path) -> None:
    try:
        if os.getpid() == int(path.name.rsplit("-", 1)[1]):  # not a forked child's exit
            path.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass


def registered_hidden() -> list[str]:
    """Rule 3: every folder a bridge of this user has registered, that exists now (real paths)."""
    found: set[str] = set()
    try:
        entries = list(os.scandir(private_root()))
    except (OSError, ProfileError):
        return []
    for entry in entries:
        if entry.name.startswith("pi-bridge-hides-") and entry.is_file(follow_symlinks=False):
            try:
                os.kill(int(entry.name.rsplit("-", 1)[1]), 0)  # a live bridge's (rule 3)
            except ProcessLookupError:
                continue
            except (OSError, ValueError, OverflowError):
                pass  # alive (EPERM), or a name not ours: read it
            try:
                lines = Path(entry.path).read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            found.update(line for line in lines if line.startswith("/") and os.path.isdir(line))
    return sorted(found)


def remove_orphans(tmp: str | None = None) -> list[str]:
    """Rule 4: remove the private folders of bridges that died without cleaning up (SIGKILL,
    a closed terminal): only ours (same uid) and only where the pid in the name is gone.
    ``tmp``: one folder to sweep (default: the root, ``$TMPDIR`` and ``/tmp``). Returns what
    was removed."""
    if tmp is not None:
        places = [tmp]
    else:
        try:
            places = [str(private_root())]
        except ProfileError:
            places = []
        places += [tempfile.gettempdir(), "/tmp"]
    removed: list[str] = []
    for place in dict.fromkeys(os.path.realpath(p) for p in places):
        removed += _sweep(place)
    return removed


def _sweep(place: str) -> list[str]:
    removed: list[str] = []
    try:
        entries = list(os.scandir(place))
    except OSError:
        return removed
    for entry in entries:
        m = _PRIVATE_DIR.match(entry.name)
        try:
            if entry.is_symlink() or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if m is None:
                if _OLD_POOL.match(entry.name) and entry.is_dir() and not _locks_held(entry.path):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(entry.path)
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                Path(entry.path).unlink(missing_ok=True)
            removed.append(entry.path)
        except (OSError, ValueError, OverflowError):
            continue  # alive (maybe another user's), or unreadable: left alone
    return removed


def _locks_held(folder: str) -> bool:
    """A pool of an older bridge holds a lock on each conversation it has open (flock)."""
    for lock in Path(folder).glob("*/lock"):
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
    return False


def remove_orphans_once() -> bool:
    """Once per process: :func:`remove_orphans`, and the engine cgroups bridges that died left
    (:func:`bridge.profiles.limits.sweep_cgroups`: named for their pid too). Returns whether it
    ran now."""
    global _orphans_checked
    if _orphans_checked:
        return False
    _orphans_checked = True
    remove_orphans()
    from bridge.profiles.limits import sweep_cgroups  # (limits stands on command; not the reverse)

    sweep_cgroups()
    return True


def private_tree(folder: Path, ours: int = 1) -> None:
    """Make ``folder`` and every missing parent 0700 (``Path.mkdir(parents=True)`` makes the
    parents 0755: the conversation store's were); ``folder`` and its ``ours - 1`` nearest
    parents -- the bridge's own (``pi-bridge/conversations``) -- tightened to 0700 if looser
    and ours. Parents that existed and are not the bridge's (``~/.local/state``) are left as
    they are: other programs keep their state there. Raises OSError."""
    missing: list[Path] = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        os.chmod(d, 0o700)  # (the umask may have taken bits away, never added: explicit anyway)
    for d in [folder, *folder.parents][:ours]:
        st = os.stat(d)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(d, 0o700)
