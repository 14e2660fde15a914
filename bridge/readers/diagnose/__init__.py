"""``bridge diagnose FILE``: every signal, gap and unknown receipt in a journal, in words.

A transcript (a fixture, or a live bridge's journal, lean or full) is driven
through a :class:`~bridge.core.session.Session` exactly as ``bridge replay`` does
(the shared :class:`~bridge.readers.replay.Driver`), and every event worth a person's
attention becomes a *finding*:

- every overlap the tracker raises (O1-O6, ``aborted-without-stop``), every gap,
  every ack whose disposition is not ``started``, every seal diagnostic
  (``extension_ui_request``, ``extension_error``);
- what the live bridge recorded that replay cannot recompute: a seal check with
  problems, an ``engine-down`` signal, an engine that exited with an error code
  or a signal;
- every receipt that is not certain: ``pending`` (the transcript does not finish
  the prompt's story), ``delivery-unknown`` and ``outcome-unknown``;
- every run the bridge stopped itself (``failed`` / ``timeout`` and ``failed`` /
  ``closing``, SPEC section 5, as the session decides them from the journal's
  ``stop`` notes): which stop, why (its note), and what made the bridge close
  (its ``closing`` note);
- a journal the bridge could not write (a ``journal-failed`` note), and a live
  bridge's journal (one with an ``engine-start`` note) that ends without the
  ``bridge-closed`` note a cleanly closed bridge writes last.

Each finding says what happened in plain words (specific to the signal and its
``why`` / ``cause``), shows the evidence -- the observations around it (3 before,
2 after) with the bridge's own entries between them -- and the slot's state at
that moment, and lists the likely causes with what to check (the journal
header's pin and seal, the seal-check note, gaps, stderr, exits). The summary comes
first, then one block per prompt (its receipt and its findings), advice already given
referred to rather than repeated; ``--request ID`` keeps one prompt's block, ``--brief``
one line per finding. ``--json`` prints the same as one object ``{"findings", "summary"}``;
``--html OUT`` writes a self-contained page with a timeline and a card per finding.

Memory is bounded: the file is streamed, only a sliding window of recent entries
is kept for the evidence, and nothing per prompt outlives its story (the driver
runs ``bounded``). Findings keep their evidence; past :data:`MAX_FINDINGS` they
are only counted.

Exit status: 0 when the file was read, whatever it contains; 2 when it is not a
readable transcript (``FILE:LINE: what is wrong`` on stderr, like ``replay``) or
``--request`` names a prompt it does not have.

Where things are, each module stating its own rules:

- :mod:`~bridge.readers.diagnose.diagnoser` -- the :class:`Diagnoser`: when a finding is raised;
- :mod:`~bridge.readers.diagnose.signals`, :mod:`~bridge.readers.diagnose.receipts`,
  :mod:`~bridge.readers.diagnose.journal` -- what each finding says;
  :mod:`~bridge.readers.diagnose.causes` -- its likely causes, with what to check;
- :mod:`~bridge.readers.diagnose.findings` (a finding and its evidence window),
  :mod:`~bridge.readers.diagnose.facts` (what the words cite, and the tally),
  :mod:`~bridge.readers.diagnose.slot` (the slot at a finding), :mod:`~bridge.readers.diagnose.render`
  (one entry in words), :mod:`~bridge.readers.diagnose.timeline` (what the page draws),
  :mod:`~bridge.readers.diagnose.blocks` (the findings by prompt, and advice said once);
- :mod:`~bridge.readers.diagnose.text`, :mod:`~bridge.readers.diagnose.html` (with the template
  ``report.html``, package data) and :mod:`~bridge.readers.diagnose.command` -- the outputs and
  the command (its parser is :mod:`bridge.cli.diagnose`).
"""

from __future__ import annotations

from bridge.readers.diagnose.command import diagnose, run, write_private
from bridge.readers.diagnose.diagnoser import Diagnoser
from bridge.readers.diagnose.findings import AFTER, BEFORE, MAX_FINDINGS, Finding
from bridge.readers.diagnose.html import html_page
from bridge.readers.diagnose.render import describe
from bridge.readers.diagnose.slot import slot_snapshot, slot_words
from bridge.readers.diagnose.text import format_text
from bridge.readers.diagnose.timeline import Timeline

__all__ = [
    "AFTER",
    "BEFORE",
    "MAX_FINDINGS",
    "Diagnoser",
    "Finding",
    "Timeline",
    "describe",
    "diagnose",
    "format_text",
    "html_page",
    "run",
    "slot_snapshot",
    "slot_words",
    "write_private",
]
