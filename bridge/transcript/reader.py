"""Reading transcripts: strict where misreading would be silent, lenient where a crash leaves its mark.

The format and its rules are in :mod:`bridge.transcript.format`. The reader streams: memory does
not grow with the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from bridge.core.framing import JOURNAL_UPDATE, update_runs
from bridge.transcript.format import (
    EXTRA_KEYS,
    KINDS_BY_VERSION,
    MAGIC,
    VERSION,
    Entry,
    Header,
    TranscriptError,
    loads,
    shown,
)


class TranscriptReader:
    """Iterate a transcript's entries after checking its header.

    ``reader.header`` is available once the reader is constructed.
    ``reader.truncated`` is True after iteration if a cut-off last line was dropped.
    """

    def __init__(self, stream: IO[bytes], path: str = "<transcript>") -> None:
        self._stream = stream
        self.path = path
        self.truncated = False
        self._observations = 0
        self._lineno = 0
        # Bounded: a file that is no transcript (/dev/zero, a disk image, a sparse file) may
        # have no line end for gigabytes, and the whole of it would be read to find one.
        first = stream.readline(HEADER_MAX + 1)
        self._lineno = 1
        if first.startswith(UTF8_BOM):  # a journal saved by an editor that marks UTF-8: harmless
            first = first[len(UTF8_BOM) :]
        if not first.strip():
            raise TranscriptError(path, 1, "empty file: expected a pi-bridge transcript header")
        if first.startswith(b"\x1f\x8b"):
            raise TranscriptError(path, 1, "a gzip file: gunzip it first (zcat FILE > FILE.jsonl)")
        if len(first) > HEADER_MAX and not first.endswith(b"\n"):
            raise TranscriptError(
                path, 1, f"not a pi-bridge transcript (no header: its first line runs past {HEADER_MAX >> 20} MiB)"
            )
        try:
            head = loads(first)
        except (ValueError, UnicodeDecodeError) as e:
            raise TranscriptError(path, 1, f"not a pi-bridge transcript: its first line is not JSON ({e})") from None
        if not isinstance(head, dict) or head.get("transcript") != MAGIC:
            raise TranscriptError(path, 1, 'not a pi-bridge transcript (header lacks "transcript": "pi-bridge")')
        version = head.get("version")
        if type(version) is not int or version < 1:
            raise TranscriptError(path, 1, f"header has no valid version (got {shown(version)})")
        if version > VERSION:
            raise TranscriptError(
                path,
                1,
                f"transcript version {version} is newer than this pi-bridge reads (version {VERSION}); "
                "upgrade pi-bridge to read it",
            )
        clearing = head.get("clearing", [])
        if not isinstance(clearing, list) or not all(isinstance(c, str) for c in clearing):
            raise TranscriptError(path, 1, '"clearing" must be a list of command types')
        meta = {k: v for k, v in head.items() if k not in ("transcript", "version", "clearing")}
        self.header = Header(version, tuple(clearing), meta)
        self._kinds = KINDS_BY_VERSION[version]

    def __iter__(self) -> Iterator[Entry]:
        """Every entry, one per line; a version 2 ``updates`` entry comes as one ``recv`` per
        line it stands for (``{"type": "message_update", "elided": null}``, with its own ``i``),
        so a reader of every observation reads both versions alike."""
        self._observations = 0
        for raw in self._stream:
            self._lineno += 1
            complete = raw.endswith(b"\n")
            entry = self._entry(raw.rstrip(b"\r\n") if complete else raw, self._lineno, complete)
            if entry is _TRUNCATED:
                return
            if entry is None:
                continue
            assert isinstance(entry, Entry)
            if entry.kind == "updates":
                last: int = entry.i  # type: ignore[assignment]  # always set on updates
                for idx in range(last - entry.value + 1, last + 1):
                    yield Entry("recv", {"type": "message_update", "elided": None}, entry.t, idx, entry.line)
            else:
                yield entry

    def skipping_updates(self) -> Iterator[Entry]:
        """Every entry, except that runs of ``recv`` lines holding a
        ``message_update`` (an event the tracker never reads) come as one
        ``Entry("updates", count)`` without being parsed (found by the framing's batch
        classifier, :func:`bridge.core.framing.update_runs`, on :data:`~bridge.core.framing.JOURNAL_UPDATE`). What is skipped is still counted: the ``i`` of the next parsed
        observation is checked against the count, so a line lost or merged
        inside a run is still an error. A version 2 ``updates`` entry is such a run already
        and comes the same way. Replay reads this way."""
        self._observations = 0
        read = self._stream.read
        # The line not yet ended, in the pieces it came in: joined once, when its LF comes (a
        # line of many reads, joined read by read, would be copied again at every read).
        pieces: list[bytes] = []
        while True:
            chunk = read(UPDATES_READ)
            if not chunk:
                break
            lines = chunk.split(b"\n")
            if len(lines) == 1:
                pieces.append(chunk)
                continue
            if pieces:
                pieces.append(lines[0])  # not rest + chunk: no copy of the whole chunk
                lines[0] = b"".join(pieces)
            last = lines.pop()
            pieces = [last] if last else []
            for start, end, is_update in update_runs(lines, JOURNAL_UPDATE):
                if is_update:
                    run = end - start
                    self._observations += run
                    yield Entry("updates", run, None, self._observations, self._lineno + 1)
                    self._lineno += run
                    continue
                for line in lines[start:end]:
                    self._lineno += 1
                    entry = self._entry(line.rstrip(b"\r"), self._lineno, True)
                    if entry is not None:
                        yield entry  # type: ignore[misc]
        if pieces:
            self._lineno += 1
            entry = self._entry(b"".join(pieces), self._lineno, False)
            if entry is not None and entry is not _TRUNCATED:
                yield entry  # type: ignore[misc]

    def _entry(self, data: bytes, lineno: int, complete: bool) -> Entry | object | None:
        """One line's entry; None for a blank line; _TRUNCATED for a cut-off last line."""
        path = self.path
        if not data.strip():
            return None
        try:
            obj = loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            if not complete:
                self.truncated = True
                return _TRUNCATED
            raise TranscriptError(path, lineno, f"not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise TranscriptError(path, lineno, "an entry must be a JSON object")
        kinds = [k for k in obj if k not in EXTRA_KEYS]
        if obj.get("transcript") == MAGIC:
            raise TranscriptError(
                path, lineno, "a second transcript header: journals joined into one file? (read each one on its own)"
            )
        if len(kinds) != 1:
            what = "no kind" if not kinds else "several kinds (" + ", ".join(kinds) + ")"
            raise TranscriptError(path, lineno, f"an entry has exactly one kind; this one has {what}")
        kind = kinds[0]
        if kind not in self._kinds:
            known = ", ".join(sorted(self._kinds))
            raise TranscriptError(
                path,
                lineno,
                f"unknown entry kind {shown(kind)} (this reader knows, in version {self.header.version}: {known})",
            )
        t = obj.get("t")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
            raise TranscriptError(path, lineno, f'"t" must be a number of seconds, got {shown(t)}')
        i = obj.get("i")
        if kind == "updates":
            return self._updates(obj[kind], t, i, lineno)
        if kind in ("recv", "recv_raw"):
            self._observations += 1
            if i is not None and i != self._observations:
                raise TranscriptError(path, lineno, f'"i" is {shown(i)} but this is observation {self._observations}')
        elif i is not None:
            raise TranscriptError(path, lineno, f'"i" belongs on recv and recv_raw only, not on {kind}')
        value = obj[kind]
        if kind == "send" and not isinstance(value, dict):
            raise TranscriptError(path, lineno, "a send entry holds the command object")
        if kind in ("recv_raw", "stderr") and not isinstance(value, str):
            raise TranscriptError(path, lineno, f"a {kind} entry holds text")
        return Entry(kind, value, t, self._observations if kind in ("recv", "recv_raw") else None, lineno)

    def _updates(self, value: Any, t: float | None, i: Any, lineno: int) -> Entry:
        """A version 2 run entry: ``Entry("updates", count, t, last index)``, as
        :meth:`skipping_updates` gives for a run of version 1 lines."""
        path = self.path
        count = value.get("count") if isinstance(value, dict) else None
        elided = value.get("elided") if isinstance(value, dict) else None
        if type(count) is not int or count < 1 or type(elided) is not int or elided < 0:
            raise TranscriptError(
                path, lineno, f'an updates entry holds {{"count": N >= 1, "elided": BYTES}}, not {shown(value)}'
            )
        first = self._observations + 1
        if i is not None and i != first:
            raise TranscriptError(path, lineno, f'"i" is {shown(i)} but this run starts at observation {first}')
        self._observations += count
        return Entry("updates", count, t, self._observations, lineno)


#: Returned by ``_entry`` for a cut-off last line.
_TRUNCATED = object()
#: The longest header line read: a journal's is a few KB (its seal, engine and sandbox),
#: so a first line past this is not a transcript's, and reading stops there.
HEADER_MAX = 1 << 20
#: The byte order mark some editors put before UTF-8 text; passed over before the header.
UTF8_BOM = b"\xef\xbb\xbf"
#: What :meth:`TranscriptReader.skipping_updates` reads at a time.
UPDATES_READ = 4 << 20


def open_transcript(path: str) -> tuple[IO[bytes], TranscriptReader]:
    """Open ``path`` for reading; the caller closes the stream."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - handed to the caller
    except OSError as e:
        raise TranscriptError(path, 0, f"cannot open: {e.strerror or e}") from None
    try:
        return stream, TranscriptReader(stream, path)
    except BaseException:
        stream.close()
        raise
