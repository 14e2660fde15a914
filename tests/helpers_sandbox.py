"""What the real-Pi sandbox tests share (tests/test_confinement.py, tests/test_hostile_*.py): the
model's bash call as a script step, and a journal read for what the tool printed and noted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def tool_step(command: str) -> dict[str, Any]:
    """One step of the scripted model: a call of Pi's bash tool with ``command``."""
    return {"tool_call": {"name": "bash", "arguments": {"command": command}}}


def read_journal(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tool_outputs(journal: Path) -> list[str]:
    """What each of Pi's tool calls returned (its ``tool_execution_end``), in order."""
    out = []
    for e in read_journal(journal):
        recv = e.get("recv")
        if isinstance(recv, dict) and recv.get("type") == "tool_execution_end":
            out.append("".join(c.get("text", "") for c in recv["result"]["content"]))
    return out


def tool_output(journal: Path) -> str:
    """What Pi's first tool call printed."""
    outputs = tool_outputs(journal)
    if not outputs:
        raise AssertionError("the model's bash call never ran")
    return outputs[0]


def notes(journal: Path, event: str) -> list[dict[str, Any]]:
    return [e["note"] for e in read_journal(journal) if isinstance(e.get("note"), dict) and e["note"]["event"] == event]
