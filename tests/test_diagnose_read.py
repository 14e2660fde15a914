"""``bridge diagnose`` read by a person (issue 33, "Readable"): the summary first, one block per
prompt, advice said once and referred to, ``--request ID``, ``--brief``; the page's cards with
their causes and evidence, at phone width, the first finding selected on load.

The journal is the recorded extension dialog (``fixtures/pi-1.6.0/extension_dialog.jsonl``): a
seal check about no prompt, p1 with two seal diagnostics, p2 with two more, a ``handled``
disposition and an outcome-unknown receipt; the same cause (an extension loaded despite the seal)
four times.
"""

from __future__ import annotations

import json
import re
import subprocess
from html import escape
from pathlib import Path
from typing import Any

from bridge.readers.diagnose import diagnose
from bridge.readers.diagnose.blocks import Advice
from bridge.readers.diagnose.command import BRIEF_KEYS
from tests.conftest import FIXTURES
from tests.test_diagnose import CHROMIUM_FLAGS, body_attrs, bridge, chromium

DIALOG = FIXTURES / "pi-1.6.0" / "extension_dialog.jsonl"
LATE = FIXTURES / "fake" / "late_own_prompt.jsonl"
EXTENSION = "an extension is loaded despite the seal"


def text(*args: str) -> str:
    p = bridge("diagnose", *args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def full() -> list[dict[str, Any]]:
    return diagnose(str(DIALOG)).to_json()["findings"]


def blocks(out: str) -> dict[str, list[int]]:
    """Each block's heading (its first word: the prompt id, or 'Not') and the findings in it."""
    found: dict[str, list[int]] = {}
    for chunk in out.split("\n== ")[1:]:
        head = chunk.split(" ", 1)[0]
        found[head] = [int(n) for n in re.findall(r"^\[(\d+)\] ", chunk, re.M)]
    return found


def finding_text(out: str, n: int) -> str:
    """One finding's lines in the text report (up to the next finding or block)."""
    m = re.search(rf"^\[{n}\] .*?(?=^\[\d+\] |^== |\Z)", out, re.M | re.S)
    assert m, f"finding [{n}] not in the report"
    return m.group(0)


def test_the_summary_comes_before_the_first_finding():
    out = text(str(DIALOG))
    summary = out.index("\nSummary\n")
    first = re.search(r"^\[\d+\] ", out, re.M)
    assert first is not None and summary < first.start()
    head = out[summary : out.index("\n== ")]
    assert "receipts: finished 1; outcome-unknown 1 (disposition 1)" in head
    assert "signals: " in head and "journal: " in head and "the bridge closed cleanly" in head


def test_each_prompts_findings_sit_in_its_block():
    fs = full()
    got = blocks(text(str(DIALOG)))
    want: dict[str, list[int]] = {}
    for f in fs:
        want.setdefault(f["request"] if f["request"] is not None else "Not", []).append(f["n"])
    assert got == want
    assert got["p1"] == [2, 3] and got["p2"] == [4, 5, 6, 7] and got["Not"] == [1]
    out = text(str(DIALOG))
    assert re.search(r"^== p2 \(sent at line 39\): outcome-unknown \(disposition\); 4 finding\(s\)$", out, re.M)
    # a prompt with nothing to explain still has its block, with its receipt
    assert re.search(r"^== p1 \(sent at line 3\): finished at #16; nothing to explain$", text(str(LATE)), re.M)
    assert blocks(text(str(LATE))) == {"p1": [], "p2": [1, 2, 3, 4, 5]}


def test_a_repeated_cause_is_printed_once_and_referenced_after():
    fs = full()
    with_it = [f["n"] for f in fs if any(c["cause"] == EXTENSION for c in f["causes"])]
    assert with_it == [2, 3, 4, 5]
    out = text(str(DIALOG))
    assert out.count(f"- {EXTENSION}\n") == 1
    assert f"- {EXTENSION}\n" in finding_text(out, 2)
    for n in (3, 4, 5):
        said = finding_text(out, n)
        assert f"- {EXTENSION}" not in said
        assert re.search(r"- same as \[2\] \(now \d extension_ui_request", said), said
        assert ">> L" in said  # the evidence is kept
    # the JSON keeps every cause in full
    assert all(any(c["cause"] == EXTENSION for c in f["causes"]) for f in fs if f["n"] in (3, 4, 5))


def test_advice_refers_to_the_first_finding_that_gave_it():
    advice = Advice()
    first = {"cause": "someone else wrote", "check": "the stdin; 1 line so far"}
    assert advice.say(1, first).same is None
    again = advice.say(3, {"cause": "someone else wrote", "check": "the stdin; 2 line so far"})
    assert again.same == 1 and again.now == "2 line so far"
    other = advice.say(4, {"cause": "an extension", "check": "the stdin; 1 line so far"})
    assert other.same is None and other.check_in == 1 and other.now == ""
    assert advice.say(5, {"cause": "someone else wrote", "check": "another place"}).same is None


def test_request_shows_that_prompts_block_and_no_other_prompts_findings():
    out = text("--request", "p2", str(DIALOG))
    assert "\nSummary\n" in out
    assert blocks(out) == {"p2": [4, 5, 6, 7]}
    assert "[1] " not in out and "[2] " not in out
    # said once within what is shown: p2's first extension finding gives the cause in full
    assert f"- {EXTENSION}\n" in finding_text(out, 4)
    data = json.loads(text("--json", "--request", "p2", str(DIALOG)))
    assert list(data) == ["findings", "summary"]
    assert [f["n"] for f in data["findings"]] == [4, 5, 6, 7]
    assert list(data["findings"][0]) == list(full()[0])


def test_an_unknown_request_exits_2_naming_the_ids_the_journal_has():
    p = bridge("diagnose", "--request", "p9", str(DIALOG))
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert "'p9'" in line and "p1, p2" in line
    assert bridge("diagnose", "--json", "--request", "p9", str(DIALOG)).returncode == 2


def test_brief_has_one_line_per_finding():
    fs = full()
    out = text("--brief", str(DIALOG))
    lines = re.findall(r"^\[(\d+)\] (.*)$", out, re.M)
    assert [int(n) for n, _ in lines] == [f["n"] for f in fs]
    for (_, rest), f in zip(lines, fs):
        assert rest.startswith(f["title"])
        if f["idx"] is not None:
            assert f"observation {f['idx']}" in rest
    assert "Evidence" not in out and "Likely causes" not in out
    assert out.index("\nSummary\n") < out.index("\n[1] ")
    data = json.loads(text("--brief", "--json", str(DIALOG)))
    assert [tuple(f) for f in data["findings"]] == [BRIEF_KEYS] * len(fs)
    brief_p1 = json.loads(text("--brief", "--json", "--request", "p1", str(DIALOG)))
    assert [f["n"] for f in brief_p1["findings"]] == [2, 3]


def _card(page: str, n: int) -> str:
    m = re.search(
        rf'<div class="f [^"]*" (?:aria-current="true" )?data-n="{n}" id="card-{n}".*?(?=<div class="f |<h3 |\n  </div>)',
        page,
        re.S,
    )
    assert m, f"no card for finding {n}"
    return m.group(0)


def test_the_page_holds_each_cards_causes_and_evidence(tmp_path: Path):
    out = tmp_path / "dialog.html"
    text("--html", str(out), str(DIALOG))
    page = out.read_text()
    fs = full()
    for f in fs:
        card = _card(page, f["n"])
        focus = next((e for e in f["evidence"] if e["focus"]), f["evidence"][0])
        assert escape(focus["summary"]) in card
        if f["n"] == 2:
            assert f'<li>{EXTENSION}<div class="chk">check: ' in card
        elif f["n"] in (3, 4, 5):
            assert re.search(r'same as <a href="#card-2">\[2\]</a> \(now \d ', card)
    # the first card in the page is selected on load, and the data says which it is
    assert re.search(r'<div class="f \w+ selected" aria-current="true" data-n="1" id="card-1"', page)
    assert page.count('selected" aria-current="true"') == 1
    data = json.loads(page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0])
    assert data["selected"] == 1
    # phone width: one column
    media = page.split("@media (max-width: 760px)", 1)[1].split("\n}", 1)[0]
    assert "#side { grid-template-columns: minmax(0, 1fr);" in media


def test_the_page_at_phone_width_fits_and_shows_the_first_finding(tmp_path: Path):
    out = tmp_path / "late.html"
    text("--html", str(out), str(LATE))
    exe = chromium()
    doms = {}
    for width in (1280, 420):
        proc = subprocess.run(
            [
                exe,
                *CHROMIUM_FLAGS,
                f"--window-size={width},1600",
                f"--user-data-dir={tmp_path / str(width)}",
                "--dump-dom",
                out.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        doms[width] = proc.stdout
    for width, dom in doms.items():
        attrs = body_attrs(dom)
        assert attrs["data-ok"] == "1", attrs.get("data-errors")
        assert attrs["data-findings-fit"] == "1", width
        detail = dom.split('id="detail"', 1)[1].split('id="findings"', 1)[0]
        assert "[1] O5: p2's own prompt" in detail  # shown without hovering
        assert re.search(r'class="marker finding selected" data-n="1"', dom)
