"""How the reports are read: one block per prompt, and advice said once.

Rules (the text report and the page both follow them):

- Every prompt the journal sent (or recorded a receipt for) has a row: its id, the journal line
  that sent it, and its receipt(s). Rows are kept for the first :data:`MAX_PROMPTS` prompts (and
  always for the one ``--request`` asks about); later ones are only counted, so memory stays
  bounded.
- A finding belongs to the prompt it names (:attr:`~bridge.readers.diagnose.findings.Finding.request`).
  Each prompt's block holds its receipt and its findings in order; findings about no prompt
  (engine exits, seal checks with nothing held, the journal's end) make a block of their own. The
  blocks come in the order they start in the journal (a prompt's send, or its first finding), so
  a seal check that failed before the first prompt is read first.
- Advice is said once (:class:`Advice`): a cause whose words and check were already shown, in an
  earlier finding of the same report, is shown as a reference to that finding
  (``same as [1]: ...``); a check already shown under another cause is referred to the same way.
  A check's running count (its last clause, ``...; 3 extension_ui_request / extension_error line(s)
  so far``) does not make it new advice: the reference gives the count as it is now.
  Only what the report has shown counts, so ``--request`` never refers to a finding it left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from bridge.core.receipts import Receipt
from bridge.readers.diagnose.findings import Finding
from bridge.readers.diagnose.render import q, short

if TYPE_CHECKING:
    from bridge.readers.diagnose.diagnoser import Diagnoser

#: Prompts whose row is kept (their id, send line and receipts); later ones are only counted.
MAX_PROMPTS: Final = 1000
#: Ids named when ``--request`` asks for one the journal does not have.
IDS_NAMED: Final = 8
#: Characters of a cause (or check) repeated in a reference to where it was first said.
REF_CHARS: Final = 70


def request_name(request: Any) -> str:
    """A request id as ``--request`` takes it and the reports print it."""
    return q(request)


@attrs.define
class PromptRow:
    """One prompt: its id, the journal line that sent it (None: a receipt for a prompt never
    written), and its receipts in words (``outcome-unknown (overlap) at #33``; an id sent twice
    has two)."""

    request: Any
    line: int | None
    receipts: list[str] = attrs.field(factory=list)


@attrs.define
class Prompts:
    """The rows, by id (see the module's rules); ``wanted`` is the ``--request`` id, always kept."""

    wanted: str | None = None
    rows: dict[str, PromptRow] = attrs.field(factory=dict)
    dropped: int = 0

    def _row(self, request: Any, line: int | None) -> PromptRow | None:
        name = request_name(request)
        row = self.rows.get(name)
        if row is None:
            if len(self.rows) >= MAX_PROMPTS and name != self.wanted:
                self.dropped += 1
                return None
            row = self.rows[name] = PromptRow(request, line)
        return row

    def sent(self, request: Any, line: int) -> None:
        """A prompt written to the engine at journal ``line``."""
        self._row(request, line)

    def receipt(self, r: Receipt) -> None:
        """A prompt's receipt (the row is made here for a receipt of a prompt never sent)."""
        row = self._row(r.request, None)
        if row is not None:
            row.receipts.append(receipt_words(r))


def receipt_words(r: Receipt) -> str:
    """``outcome-unknown (overlap) at #33``: the state, its reason, the observation it settled at."""
    return (
        r.state + (f" ({r.reason})" if r.reason else "") + (f" at #{r.settle_idx}" if r.settle_idx is not None else "")
    )


@attrs.define
class Block:
    """One prompt's block (``row`` None: the findings about no prompt)."""

    row: PromptRow | None
    findings: list[Finding] = attrs.field(factory=list)

    def first_line(self) -> float:
        """Where the block starts in the journal: its prompt's send, or its first finding (one at
        the end of the file, line 0, counts as last)."""
        lines = [f.line for f in self.findings[:1] if f.line]
        if self.row is not None and self.row.line is not None:
            lines.append(self.row.line)
        return min(lines) if lines else float("inf")

    def heading(self) -> str:
        """``p2 (sent at line 24): outcome-unknown (overlap) at #33; 5 finding(s)``."""
        count = f"{len(self.findings)} finding(s)" if self.findings else "nothing to explain"
        if self.row is None:
            return f"Not about one prompt (the engine, the seal, the journal): {count}"
        sent = f"sent at line {self.row.line}" if self.row.line is not None else "never sent"
        receipt = ", then ".join(self.row.receipts) or "no receipt"
        return f"{short(request_name(self.row.request), 60)} ({sent}): {receipt}; {count}"


def blocks(diag: Diagnoser, request: str | None = None) -> list[Block]:
    """The findings grouped by prompt (the module's rules); with ``request``, only its block."""
    by_name: dict[str, Block] = {name: Block(row) for name, row in diag.prompts.rows.items()}
    loose = Block(None)
    for f in diag.findings:
        if f.request is None:
            loose.findings.append(f)
            continue
        name = request_name(f.request)
        block = by_name.get(name)
        if block is None:  # a prompt past MAX_PROMPTS, or a finding naming an id never sent
            block = by_name[name] = Block(PromptRow(f.request, None))
        block.findings.append(f)
    if request is not None:
        return [by_name[request]] if request in by_name else []
    every = list(by_name.values()) + ([loose] if loose.findings else [])
    return sorted(every, key=Block.first_line)  # stable: prompts keep their order


def known(diag: Diagnoser, request: str) -> bool:
    """Whether the journal has a prompt (or a finding) with this id."""
    return request in diag.prompts.rows or any(
        f.request is not None and request_name(f.request) == request for f in diag.findings
    )


def some_ids(diag: Diagnoser) -> str:
    """The first few ids the journal has, for the line that refuses an unknown ``--request``."""
    names = list(diag.prompts.rows)
    total = len(names) + diag.prompts.dropped
    if not names:
        return "it sent no prompt"
    shown = ", ".join(short(n, 40) for n in names[:IDS_NAMED])
    return f"its prompts: {shown}" + (f", … ({total} in all)" if total > IDS_NAMED else "")


@attrs.frozen
class Said:
    """How one cause is shown: ``same`` is the finding that already showed this cause with this check
    (show a reference only); otherwise ``check_in`` is the finding that already showed its check.
    ``now`` is the running count, when it changed since (else "")."""

    cause: str
    check: str
    same: int | None = None
    now: str = ""
    check_in: int | None = None


def _stem(check: str) -> tuple[str, str]:
    """A check without its running count (``...; 4 extension_ui_request / extension_error line(s) so
    far``): two checks that differ only there give the same advice."""
    head, sep, tail = check.rpartition("; ")
    return (head, tail) if sep and tail.endswith("so far") else (check, "")


@attrs.define
class Advice:
    """What the report has said so far (see the module's rules)."""

    _pairs: dict[tuple[str, str], tuple[int, str]] = attrs.field(factory=dict)
    _checks: dict[str, tuple[int, str]] = attrs.field(factory=dict)

    def say(self, n: int, cause: dict[str, str]) -> Said:
        """Finding ``n`` shows ``cause``: in full, or as a reference to where it was said."""
        words, check = cause.get("cause", ""), cause.get("check", "")
        stem, count = _stem(check)
        said = self._pairs.get((words, stem))
        if said is not None and said[0] != n:
            return Said(words, check, same=said[0], now=count if count != said[1] else "")
        self._pairs.setdefault((words, stem), (n, count))
        first = self._checks.get(stem) if check else None
        if check:
            self._checks.setdefault(stem, (n, count))
        if first is None or first[0] == n:
            return Said(words, check)
        return Said(words, check, check_in=first[0], now=count if count != first[1] else "")


def clip(text: str) -> str:
    """The start of a cause or check, for a reference (``…`` when cut)."""
    if len(text) <= REF_CHARS:
        return text
    cut = text[:REF_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > REF_CHARS // 2 else cut).rstrip(" ,;:(") + " …"
