"""Private folders left behind by bridges that died without cleaning up (SIGKILL, a closed
terminal): found by the pid in their names and removed once per process."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

#: The private folders a bridge makes, named for its pid: ``pi-bridge-pi-PID-…``
#: (Pi's config, maybe a key) and ``pi-bridge-cwd-PID-…`` (Pi's working folder).
_PRIVATE_DIR = re.compile(r"pi-bridge-(?:pi|cwd)-(\d+)-")
_orphans_checked = False


def remove_orphans(tmp: str | None = None) -> list[str]:
    """Remove the private folders of bridges that died without cleaning up (SIGKILL,
    a closed terminal): only ours (same uid) and only where the pid in the name
    is gone. Returns what was removed."""
    tmp = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    for entry in entries:
        m = _PRIVATE_DIR.match(entry.name)
        if m is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except (OSError, ValueError, OverflowError):
            continue  # alive (maybe another user's), or unreadable: left alone
    return removed


#: Where else private folders are made: a sandboxed engine's config folder when the temporary
#: folder is one its tools may write (``bridge.profiles.pi.PiProfile._config_base``): a folder
#: of the user's own in ``/var/tmp`` (0700), which every sandbox hides
#: (``bridge.profiles.sandbox.TEMP_DIRS``).
OTHER_BASES = (f"/var/tmp/pi-bridge-{os.getuid()}",)


def remove_orphans_once() -> bool:
    """Once per process: :func:`remove_orphans`, in the temporary folder and :data:`OTHER_BASES`.
    Returns whether it ran now (the caller sweeps what else is named for a bridge's pid:
    :func:`bridge.profiles.limits.sweep_cgroups`)."""
    global _orphans_checked
    if _orphans_checked:
        return False
    _orphans_checked = True
    remove_orphans()
    for base in OTHER_BASES:
        if os.path.realpath(base) != os.path.realpath(tempfile.gettempdir()):
            remove_orphans(base)
    return True
