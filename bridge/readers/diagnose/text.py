"""``bridge diagnose``'s text report: a header and the summary, then one block per prompt.

Rules: the summary comes first (prompts, receipts by state, signals, the journal's end); then each
prompt's block (:mod:`~bridge.readers.diagnose.blocks`: its receipt, then its findings in order),
and the findings about no prompt in a block of their own, last. Each finding reads top to bottom as
what happened, the slot right after it, the evidence (journal line, observation index, time; ``>>``
marks its focus), the last stderr lines where they bear on it (gaps, exits, receipts,
engine-down), the likely causes with what to check (a cause and check the report already showed
is a one-line reference to the finding that showed it), what came of it, and the findings it
relates to. ``request`` keeps one prompt's block; ``brief`` prints one line per finding instead of
the blocks. Lines wrap at 110 columns; everything comes from
:meth:`~bridge.readers.diagnose.diagnoser.Diagnoser.summary` and the findings, nothing is recomputed.
"""

from __future__ import annotations

from typing import Any

from bridge.core.receipts import Usage, usage_words
from bridge.readers.diagnose.blocks import Advice, blocks, clip, request_name
from bridge.readers.diagnose.diagnoser import Diagnoser
from bridge.readers.diagnose.findings import MAX_FINDINGS, Finding
from bridge.readers.diagnose.render import fmt_t, short
from bridge.readers.diagnose.slot import slot_words


def format_text(diag: Diagnoser, *, request: str | None = None, brief: bool = False) -> str:
    """The whole report, without a final newline (``request``: only that prompt's block;
    ``brief``: one line per finding)."""
    s = diag.summary()
    out: list[str] = [f"bridge diagnose: {diag.path}"]
    out += _head(s)
    out += _summary(s)
    if brief:
        out.append("")
        shown = [f for f in diag.findings if request is None or _about(f, request)]
        out.append(f"Findings ({len(shown)})" + (f" about {short(request, 60)}" if request is not None else ""))
        out += [_brief(f) for f in shown]
    else:
        advice = Advice()
        for block in blocks(diag, request):
            out.append("")
            out.append("== " + block.heading())
            for f in block.findings:
                out += _finding(f, advice)
    if diag.dropped_findings:
        out.append("")
        out.append(f"({diag.dropped_findings} more finding(s) not shown: only the first {MAX_FINDINGS} are kept)")
    return "\n".join(out)


def _about(f: Finding, request: str) -> bool:
    return f.request is not None and request_name(f.request) == request


def _where(f: Finding) -> str:
    return f"observation {f.idx}" if f.idx is not None else (f"journal line {f.line}" if f.line else "the end")


def _brief(f: Finding) -> str:
    """``[1] O5: ...   (observation 17, p2)``: number, title, observation, prompt."""
    who = f", {short(request_name(f.request), 40)}" if f.request is not None else ""
    return f"[{f.n}] {f.title}   ({_where(f)}{who})"


def _head(s: dict[str, Any]) -> list[str]:
    """The engine, its pin and seal, and the counts."""
    out: list[str] = []
    eng = s["engine"]
    if eng["version"] is not None or eng["pin"] is not None:
        head = f"engine {eng['name']} {eng['version']} (pin {eng['pin']})"
    else:
        name = short(eng["name"]) if eng["name"] is not None else "not named in the header"
        head = f"engine {name} (no version or pin recorded)"
    head += f"; seal recorded, extensions {short(eng['extensions'])}" if eng["sealed"] else "; no seal recorded"
    out.append("  " + head)
    sandbox = sandbox_words(eng.get("sandbox"))
    if sandbox is not None:
        out.extend(_wrap(sandbox, "  "))
    if s.get("conversation"):
        name = short(str(s["conversation"]), 70)
        out.append(f"  conversation {name} (`bridge conversations show {name}` lists its journals)")
    out.append(
        f"  {s['observations']} observations, {s['prompts']['sent']} prompt(s) sent, "
        f"{s['findings']['count']} finding(s)" + ("; the last line was cut off" if s["truncated"] else "")
    )
    return out


def sandbox_words(sandbox: Any) -> str | None:
    """The header's ``seal.sandbox`` in a line (None: the journal predates confinement)."""
    if not isinstance(sandbox, dict):
        return None
    if sandbox.get("enabled") is False:
        return (
            f"sandbox: OFF ({sandbox.get('why', 'not recorded why')}): the engine's tools had the bridge user's rights"
        )
    writes = ", ".join(map(str, sandbox.get("write") or [])) or "nowhere"
    hidden = sandbox.get("hidden") or []
    return (
        f"sandbox: {sandbox.get('tool', '?')}: writes only in {writes}; home {sandbox.get('home', '?')}"
        + (f"; hidden {', '.join(map(str, hidden))}" if hidden else "")
        + ("; its own PID namespace" if sandbox.get("pid_namespace") else "")
        + f"; network {sandbox.get('network', '?')}"
        + _limit_words(sandbox.get("limits"))
    )


def _limit_words(limits: Any) -> str:
    """The header's ``seal.sandbox.limits`` (``bridge/profiles/limits.py``), or nothing before them."""
    if not isinstance(limits, dict):
        return "; limits none" if limits == "none" else ""
    names = (("memory", "memory"), ("processes", "processes"), ("tmp", "/tmp"), ("working_folder", "working folder"))
    return "; limits: " + ", ".join(f"{word} {limits[k]}" for k, word in names if k in limits)


def _finding(f: Finding, advice: Advice) -> list[str]:
    """One finding: what happened, the slot, the evidence, stderr, causes, notes, related findings."""
    out = [""]
    out.append(f"[{f.n}] {f.title}   ({_where(f)}, {fmt_t(f.t)})")
    out.extend(_wrap("What happened: " + f.explanation, "    "))
    out.extend(_wrap(slot_words(f.slot).replace("slot:", "Slot right after it:", 1), "    "))
    out.append("    Evidence (journal line, observation, t):")
    for ev in f.evidence:
        mark = ">>" if ev["focus"] else "  "
        idx = f"#{ev['idx']}" if ev["idx"] is not None else ""
        t = f"{ev['t']:.3f}" if isinstance(ev["t"], (int, float)) else ""
        out.append(f"    {mark} L{ev['line']:<6} {idx:>7} {t:>9}  {ev['summary']}")
    if f.stderr and f.signal in ("gap", "engine-exit", "receipt", "engine-down"):
        out.append("    Last stderr lines before it:")
        for line in f.stderr:
            out.append(f"       {fmt_t(line['t'])}  {short(line['text'], 140)}")
    if f.causes:
        out.append("    Likely causes, and what to check:")
        for c in f.causes:
            said = advice.say(f.n, c)
            if said.same is not None:
                now = f" (now {said.now})" if said.now else ""
                out.extend(_wrap(f"- same as [{said.same}]{now}: {clip(said.cause)}", "      "))
                continue
            out.extend(_wrap("- " + said.cause, "      "))
            if said.check_in is not None:
                now = f" (now {said.now})" if said.now else ""
                out.extend(_wrap(f"check: as in [{said.check_in}]{now}: {clip(said.check)}", "          "))
            else:
                out.extend(_wrap("check: " + said.check, "          "))
    for note in f.notes:
        out.extend(_wrap("Then: " + note, "    "))
    if f.related:
        out.append("    See also: " + ", ".join(f"[{n}]" for n in f.related))
    return out


def _summary(s: dict[str, Any]) -> list[str]:
    """Prompts and receipts, signals, gaps, engines and the journal, counted."""
    out = [""]
    out.append("Summary")
    pending = sum(s["receipts"].get("pending", {}).values())
    line = f"  prompts: {s['prompts']['sent']} sent, {s['prompts']['receipts'] - pending} receipt(s)"
    out.append(line + (f", {pending} pending (no receipt in the journal)" if pending else ""))
    if s["receipts"]:
        parts = []
        for state, reasons in s["receipts"].items():
            n = sum(reasons.values())
            detail = ", ".join(f"{r} {c}" for r, c in reasons.items() if r != "-")
            parts.append(f"{state} {n}" + (f" ({detail})" if detail else ""))
        out.append("  receipts: " + "; ".join(parts))
    else:
        out.append("  receipts: none")
    usage = s.get("usage")
    if usage:
        u = Usage.from_json({k: v for k, v in usage.items() if k != "runs"})
        out.append(f"  usage: {usage['runs']} run(s), " + usage_words(u))
    dialogs = s.get("dialogs")
    if dialogs:
        said = ", ".join(f"{by} {n}" for by, n in dialogs.items())
        out.append(f"  dialogs: {sum(dialogs.values())} (who gave each its one response: {said})")
    out.append("  signals: " + (", ".join(f"{k} {v}" for k, v in s["signals"].items()) or "none"))
    gaps = s["gaps"]
    out.append(
        f"  gaps: {gaps['count']}"
        + (" (" + ", ".join(f"{k} {v}" for k, v in gaps["why"].items()) + ")" if gaps["count"] else "")
    )
    out.append(
        f"  engine: {s['engine_starts']} start(s), {s['engine_exits']['count']} exit(s) "
        f"({s['engine_exits']['abnormal']} abnormal), down {s['engine_down']} time(s)"
    )
    journal = s["journal"]
    if journal["live"] or journal["failed"]:
        how = "the bridge closed cleanly" if journal["closed"] else "ends before the bridge closed"
    else:
        how = "a transcript (no engine-start note): no bridge close to expect"
    how += f"; could not be written: {journal['failed']}" if journal["failed"] else ""
    how += "; the last line was cut off" if s["truncated"] else ""
    out.append(f"  journal: {how} ({s['entries']} entries)")
    return out


def _wrap(text: str, indent: str, width: int = 110) -> list[str]:
    words = text.split(" ")
    lines: list[str] = []
    cur = indent
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent + "  " + w + " "
        else:
            cur += w + " "
    if cur.strip():
        lines.append(cur.rstrip())
    return lines
