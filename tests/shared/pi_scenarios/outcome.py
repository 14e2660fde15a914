"""What a scenario's check gets, and how a check fails.

:class:`Outcome` is one run of a scenario (:func:`tests.shared.pi_scenarios.runner.run`):
the live receipts, every notification the bridge sent (signals, engine lifecycle, receipts),
the live tracker output (the session is switched to ``collect=True``), the replay of the
journal, the parsed journal and the model server's requests, with the queries the checks ask
of them. A check that finds the pinned Pi (or the bridge) doing something else fails loudly:
:class:`ScenarioError`, by :func:`expect` and :func:`known`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import attrs

from bridge.core.receipts import Receipt, describe
from bridge.readers.replay import ReplayResult
from bridge.transcript import Entry

T = TypeVar("T")


#: The tracker's overlap signals (the rest are the bridge's: unsealed, gap, seal-*, ...).
OVERLAP_SIGNALS = frozenset({"O1", "O2", "O3", "O4", "O5", "O6", "aborted-without-stop"})


class ScenarioError(AssertionError):
    """The pinned Pi (or the bridge) did not do what the scenario expects."""


def expect(cond: Any, what: str) -> None:
    if not cond:
        raise ScenarioError(what)


def known(value: T | None, what: str) -> T:
    """``value``, which must be there (else :class:`ScenarioError`: ``what``)."""
    if value is None:
        raise ScenarioError(what)
    return value


@attrs.define(eq=False)
class Outcome:
    name: str
    journal: Path
    seconds: float
    #: Live receipts of the prompts the scenario submitted, by request id.
    receipts: dict[str, Receipt]
    #: Every notification except streamed text, in order.
    notes: list[dict[str, Any]]
    #: Streamed text per request.
    texts: dict[str, str]
    #: The live session's own tracker output (``collect=True``).
    live: dict[str, list[dict[str, Any]]]
    replay: ReplayResult
    entries: list[Entry]
    requests: list[dict[str, Any]]
    facts: dict[str, Any]

    # -- queries -------------------------------------------------------------------

    @property
    def signals(self) -> list[dict[str, Any]]:
        return [n for n in self.notes if n.get("type") == "signal"]

    def signal_names(self) -> list[str]:
        return [n["signal"] for n in self.signals]

    @property
    def overlaps(self) -> list[dict[str, Any]]:
        """The overlap signals the live bridge raised, in the tracker's JSON form."""
        return [
            {k: v for k, v in n.items() if k not in ("type", "generation")}
            for n in self.signals
            if n.get("signal") in OVERLAP_SIGNALS
        ]

    def receipt(self, request: str) -> Receipt:
        expect(request in self.receipts, f"{self.name}: no receipt for {request}")
        return self.receipts[request]

    def recv(self, *types: str, start: int = 0, end: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(i, obj)`` of the engine lines with ``start < i <= end`` (and one of ``types``)."""
        out = []
        for e in self.entries:
            if e.kind != "recv" or e.i is None or e.i <= start or (end is not None and e.i > end):
                continue
            if not types or e.value.get("type") in types:
                out.append((e.i, e.value))
        return out

    def response(self, rid: str) -> dict[str, Any]:
        found = [v for _, v in self.recv("response") if v.get("id") == rid]
        expect(len(found) == 1, f"{self.name}: expected one response with id {rid}, got {len(found)}")
        return found[0]

    def sends(self, *types: str) -> list[dict[str, Any]]:
        return [e.value for e in self.entries if e.kind == "send" and (not types or e.value.get("type") in types)]

    def run_events(self, request: str) -> list[dict[str, Any]]:
        """The engine lines from the prompt's ack to its settle."""
        r = self.receipt(request)
        what = f"{self.name}: {request} has no ack/settle index"
        return [v for _, v in self.recv(start=known(r.ack_idx, what) - 1, end=known(r.settle_idx, what))]

    def summary(self) -> str:
        parts = [describe(r) for r in self.receipts.values()]
        sig = [n["signal"] + (f"({n.get('why') or n.get('cause') or n.get('kind') or ''})") for n in self.signals]
        return "; ".join(parts) + (" | signals: " + ", ".join(sig) if sig else " | no signals")
