"""The controllers' stdin: one bounded line reader for ``bridge serve``, ``serve --engines`` and
``bridge acp`` (:mod:`bridge.controller.output` is the other half: their one stdout writer).

Rules:

- Lines are split as the engine's are (:class:`~bridge.core.framing.LineSplitter`: LF only, a
  final line without LF is still a line), and bounded as they are: a line past the limit
  (:data:`~bridge.core.framing.DEFAULT_MAX_LINE`, 64 MiB) is never held whole -- its head is
  kept, the rest counted and dropped -- and is handed on as an
  :class:`~bridge.core.framing.Oversize`, which each controller answers with an error naming
  it (serve's ``line too long``, ACP's ``-32600``). A line under the limit is held once.
- Each line is handed on with its number (from 1, blank lines counted), in order, and the next
  read waits until it is taken: a controller that floods stdin is read no faster than the
  bridge takes its lines. Blank lines (whitespace only) are skipped.
- EOF ends the reading; a read error counts as EOF (a controller that went away).

Before this module each controller had its own copy of the loop (issue 43).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from bridge.core.framing import DEFAULT_MAX_LINE, LineSplitter, Oversize

#: Bytes asked for per read of stdin.
READ_SIZE: Final = 256 * 1024

#: What takes each line: its number (from 1) and the line.
Take = Callable[[int, bytes | Oversize], Awaitable[None]]


async def read_lines(fd: int, take: Take, max_line: int = DEFAULT_MAX_LINE) -> None:
    """Hand each line of ``fd`` (a duplicate of it: the caller's stays open) to ``take``, in
    order, until EOF. Ends at EOF or a read error (after the last line was taken); each wait is
    for the controller's next bytes, or for ``take``."""
    stream = trio.lowlevel.FdStream(os.dup(fd))
    splitter = LineSplitter(max_line)
    lineno = 0
    async with stream:
        while True:
            try:
                data = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            for line in splitter.feed(data) if data else splitter.close():
                lineno += 1
                if isinstance(line, Oversize) or line.strip():
                    await take(lineno, line)
            if not data:
                return
