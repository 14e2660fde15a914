"""Readers of transcripts and journals: replay, conform and diagnose."""

from __future__ import annotations

import errno
import sys
from typing import Any


def write_stdout(data: bytes) -> None:
    """All of ``data`` to stdout, or the error that stopped it.

    ``sys.stdout.buffer.write`` of a large report can take only part of it and return that
    count without an error (CPython, when the raw write is cut short: a reader that closes the
    pipe mid-write, ``| head``; a disk, or a file-size limit, that fills up mid-write). The rest
    is written here; the write that cannot take it raises (BrokenPipeError, ENOSPC, EFBIG),
    which the CLI turns into its exit status, instead of a cut report and exit 0.
    """
    out = sys.stdout.buffer
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(errno.EIO, "stdout took nothing of a write")
        view = view[n:]


def hashable(value: Any) -> bool:
    """Whether ``value`` can be a dict key (a journal may hold any JSON as an id)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True
