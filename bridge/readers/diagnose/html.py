"""``bridge diagnose --html``: one self-contained page with a timeline, the findings and the summary.

Rules: the page is the template ``report.html`` (package data: HTML, CSS and script, no external
resource; its Content-Security-Policy forbids any) with the data as JSON in one
``<script type="application/json">`` element, written so that no engine text can close that
element (:func:`json_for_script`). The data is the findings (with their place on the timeline), the
summary, what :class:`~bridge.readers.diagnose.timeline.Timeline` kept, and ``selected``: the
finding whose details the page shows on load (the first card).

The findings' cards are written here, as HTML (every word escaped, :func:`html.escape`), in the
text report's order (:mod:`~bridge.readers.diagnose.blocks`: one block per prompt): each card has
the finding's title, where it is, what happened, its likely causes with what to check (advice an
earlier card gave is a reference to it) and its evidence lines. The first card is marked
``selected``; the script shows its details and lets a click select another.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Any

from bridge.readers.diagnose.blocks import Advice, blocks, clip, request_name
from bridge.readers.diagnose.diagnoser import Diagnoser
from bridge.readers.diagnose.findings import Finding
from bridge.readers.diagnose.render import fmt_t, short
from bridge.readers.diagnose.timeline import Timeline
from bridge.transcript import dumps


def json_for_script(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``,
    U+2028 or U+2029 appears literally, so no engine text can close the element."""
    text = dumps(data).decode("utf-8")
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def template() -> str:
    """The page around the data: ``report.html``, with ``__DATA__`` where the data goes."""
    return resources.files("bridge.readers.diagnose").joinpath("report.html").read_text(encoding="utf-8")


def html_page(diag: Diagnoser) -> str:
    """The whole page for ``diag`` (read with ``timeline=True``; without, the timeline is empty)."""
    tl = diag.timeline or Timeline()
    cards, first = findings_html(diag)
    data = {
        "selected": first,
        "findings": [f.to_json() | {"x": f.x} for f in diag.findings],
        "summary": diag.summary(),
        "ticks": tl.ticks,
        "prompts": tl.prompts,
        "runs": tl.runs,
        "engines": tl.engines,
        "segments": tl.segments(diag.driver.session.observations),
        "dropped": {
            "prompts": tl.dropped_prompts,
            "runs": tl.dropped_runs,
            "ticks": max(0, diag.driver.session.observations - len(tl.ticks)),
        },
    }
    # Split the template once at each place, so that engine text holding a placeholder's name
    # is never replaced.
    head, rest = template().split("__CARDS__", 1)
    middle, tail = rest.split("__DATA__", 1)
    return head + cards + middle + json_for_script(data) + tail


def findings_html(diag: Diagnoser) -> tuple[str, int | None]:
    """The findings column: a heading per block, a card per finding; and the first card's number."""
    out: list[str] = []
    advice = Advice()
    first: int | None = None
    for block in blocks(diag):
        if not block.findings:
            continue
        out.append(f'<h3 class="block">{escape(block.heading())}</h3>')
        for f in block.findings:
            out.append(_card(f, advice, selected=first is None))
            first = f.n if first is None else first
    if first is None:
        out.append('<div class="sub">No signal, gap or uncertain receipt: nothing to explain.</div>')
    return "\n".join(out), first


def _card(f: Finding, advice: Advice, *, selected: bool) -> str:
    """One finding's card (see the module's rules)."""
    box = "rec" if f.kind == "receipt" else ("eng" if f.kind in ("engine", "journal") else "sig")
    where = f"observation {f.idx}" if f.idx is not None else (f"journal line {f.line}" if f.line else "the end")
    who = f" · {short(request_name(f.request), 60)}" if f.request is not None else ""
    mark = ' selected" aria-current="true' if selected else ""
    out = [
        f'<div class="f {box}{mark}" data-n="{f.n}" id="card-{f.n}" tabindex="0">',
        f'<div class="t">[{f.n}] {escape(f.title)}</div>',
        f'<div class="sub">{escape(where)}, {escape(fmt_t(f.t))}{escape(who)}</div>',
        f'<div class="what">{escape(f.explanation)}</div>',
    ]
    if f.causes:
        out.append('<div class="sub">Likely causes, and what to check:</div><ul class="causes">')
        for c in f.causes:
            said = advice.say(f.n, c)
            now = f" (now {escape(said.now)})" if said.now else ""
            if said.same is not None:
                ref = f'<a href="#card-{said.same}">[{said.same}]</a>'
                out.append(f'<li class="ref">same as {ref}{now}: {escape(clip(said.cause))}</li>')
                continue
            if said.check_in is not None:
                ref = f'<a href="#card-{said.check_in}">[{said.check_in}]</a>'
                check = f"check: as in {ref}{now}: {escape(clip(said.check))}"
            else:
                check = "check: " + escape(said.check)
            out.append(f'<li>{escape(said.cause)}<div class="chk">{check}</div></li>')
        out.append("</ul>")
    if f.evidence:
        out.append('<div class="sub">Evidence (journal line, observation, t):</div><div class="ev">')
        for ev in f.evidence:
            idx = f"#{ev['idx']}" if ev["idx"] is not None else ""
            t = f"{ev['t']:.3f}" if isinstance(ev["t"], (int, float)) else ""
            line = f"{'>>' if ev['focus'] else '  '} L{ev['line']:<5} {idx:>6} {t:>8}  {ev['summary']}"
            focus = ' class="focus"' if ev["focus"] else ""
            out.append(f"<div{focus}>{escape(line)}</div>")
        out.append("</div>")
    for note in f.notes:
        out.append(f'<div class="note">Then: {escape(note)}</div>')
    if f.related:
        refs = ", ".join(f'<a href="#card-{n}">[{n}]</a>' for n in f.related)
        out.append(f'<div class="sub">See also: {refs}</div>')
    out.append("</div>")
    return "\n".join(out)
