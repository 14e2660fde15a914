"""Writing transcripts: a header, then one entry per line, every line serialised by :func:`dumps`.

This is the one module of the transcript layer that does I/O on its own account (a stream the
caller opened); the journal (:mod:`bridge.live.journal`) builds on it.
"""

from __future__ import annotations

from typing import IO, Any

from bridge.transcript.format import KINDS, MAGIC, VERSION, dumps


class TranscriptWriter:
    """Write a transcript to a binary stream. Buffered; durability is the caller's (the journal fsyncs at receipts)."""

    def __init__(self, stream: IO[bytes], *, clearing: tuple[str, ...] = (), **meta: Any) -> None:
        self._stream = stream
        reserved = {"transcript", "version", "clearing"} & meta.keys()
        if reserved:
            raise ValueError(f"header metadata may not set {sorted(reserved)}")
        header: dict[str, Any] = {"transcript": MAGIC, "version": VERSION}
        if clearing:
            header["clearing"] = list(clearing)
        header.update(meta)
        stream.write(dumps(header) + b"\n")

    def write(self, kind: str, value: Any, *, t: float | None = None, i: int | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown transcript kind {kind!r}")
        entry: dict[str, Any] = {kind: value}
        if t is not None:
            entry["t"] = round(t, 6)
        if i is not None:
            entry["i"] = i
        self._stream.write(dumps(entry) + b"\n")

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()
