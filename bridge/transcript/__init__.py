"""Transcript format v1 (SPEC §6): :mod:`.format` (the entries and :func:`dumps`), :mod:`.reader`
(strict, streaming) and :mod:`.writer`."""

from bridge.transcript.format import KINDS, MAGIC, VERSION, Entry, Header, TranscriptError, dumps, shown_path
from bridge.transcript.reader import UPDATES_READ, TranscriptReader, open_transcript
from bridge.transcript.writer import TranscriptWriter

__all__ = [
    "KINDS",
    "MAGIC",
    "UPDATES_READ",
    "VERSION",
    "Entry",
    "Header",
    "TranscriptError",
    "TranscriptReader",
    "TranscriptWriter",
    "dumps",
    "open_transcript",
    "shown_path",
]
