"""``bridge diagnose FILE``: the command (its parser is :mod:`bridge.cli.diagnose`), reading a
file (with progress on a terminal) and writing the reports.

Rules: exit status 0 when the file was read, whatever it contains; 2 when it is not a readable
transcript (``bridge diagnose: FILE:LINE: what is wrong`` on stderr, like ``replay``), when
``--request`` names a prompt the journal does not have (one line naming the first few it has), or
when the page cannot be written. The report on stdout is text, or one JSON object with ``--json``
(its keys whatever the options: ``--request`` keeps the findings about that prompt, ``--brief``
keeps each finding's :data:`BRIEF_KEYS`); ``--html OUT`` also writes the page of the whole
journal, as private as the journal it comes from (:func:`write_private`).
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import tempfile
import time
from typing import IO, Any, Final

from bridge.readers import write_stdout
from bridge.readers.diagnose.blocks import known, request_name, some_ids
from bridge.readers.diagnose.diagnoser import Diagnoser
from bridge.readers.diagnose.html import html_page
from bridge.readers.diagnose.text import format_text
from bridge.transcript import TranscriptError, dumps, open_transcript, shown_path

#: Seconds between progress updates on a terminal.
PROGRESS_EVERY: Final = 0.25
#: What ``--brief --json`` keeps of each finding (the same keys as ``--json``, fewer of them).
BRIEF_KEYS: Final = ("n", "kind", "signal", "title", "idx", "t", "line", "request", "run")


class Progress:
    """``bytes read / total`` on a terminal's stderr, at most every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, out: IO[str], total: int) -> None:
        self.out = out
        self.total = total
        self.last = 0.0
        self.shown = False

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        pct = 100.0 * done / self.total if self.total else 100.0
        self.out.write(f"\rdiagnose: {done / 1e6:,.1f} MB / {self.total / 1e6:,.1f} MB ({pct:.0f}%)")
        self.out.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.update(self.total, force=True)
            self.out.write("\n")
            self.out.flush()


def diagnose(
    path: str, *, timeline: bool = False, progress: IO[str] | None = None, request: str | None = None
) -> Diagnoser:
    """Read one transcript and explain it (``request``: the prompt whose block is asked for, kept
    whatever the journal's size). Raises :class:`~bridge.transcript.TranscriptError`."""
    stream, reader = open_transcript(path)
    with stream:
        diag = Diagnoser(path, reader.header, timeline=timeline, request=request)
        bar = None
        if progress is not None:
            try:
                total = os.fstat(stream.fileno()).st_size
            except OSError:
                total = 0
            bar = Progress(progress, total)
            bar.update(0, force=True)
        for n, entry in enumerate(reader, 1):
            diag.feed(entry)
            if bar is not None and not n & 1023:
                bar.update(stream.tell())
        diag.finish(reader.truncated)
        if bar is not None:
            bar.done()
    return diag


def write_private(path: str, data: bytes) -> None:
    """Write a report as private as the journal it comes from: 0600, written to a new
    temporary file beside ``path`` and renamed over it (atomic; a symlink at ``path``
    is replaced, never followed). Anything else already at ``path`` (a device such as
    ``/dev/full``, a FIFO, a folder) is refused, never renamed over."""
    target = os.path.abspath(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EEXIST, "not a regular file", path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".diagnose-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp creates it 0600
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one existing file (the page would be renamed over the journal)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def report_json(diag: Diagnoser, *, request: str | None = None, brief: bool = False) -> dict[str, Any]:
    """``--json``: ``{"findings", "summary"}``, the findings about ``request`` only, each cut to
    :data:`BRIEF_KEYS` with ``brief``."""
    data = diag.to_json()
    if request is not None:
        data["findings"] = [
            f for f in data["findings"] if f["request"] is not None and request_name(f["request"]) == request
        ]
    if brief:
        data["findings"] = [{k: f[k] for k in BRIEF_KEYS} for f in data["findings"]]
    return data


def run(args: argparse.Namespace) -> int:
    """``bridge diagnose``: the report on stdout, the page to ``--html``; the exit status."""
    progress = sys.stderr if sys.stderr.isatty() else None
    if getattr(args, "html", None) and _same_file(args.html, args.file):
        print(
            f"bridge diagnose: --html {shown_path(args.html)} is the journal being read: give the page another path",
            file=sys.stderr,
        )
        return 2
    request: str | None = getattr(args, "request", None)
    brief = bool(getattr(args, "brief", False))
    try:
        diag = diagnose(args.file, timeline=bool(getattr(args, "html", None)), progress=progress, request=request)
    except TranscriptError as e:
        print(f"bridge diagnose: {e}", file=sys.stderr)
        return 2
    if request is not None and not known(diag, request):
        print(
            f"bridge diagnose: {shown_path(args.file)} has no prompt {request!r}; {some_ids(diag)}",
            file=sys.stderr,
        )
        return 2
    if args.json:
        write_stdout(dumps(report_json(diag, request=request, brief=brief)) + b"\n")
    else:
        text = format_text(diag, request=request, brief=brief)
        write_stdout(text.encode("utf-8", "surrogateescape") + b"\n")
    sys.stdout.buffer.flush()
    if getattr(args, "html", None):
        try:
            write_private(args.html, html_page(diag).encode("utf-8", "surrogatepass"))
        except OSError as e:
            print(f"bridge diagnose: cannot write {shown_path(args.html)}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"bridge diagnose: timeline written to {shown_path(args.html)}", file=sys.stderr)
    return 0
