"""Journal retention in the default folder (issue 35): by age and by total size.

Journals in the default folder piled up (59 in 30 minutes of trying the API). When a bridge
opens a new journal there (:class:`bridge.live.journal.Journal` with no path; each ACP
session's), it removes, oldest first (by modification time):

- every journal older than :attr:`Keep.days` (default :data:`KEEP_DAYS`);
- then more of the oldest, until the folder's journals together are within
  :attr:`Keep.bytes` (default :data:`KEEP_BYTES`).

Never removed:

- a journal another bridge still has open: each bridge holds a shared ``flock`` on its
  journal while it writes (:func:`hold`), and a journal is removed only under an exclusive
  ``flock`` taken without waiting (``LOCK_NB``), on the very file (same inode) it listed --
  flock(2) locks live with the open file, so a bridge killed (SIGKILL) lets go of its lock;
- the journal just opened;
- anything not named like a pi-bridge journal (``YYYYmmdd-HHMMSS-PID-N.jsonl``, an ACP
  session's ``…-N-SESSION.jsonl`` / ``…-N-SESSION.K.jsonl``), not a regular file (a symbolic
  link, a folder), or outside the default folder: a path the user named
  (``--journal PATH``, ``journal=PATH``) is never looked at.

Set with ``BridgeConfig(journal_keep_days=…, journal_keep_mb=…)``, ``--journal-keep-days`` /
``--journal-keep-mb``, or ``$PI_BRIDGE_JOURNAL_KEEP_DAYS`` / ``$PI_BRIDGE_JOURNAL_KEEP_MB``
(the option first, then the variable, then the default); 0 turns that bound off.
A failure to list, lock or remove is passed over: retention never stops a bridge.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import time
from pathlib import Path

import attrs

#: Journals kept by age: 30 days (a month of evidence to explain a receipt).
KEEP_DAYS = 30.0
#: By total size: 1 GiB (Pi 1.6's lean journals are ~1-10 KiB a prompt: ~10^5 prompts).
KEEP_BYTES = 1 << 30
ENV_DAYS = "PI_BRIDGE_JOURNAL_KEEP_DAYS"
ENV_MB = "PI_BRIDGE_JOURNAL_KEEP_MB"

#: A pi-bridge journal's name (``default_journal_path``; ``acp``'s ``journal_for``).
JOURNAL_NAME = re.compile(r"\d{8}-\d{6}-\d+-\d+(-[A-Za-z0-9_.-]+?)?(\.\d+)?\.jsonl")


@attrs.frozen
class Keep:
    """What retention keeps; None: no bound of that kind."""

    days: float | None = KEEP_DAYS
    bytes: int | None = KEEP_BYTES


def keep_from(days: float | None = None, mb: float | None = None) -> Keep:
    """The bounds: each given one (0: none), else its variable's, else the default."""
    days = _given(days, ENV_DAYS, KEEP_DAYS)
    size = _given(mb, ENV_MB, KEEP_BYTES / (1 << 20))
    return Keep(days or None, int(size * (1 << 20)) or None)


def _given(value: float | None, env: str, default: float) -> float:
    if value is not None:
        return max(0.0, value)
    text = os.environ.get(env, "").strip()
    try:
        return max(0.0, float(text)) if text else default
    except ValueError:
        return default


def hold(fd: int) -> None:
    """The shared lock an open journal holds (until its file is closed, or its process ends)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        pass  # (a filesystem without flock: the journal is only as safe as its age)


def sweep(folder: Path, keep: Keep, spare: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the journals in ``folder`` past ``keep`` (never ``spare``, never one held open);
    return the removed ones."""
    if keep.days is None and keep.bytes is None:
        return []
    now = time.time() if now is None else now
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found: list[tuple[float, int, str, int]] = []  # mtime, size, name, inode
    for name in names:
        if not JOURNAL_NAME.fullmatch(name) or (spare is not None and folder / name == spare):
            continue
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime, st.st_size, name, st.st_ino))
    found.sort()
    total = sum(size for _, size, _, _ in found)
    removed = []
    for mtime, size, name, inode in found:
        old = keep.days is not None and now - mtime > keep.days * 86400
        over = keep.bytes is not None and total > keep.bytes
        if not (old or over):
            break  # oldest first: the rest are newer, and the total is within bounds
        if _remove(folder / name, inode):
            removed.append(folder / name)
            total -= size
    return removed


def _remove(path: Path, inode: int) -> bool:
    """Remove ``path`` if it is still the file listed and no bridge holds it open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != inode or os.lstat(path).st_ino != inode:
            return False
        os.unlink(path)
        return True
    except OSError:
        return False  # held by a live bridge (EWOULDBLOCK), or gone meanwhile
    finally:
        os.close(fd)
