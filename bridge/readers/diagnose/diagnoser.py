"""The :class:`Diagnoser`: a transcript's entries in, findings and a summary out.

Rules: the transcript is driven through a :class:`~bridge.core.session.Session` exactly as
``bridge replay`` drives it (the shared, ``bounded`` :class:`~bridge.readers.replay.Driver`), so
every signal and receipt is the one replay computes; what the live bridge recorded that replay
cannot recompute (its notes, its own signals, engine exits) is read from the journal. The
diagnoser decides *when* a finding is raised, with its evidence and the slot right after it, and
keeps what later findings cite (:class:`~bridge.readers.diagnose.facts.Facts`); what each finding
*says* is the wording modules' (:mod:`~bridge.readers.diagnose.signals`,
:mod:`~bridge.readers.diagnose.receipts`, :mod:`~bridge.readers.diagnose.journal`). Memory is
bounded: nothing per prompt outlives its story, and past
:data:`~bridge.readers.diagnose.findings.MAX_FINDINGS` findings are only counted.
"""

from __future__ import annotations

from typing import Any

from bridge.core.events import Acked, Diagnostic, DispositionSignal, Event, GapOpened, ReceiptReady, SealBroken
from bridge.core.prompts import PromptState
from bridge.core.receipts import Receipt
from bridge.core.session import Session
from bridge.core.tracker import Overlap, Tracker, Working
from bridge.core.words import Cause, Signal
from bridge.readers import hashable
from bridge.readers.check import Checker, Contradiction
from bridge.readers.diagnose import journal
from bridge.readers.diagnose.attribution import Attribution
from bridge.readers.diagnose.blocks import Prompts
from bridge.readers.diagnose.facts import Facts, Tally
from bridge.readers.diagnose.findings import MAX_FINDINGS, Finding, Window, Words
from bridge.readers.diagnose.receipts import BRIDGE_STOPS, ReceiptAt, explained, receipt_words
from bridge.readers.diagnose.render import Item, describe, item_json, short
from bridge.readers.diagnose.signals import (
    OverlapAt,
    diagnostic_words,
    disposition_words,
    overlap_words,
    second_prompt_words,
    word_gap,
)
from bridge.readers.diagnose.slot import slot_snapshot
from bridge.readers.diagnose.timeline import Timeline
from bridge.readers.replay import Driver, pending_receipt
from bridge.transcript import Entry, Header


class Diagnoser:
    """Feed it a transcript's entries in order; it keeps findings and a summary."""

    def __init__(self, path: str, header: Header, *, timeline: bool = False, request: str | None = None) -> None:
        self.path = path
        self.header = header
        self.facts = Facts(header)
        self.tally = Tally()
        self.driver = Driver(Session(header.clearing, collect=False, dialogs=header.dialogs), bounded=True)
        #: ``bridge replay --check``'s rules: where the journal contradicts itself.
        self.checker = Checker(self.driver, live="bridge" in header.meta)
        #: Whose work a queued item or a run was, by the evidence's own words.
        self.attribution = Attribution()
        self.findings: list[Finding] = []
        self.dropped_findings = 0
        #: Each prompt's id, send line and receipts, for the reports' blocks (``request``: kept always).
        self.prompts = Prompts(wanted=request)
        self.timeline = Timeline() if timeline else None
        self.closed = False
        self._window = Window()
        #: Prompts whose id was sent again before their story ended (replay lists them too).
        self._shadowed: list[PromptState] = []
        #: Findings the live bridge's own signals add to: gaps by index, seal checks by generation.
        self._gap_findings: dict[int, Finding] = {}
        self._seal_check_finding: dict[Any, Finding] = {}
        self._n = 0
        #: Extension dialogs asked and not yet ended (their ``dialog`` notes), by id.
        self._dialogs: dict[Any, dict[str, Any]] = {}
        #: O1 findings of runs whose start is being read (handed to the attribution at agent_start).
        self._o1: dict[str, Finding] = {}
        #: Where the entry being read sits on the timeline (an observation index; .5 between two).
        self._pos = 0.0

    # -- feeding ---------------------------------------------------------------

    def feed(self, entry: Entry) -> None:
        """One entry, in order: its findings are raised and its evidence recorded.

        Long because the order is the contract: what must be seen *before* the session reads the
        entry (the slot a release or a second prompt displaces, the run open before an
        observation) is taken first, then the driver feeds the session, then its events become
        findings."""
        self.tally.entries += 1
        if entry.t is not None:
            self.facts.last_t = entry.t
        kind, value = entry.kind, entry.value
        session = self.driver.session
        if kind == "signal":
            # What the live bridge raised. Overlaps, gaps and dispositions are
            # recomputed from the evidence; the rest exists only here.
            self._journal_signal(entry)
            return
        item: Item = (kind, entry.line, entry.t, entry.i, value)
        self._window.push(item)
        is_obs = kind == "recv" or kind == "recv_raw"
        self._pos = float(entry.i or 0) if is_obs else session.observations + 0.5
        if kind == "stderr":
            self.facts.stderr.append((entry.t, value))
            return
        if kind == "note":
            self._note(entry)
        elif kind == "exit":
            self._exit(entry)
        releasing, release_snap = self._releasing(entry)
        if kind == "exit":
            self._exit_finding(entry)
        is_prompt = kind == "send" and isinstance(value, dict) and value.get("type") == "prompt"
        displaced, displaced_snap = self._displacing(value) if is_prompt else (None, {})
        tracker_before = session.tracker
        current_before = tracker_before.current
        contradictions = self.checker.before(entry)
        events = self.driver.feed(entry)
        contradictions += self.checker.after(entry)
        for c in contradictions:
            self._contradiction(c, entry, item)
        if is_prompt:
            self.tally.prompts_sent += 1
            if self.timeline is not None:
                self.timeline.prompt_sent(value.get("id"), session.generation, self._pos, entry.t)
            if displaced is not None:
                self._second_prompt(displaced, displaced_snap, entry, item)
        if is_prompt:
            self.attribution.sent(value.get("id"), value.get("message"), entry.line)
            self.prompts.sent(value.get("id"), entry.line)
        for event in events:
            self._event(event, entry, item)
        if kind == "recv" and isinstance(value, dict) and value.get("type") in ("agent_start", "message_start"):
            self._attribute(value, entry.i or 0)
        if is_obs and self.timeline is not None:
            self._timeline_obs(entry, tracker_before, current_before)
        if releasing is not None and releasing.receipt is None:
            receipt = pending_receipt(releasing, session)
            self._receipt(receipt, entry, item, snap=release_snap)
        if self._shadowed and kind == "release":
            self._end_shadowed(value, entry, item)

    def _releasing(self, entry: Entry) -> tuple[PromptState | None, dict[str, Any]]:
        """A ``release`` of a prompt with no receipt yet: it, and the slot before the release."""
        if entry.kind != "release":
            return None, {}
        session = self.driver.session
        releasing = session.open.get(entry.value) if hashable(entry.value) else None
        if releasing is None or releasing.receipt is not None:
            return None, {}
        return releasing, slot_snapshot(session)

    def _displacing(self, value: dict[str, Any]) -> tuple[PromptState | None, dict[str, Any]]:
        """A prompt about to be written: the held prompt it displaces (and the slot before it), and
        an earlier prompt with the same id, whose story still needs an end."""
        session = self.driver.session
        held = session.held
        displaced, snap = (held, slot_snapshot(session)) if held is not None and held.receipt is None else (None, {})
        request = value.get("id")
        earlier = session.open.get(request) if hashable(request) else None
        if earlier is not None and earlier.receipt is None:
            # The same id sent again: the session forgets the first one by
            # id, but its story still needs an end (replay lists it).
            self._shadowed.append(earlier)
        return displaced, snap

    def _end_shadowed(self, request: Any, entry: Entry | None, item: Item | None) -> None:
        """Prompts whose id was sent again: pending once their id is released (or at the end)."""
        keep: list[PromptState] = []
        for state in self._shadowed:
            if state.receipt is not None:
                continue
            if entry is None or state.request == request:
                receipt = pending_receipt(state, self.driver.session)
                self._receipt(receipt, entry, item, snap=slot_snapshot(self.driver.session), at_end=entry is None)
            else:
                keep.append(state)
        self._shadowed = keep

    def finish(self, truncated: bool) -> None:
        """The end of the file: the journal's end, and every prompt still open, are findings."""
        self.facts.truncated = truncated
        session = self.driver.session
        self._pos = session.observations + 0.5
        self._journal_ends()
        if self._shadowed:
            self._end_shadowed(None, None, None)
        for state in list(session.open.values()):
            if state.receipt is None:
                receipt = pending_receipt(state, session)
                self._receipt(receipt, None, None, snap=slot_snapshot(session), at_end=True)
        self._window.close()
        if self.timeline is not None:
            self.timeline.open_prompts()
            self.timeline.open_runs()

    # -- findings ---------------------------------------------------------------

    def _add(self, finding_kw: dict[str, Any], item: Item | None, *, after: bool = True) -> Finding | None:
        """A finding at the current position, with the evidence up to ``item`` (and, with ``after``,
        the entries after it as they come); None past :data:`MAX_FINDINGS`."""
        self._n += 1
        if len(self.findings) >= MAX_FINDINGS:
            self.dropped_findings += 1
            return None
        f = Finding(n=self._n, x=self._pos, **finding_kw)
        f.evidence = self._window.evidence(item)
        if self.timeline is not None:
            self.timeline.add_focus(f.x)
        if after:
            self._window.collect_after(f)
        self.findings.append(f)
        return f

    def _add_words(self, base: dict[str, Any], words: Words, item: Item | None, **more: Any) -> Finding | None:
        """A finding from its base facts and its words."""
        kw = {**base, "title": words.title, "explanation": words.text, "causes": words.causes}
        kw["related"] = words.related
        return self._add({**kw, "stderr": self.facts.stderr_json(), **more}, item)

    def _base(self, entry: Entry | None, signal: str, kind: str = "signal") -> dict[str, Any]:
        session = self.driver.session
        return {
            "kind": kind,
            "signal": signal,
            "idx": entry.i if entry is not None else None,
            "t": entry.t if entry is not None else None,
            "line": entry.line if entry is not None else 0,
            "generation": session.generation,
            "slot": slot_snapshot(session),
        }

    def _event(self, event: Event, entry: Entry, item: Item) -> None:
        """One event of the session's: a finding, a receipt, or a mark on the timeline."""
        session = self.driver.session
        if isinstance(event, Overlap):
            self.tally.count(event.signal)
            self._overlap(event, entry, item)
        elif isinstance(event, GapOpened):
            self.tally.count("gap")
            self._gap(event, entry, item)
        elif isinstance(event, DispositionSignal):
            self.tally.count("disposition")
            words = disposition_words(event, self.facts, session.generation)
            self._add_words(
                self._base(entry, "disposition"), words, item, request=event.request, detail=event.to_json()
            )
        elif isinstance(event, Diagnostic):
            if self.header.dialogs and event.kind == "extension-ui":
                return  # an allowed extension's UI: its dialogs are findings of their own (notes)
            self.tally.count("seal-diagnostic")
            self.facts.ext_seen += 1
            words = diagnostic_words(event, self.facts, session.generation)
            base = self._base(entry, "seal-diagnostic")
            self._add_words(base, words, item, request=self._held_request(), detail=event.to_json())
        elif isinstance(event, SealBroken):
            self._sealbroken(event, entry)
        elif isinstance(event, ReceiptReady):
            unsent = entry.kind == "receipt"
            self._receipt(event.receipt, entry, item, snap=slot_snapshot(session), unsent=unsent)
        elif self.timeline is not None:
            if isinstance(event, Acked):
                self.timeline.prompt_acked(event.request, event.idx)
            elif isinstance(event, Working):
                self.timeline.prompt_working(event.request, event.idx)

    def _overlap(self, o: Overlap, entry: Entry, item: Item) -> None:
        session = self.driver.session
        value = entry.value if isinstance(entry.value, dict) else {}
        words = overlap_words(OverlapAt(o, self.facts, session, value, self._window))
        run = o.detail.get("run")
        base = self._base(entry, o.signal)
        f = self._add_words(base, words, item, request=o.request, run=run, detail=o.to_json(), notes=[])
        gen = session.generation
        if f is not None and o.signal == "O1" and run is not None:
            self.facts.o1_by_run[f"{gen}:{run}"] = f.n
        if f is not None and o.signal == "O1" and run is not None:
            self._o1[f"{gen}:{run}"] = f
        if o.signal == Signal.O5 and o.detail.get("cause") == Cause.QUEUE_UPDATE:
            if f is not None:
                self.facts.o5_items[gen] = f.n
            self.attribution.queued(f, value, o.idx)
        elif o.signal == Signal.O5 and f is not None and o.detail.get("cause") == Cause.UNCAUSED_QUEUE_UPDATE:
            self.attribution.drained(f)

    def _attribute(self, value: dict[str, Any], idx: int) -> None:
        """A run's start, or a user message in it: whose the run is, by its words."""
        tracker, gen = self.driver.session.tracker, self.driver.session.generation
        run = tracker.current
        if run is None:
            return
        key = f"{gen}:{run}"
        if value.get("type") == "agent_start":
            slot = tracker.slot
            request = slot.request if slot is not None and slot.run_id == run else None
            self.attribution.run_started(key, self._o1.pop(key, None), request)
            return
        message = value.get("message")
        if not isinstance(message, dict) or message.get("role") != "user":
            return
        for lane, owner, request in self.attribution.user_message(key, run, message, idx):
            if self.timeline is not None:
                self.timeline.run_owner(lane, owner, request)

    def _second_prompt(self, held: PromptState, snap: dict[str, Any], entry: Entry, item: Item) -> None:
        """A prompt written while another still held the slot (only a deliberate send_raw does it)."""
        self.tally.count("second-prompt")
        session = self.driver.session
        new = entry.value.get("id")
        words = second_prompt_words(held, snap, new, entry.line)
        detail = {"signal": "second-prompt", "request": new, "held": held.request, "after": session.observations}
        base = {**self._base(entry, "second-prompt"), "slot": snap}
        f = self._add_words(base, words, item, request=held.request, run=snap.get("run"), detail=detail)
        if f is not None and snap.get("run"):
            self.facts.displaced_runs[f"{session.generation}:{snap['run']}"] = (held.request, f.n)

    def _gap(self, g: GapOpened, entry: Entry, item: Item) -> None:
        why = g.why  # the journal's raw-line note, or its text (replay.Driver)
        gaps = self.facts.gaps
        gaps[why] = gaps.get(why, 0) + 1
        if self.facts.first_gap is None:
            self.facts.first_gap = g.idx
        f = self._add_words(
            self._base(entry, "gap"),
            Words("", ""),
            item,
            request=self._held_request(),
            detail={**g.to_json(), "why": why},
        )
        if f is not None:
            self._gap_findings[g.idx] = f
            word_gap(f, self.facts)

    def _sealbroken(self, sb: SealBroken, entry: Entry) -> None:
        """The first sign that unsealed the engine: a note on the finding it is about."""
        target = None
        for f in reversed(self.findings):
            if entry.kind == "send" and f.signal == "second-prompt" and f.line == entry.line:
                target = f
                break
            if f.idx == sb.idx and f.kind == "signal" and entry.kind != "send":
                target = f
                break
        if target is None:
            return
        held = (
            f"the held prompt {short(sb.request)} settles outcome-unknown ({sb.cause}) unless the engine refuses it"
            if sb.request is not None
            else "no prompt was held, so no receipt is tainted"
        )
        target.notes.append(
            f"this is the first sign on engine generation {target.generation}: the engine counts as unsealed "
            f"({sb.cause}) from here — {held}, and the live bridge recycles the engine before the next prompt."
        )
        taint = self.facts.taint_finding
        if taint is None or taint[0] != target.generation:
            self.facts.taint_finding = (target.generation, target.n)

    def _receipt(
        self,
        r: Receipt,
        entry: Entry | None,
        item: Item | None,
        *,
        snap: dict[str, Any],
        unsent: bool = False,
        at_end: bool = False,
    ) -> None:
        """Every receipt is counted; an uncertain one, or one the bridge stopped itself, is a finding."""
        self.prompts.receipt(r)
        by = self.tally.receipts.setdefault(r.state, {})
        reason = r.reason or "-"
        by[reason] = by.get(reason, 0) + 1
        if r.usage is not None:
            self.tally.runs += 1
            self.tally.usage = self.tally.usage.plus(r.usage)
        if not explained(r):
            if self.timeline is not None:
                self.timeline.receipt(r, self._pos, unsent=unsent)
            return
        session = self.driver.session
        gen = r.generation if r.generation is not None else session.generation
        recorded = self.driver.recorded.get(r.request) if hashable(r.request) else None
        run = session.tracker.run_facts(r.run)
        at = ReceiptAt(r, self.facts, gen, entry, at_end, run, recorded, self.findings, self._window)
        words = receipt_words(at)
        base = {**self._base(entry, "receipt", kind="receipt"), "slot": snap, "generation": gen}
        kw = {**base, "title": words.title, "explanation": words.text, "causes": words.causes}
        more = {"request": r.request, "run": r.run, "detail": r.to_json(), "related": words.related}
        f = self._add({**kw, **more, "stderr": self.facts.stderr_json()}, item, after=entry is not None)
        if f is not None:
            settled = f" at #{r.settle_idx}" if r.settle_idx is not None else ""
            self.attribution.receipt(f, r.request, f"{r.state}" + (f" ({r.reason})" if r.reason else "") + settled)
            self.attribution.foreign_note(f, r.request, r.run)
        if f is not None and r.reason in BRIDGE_STOPS:
            self._show_stop_note(f, r.stop)
        if f is not None and r.state == "rejected":
            self._show_config_note(f, r.request)
        if self.timeline is not None:
            last = self.findings[-1] if self.findings else None
            self.timeline.receipt(
                r,
                self._pos,
                unsent=unsent,
                finding=last.n if last is not None and last.kind == "receipt" and last.request == r.request else None,
            )

    def _show_stop_note(self, f: Finding, stop: Any) -> None:
        """The bridge's stop note leads the evidence (it is often older than the window)."""
        note = self.facts.stop_note(stop)
        if note is not None and all(e["line"] != note["line"] for e in f.evidence):
            f.evidence.insert(0, item_json(note["item"], False))

    def _show_config_note(self, f: Finding, request: Any) -> None:
        """A rejected/config receipt's ``configure`` note leads the evidence (the answers between
        it and the receipt may have pushed it out of the window)."""
        note = self.facts.config_notes(request).get("configure")
        if note is not None and all(e["line"] != note["line"] for e in f.evidence):
            f.evidence.insert(0, item_json(note["item"], False))

    # -- what only the live bridge's journal records ---------------------------------

    def _exit(self, entry: Entry) -> None:
        """An engine exit: remembered for the receipts it cuts off; open runs end, abandoned."""
        self.tally.engine_exits += 1
        v = entry.value if isinstance(entry.value, dict) else {}
        self.facts.last_exit = {
            "code": v.get("code"),
            "signal": v.get("signal"),
            "t": entry.t,
            "line": entry.line,
            "stderr": self.facts.stderr_json(),
        }
        if self.timeline is not None:
            self.timeline.engine("exit", self._pos, entry.t, describe(entry.kind, entry.value)[1])
            self.timeline.abandon_open_runs(self._pos)

    def _exit_finding(self, entry: Entry) -> None:
        """An exit with an error code or a signal is a finding."""
        v = entry.value if isinstance(entry.value, dict) else {}
        if (v.get("code") in (0, None)) and not v.get("signal"):
            return
        self.tally.abnormal_exits += 1
        self.tally.count("engine-exit")
        ex = self.facts.last_exit or {}
        words = journal.engine_exit_words(v, ex, self.driver.session.generation, entry.t)
        base = {**self._base(entry, "engine-exit", kind="engine"), "stderr": ex.get("stderr") or []}
        kw = {**base, "title": words.title, "explanation": words.text, "causes": words.causes, "detail": v}
        f = self._add(kw, (entry.kind, entry.line, entry.t, None, entry.value))
        if f is not None and self.facts.last_exit is not None:
            self.facts.last_exit["finding"] = f.n

    def _note(self, entry: Entry) -> None:
        """A note of the bridge's, by its ``event``."""
        value = entry.value
        event = value.get("event") if isinstance(value, dict) else None
        item: Item = (entry.kind, entry.line, entry.t, None, value)
        if event == "engine-start":
            self.tally.engine_starts += 1
            if self.timeline is not None:
                label = f"engine start pid {value.get('pid')} generation {value.get('generation')}"
                self.timeline.engine("start", self._pos, entry.t, label)
        elif event == "seal-check":
            self._note_seal_check(entry, value, item)
        elif event == "stop":
            # Whose stop the bridge is about to send (its abort follows): kept for the receipt naming it.
            if hashable(value.get("stop")):
                self.facts.note_stop(value.get("stop"), value, item)
        elif event in ("configure", "configured"):
            # What a prompt asked for and what came of it: kept for a rejected/config receipt.
            self.facts.note_config(value, item)
        elif event == "closing":
            self.facts.note_closing(value, entry.t, entry.line)
        elif event == "journal-failed":
            self._note_journal_failed(entry, value, item)
        elif event == "bridge-closed":
            self.closed = True
        elif event == "dialog" and hashable(value.get("dialog")):
            self._dialogs[value["dialog"]] = value
        elif event == "dialog-end":
            self._dialog_end(entry, value, item)

    def _dialog_end(self, entry: Entry, value: dict[str, Any], item: Item) -> None:
        """An extension dialog's one response: a finding when the controller was to be asked."""
        opened = self._dialogs.pop(value.get("dialog"), None) if hashable(value.get("dialog")) else None
        if not self.header.dialogs:
            return  # a sealed engine's dialog: its seal-diagnostic finding says it was cancelled
        by = str(value.get("by"))
        self.tally.dialogs[by] = self.tally.dialogs.get(by, 0) + 1
        words = journal.dialog_words(opened, value)
        base = self._base(entry, "dialog", kind="dialog")
        request = opened.get("request") if opened is not None else None
        self._add_words(base, words, item, request=request, detail={"opened": opened, "end": value})

    def _note_seal_check(self, entry: Entry, value: dict[str, Any], item: Item) -> None:
        gen = value.get("generation")
        raw = value.get("problems")
        problems: list[Any] = raw if isinstance(raw, list) else []
        self.facts.seal_checks[gen] = problems
        if not problems:
            return
        self.tally.count("seal-check")
        words = journal.seal_check_words(self.facts, gen, problems, noted=True)
        f = self._add_words(self._base(entry, "seal-check", kind="seal"), words, item, detail=value)
        if f is not None:
            self._seal_check_finding[gen] = f

    def _note_journal_failed(self, entry: Entry, value: dict[str, Any], item: Item) -> None:
        """The bridge's last, best-effort note: its journal cannot be written."""
        error = value.get("error")
        self.facts.journal_error = short(error, 300) if error is not None else "no error recorded"
        self.tally.count("journal-failed")
        words = journal.journal_failed_words(self.facts.journal_error, entry.t)
        base = self._base(entry, "journal-failed", kind="journal")
        self.facts.journal_failed = self._add_words(base, words, item, detail=value)

    def _journal_ends(self) -> None:
        """A live bridge's journal (its header names the bridge, or it has an engine-start
        note; hand-written fixtures have neither) that ends without the ``bridge-closed`` note
        a cleanly closed bridge writes last: also one killed before it wrote anything more
        than its header."""
        if self.closed or not (self.tally.engine_starts or "bridge" in self.header.meta):
            return
        self.tally.count("journal-ends-early")
        unsettled = sum(1 for st in [*self.driver.session.open.values(), *self._shadowed] if st.receipt is None)
        words = journal.journal_ends_words(self.facts, unsettled)
        base = {**self._base(None, "journal-ends-early", kind="journal"), "t": self.facts.last_t}
        detail = {"truncated": self.facts.truncated, "journalError": self.facts.journal_error}
        kw = {**base, "title": words.title, "explanation": words.text, "detail": detail, "causes": words.causes}
        kw = {**kw, "related": words.related, "stderr": self.facts.stderr_json()}
        self.facts.journal_end = self._add(kw, None, after=False)

    def _contradiction(self, c: Contradiction, entry: Entry, item: Item) -> None:
        """A place where the journal's evidence and its recorded receipts disagree."""
        self.tally.count("contradiction")
        base = {**self._base(entry, "contradiction", kind="journal"), "idx": c.idx, "request": c.request}
        f = self._add_words({**base, "line": c.line}, journal.contradiction_words(c), item, detail=c.to_json())
        if f is not None and any(e["line"] == c.line for e in f.evidence):
            # The line the contradiction names (a recorded receipt, before the release that found
            # it) is the one the evidence points at.
            for e in f.evidence:
                e["focus"] = e["line"] == c.line

    def _journal_signal(self, entry: Entry) -> None:
        """A signal the live bridge journalled: a better why for a gap, its seal-check action, or engine-down."""
        value = entry.value if isinstance(entry.value, dict) else {}
        name = value.get("signal")
        if name == "gap":
            self._journal_gap(value)
        elif name == "seal-check":
            gen = value.get("generation")
            f = self._seal_check_finding.get(gen)
            if f is not None:
                f.notes.append(journal.seal_check_action(value.get("action")))
                return
            raw = value.get("problems")
            problems: list[Any] = raw if isinstance(raw, list) else []
            self.tally.count("seal-check")
            words = journal.seal_check_words(self.facts, gen, problems, noted=False)
            self._add_words(self._base(entry, "seal-check", kind="seal"), words, None, detail=value)
        elif name == "engine-down":
            self.tally.engine_down += 1
            self.tally.count("engine-down")
            words = journal.engine_down_words(self.facts, value.get("why"))
            self._add_words(self._base(entry, "engine-down", kind="engine"), words, None, detail=value)

    def _journal_gap(self, value: dict[str, Any]) -> None:
        """The live bridge's own gap signal names the why replay can only guess from the text."""
        idx: Any = value.get("idx")  # any JSON: found only when it is the int a gap was raised at
        f = self._gap_findings.get(idx) if hashable(idx) else None
        why = value.get("why")
        if f is None or not isinstance(why, str) or why == f.detail.get("why"):
            return
        gaps = self.facts.gaps
        old: str = f.detail["why"]
        gaps[old] = gaps.get(old, 1) - 1
        if not gaps[old]:
            del gaps[old]
        gaps[why] = gaps.get(why, 0) + 1
        f.detail["why"] = why
        if isinstance(value.get("bytes"), int):
            f.detail["bytes"] = value["bytes"]
        word_gap(f, self.facts)

    # -- helpers ---------------------------------------------------------------------------

    def _held_request(self) -> Any:
        s = self.driver.session.tracker.slot
        return s.request if s is not None else None

    def _timeline_obs(self, entry: Entry, tracker_before: Tracker, current_before: str | None) -> None:
        """An observation on the timeline: its tick, and the run lanes it ended or started."""
        tl = self.timeline
        assert tl is not None
        session = self.driver.session
        tr = session.tracker
        idx = entry.i or 0
        tl.tick(idx, entry.t, entry.kind, entry.value)
        gen = session.generation
        if tr is not tracker_before and current_before is not None:
            tl.run_ended(gen, current_before, idx - 0.5, "abandoned")
            current_before = None
        if current_before is not None and tr.current != current_before:
            ended = tr.run_facts(current_before)
            tl.run_ended(gen, current_before, idx, "settled" if ended is not None and ended.settle_idx else "ended")
        started = tr.run_facts(tr.current) if tr.current != current_before else None
        if started is not None:
            slot = tr.slot
            request = slot.request if slot is not None and slot.run_id == started.id else None
            tl.run_started(gen, started.id, idx, request)

    # -- the report ------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        facts, tally = self.facts, self.tally
        total = sum(sum(v.values()) for v in tally.receipts.values())
        return {
            "file": self.path,
            "engine": {
                "name": facts.engine,
                "pin": facts.pin,
                "version": facts.version,
                "sealed": facts.seal is not None,
                "extensions": facts.seal.get("extensions") if facts.seal is not None else None,
                "sandbox": facts.seal.get("sandbox") if facts.seal is not None else None,
            },
            "entries": tally.entries,
            "observations": self.driver.session.observations,
            "truncated": facts.truncated,
            "journal": {"live": tally.engine_starts > 0, "closed": self.closed, "failed": facts.journal_error},
            "prompts": {"sent": tally.prompts_sent, "receipts": total},
            "receipts": {state: dict(sorted(reasons.items())) for state, reasons in sorted(tally.receipts.items())},
            "usage": {"runs": tally.runs, **tally.usage.to_json()} if tally.runs else None,
            "dialogs": dict(sorted(tally.dialogs.items())),
            "signals": dict(sorted(tally.signals.items())),
            "gaps": {"count": sum(facts.gaps.values()), "why": dict(sorted(facts.gaps.items()))},
            "engine_starts": tally.engine_starts,
            "engine_exits": {"count": tally.engine_exits, "abnormal": tally.abnormal_exits},
            "engine_down": tally.engine_down,
            "findings": {"count": self._n, "shown": len(self.findings), "dropped": self.dropped_findings},
            # The named conversation the bridge resumed (docs: guide/conversations.md), or None.
            "conversation": self.header.meta.get("conversation"),
        }

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json() for f in self.findings], "summary": self.summary()}
