"""``bridge diagnose --html``: one self-contained page with a timeline, the findings and the summary.

Rules: the page is the template ``report.html`` (package data: HTML, CSS and script, no external
resource; its Content-Security-Policy forbids any) with the data as JSON in one
``<script type="application/json">`` element, written so that no engine text can close that
element (:func:`json_for_script`). The data is the findings (with their place on the timeline), the
summary and what :class:`~bridge.readers.diagnose.timeline.Timeline` kept.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from bridge.readers.diagnose.diagnoser import Diagnoser
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
    data = {
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
    return template().replace("__DATA__", json_for_script(data))
