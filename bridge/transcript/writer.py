"""Writing transcripts: a header, then one entry per line, every line serialised by :func:`dumps`.

This is the one module of the transcript layer that does I/O on its own account (a stream the
caller opened); the journal (:mod:`bridge.live.journal`) builds on it.
"""

from __future__ import annotations

from typing import IO, Any

from bridge.transcript.format import KINDS_BY_VERSION, MAGIC, VERSION, dumps


class TranscriptWriter:
    """Write a transcript to a binary stream. Buffered; durability is the caller's (the journal fsyncs at receipts)."""

    def __init__(
        self, stream: IO[bytes], *, clearing: tuple[str, ...] = (), version: int = VERSION, **meta: Any
    ) -> None:
        self._stream = stream
        reserved = {"transcript", "version", "clearing"} & meta.keys()
        if reserved:
            raise ValueError(f"header metadata may not set {sorted(reserved)}")
        if version not in KINDS_BY_VERSION:
            raise ValueError(f"no transcript version {version}")
        self.version = version
        self._kinds = KINDS_BY_VERSION[version]
        header: dict[str, Any] = {"transcript": MAGIC, "version": version}
        if clearing:
            header["clearing"] = list(clearing)
        header.update(meta)
        stream.write(dumps(header) + b"\n")

    def write(self, kind: str, value: Any, *, t: float | None = None, i: int | None = None) -> None:
        if kind not in self._kinds:
            raise ValueError(f"unknown transcript kind {kind!r} (version {self.version})")
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
