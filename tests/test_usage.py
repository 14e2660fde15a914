"""Usage told truthfully (issue 29): a ``usage`` event for each assistant message of the run as
Pi ends it, and a receipt whose ``usage`` is their sum -- a stopped run's too, its aborted
message included with what Pi reported for it. Through the real pinned Pi and the scripted
model server, under asyncio and trio; the journal replays to the same usage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import State, open_bridge
from bridge.core.progress import TextEvent, UsageEvent
from bridge.core.receipts import Receipt, Usage
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay

LIBRARIES = ["asyncio", "trio"]
TOOL = {"tool_call": {"name": "bash", "arguments": {"command": "echo from-the-tool"}}}


def run(library: str, main: Any) -> Any:
    return asyncio.run(main()) if library == "asyncio" else trio.run(main)


def models(tmp_path: Path, steps: list[dict[str, Any]]) -> tuple[str, Any]:
    server = start_server(steps)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    return str(path), server


def summed(events: list[UsageEvent]) -> Usage:
    total = Usage()
    for event in events:
        total = total.plus(event.usage)
        assert event.total == total, "each event's total is the run's so far"
    return total


async def stopped_mid_stream(path: str, journal: Path) -> tuple[list[Any], Receipt]:
    """A prompt whose second turn is stopped at its first text: its messages, then its receipt."""
    async with open_bridge(scripted_profile(path), journal=journal) as bridge:
        handle = await bridge.submit("run a tool, then write a lot", events=True)
        seen: list[Any] = []
        async for message in handle.messages():
            seen.append(message)
            if isinstance(message, TextEvent):
                await handle.stop()
        return seen, seen[-1]


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_tool_using_run_tells_its_usage_as_it_goes_and_the_receipt_is_their_sum(
    library: str, pinned_pi: object, tmp_path: Path
) -> None:
    steps = [
        {**TOOL, "usage": {"prompt_tokens": 1000, "completion_tokens": 50}},
        {"text": "ran it", "usage": {"prompt_tokens": 1200, "completion_tokens": 30}},
    ]
    path, server = models(tmp_path, steps)
    journal = tmp_path / "j.jsonl"

    async def main() -> list[Any]:
        async with open_bridge(scripted_profile(path), journal=journal) as bridge:
            handle = await bridge.submit("run a tool", events=True)
            return [m async for m in handle.messages()]

    try:
        messages = run(library, main)
    finally:
        server.close()
    receipt = messages[-1]
    assert isinstance(receipt, Receipt) and receipt.state is State.FINISHED
    usages = [m for m in messages if isinstance(m, UsageEvent)]
    assert [(u.stop_reason, u.usage.input, u.usage.output, u.usage.messages) for u in usages] == [
        ("toolUse", 1000, 50, 1),
        ("stop", 1200, 30, 1),
    ]
    # As it goes: the first before the tool ran, the second after.
    kinds = [type(m).__name__ for m in messages]
    assert kinds.index("UsageEvent") < kinds.index("ToolStart") < len(kinds) - 1 - kinds[::-1].index("UsageEvent")
    assert summed(usages) == receipt.usage
    assert receipt.usage is not None and (receipt.usage.input, receipt.usage.output) == (2200, 80)
    assert [r.usage for r in replay(str(journal)).receipts] == [receipt.usage]


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_run_stopped_mid_stream_counts_what_pi_reported_the_aborted_message_included(
    library: str, pinned_pi: object, tmp_path: Path
) -> None:
    """The provider reports usage as it streams (``running_usage``): the aborted message
    carries what was spent up to the stop, and the receipt counts it with the first turn's."""
    steps = [
        {**TOOL, "usage": {"prompt_tokens": 1000, "completion_tokens": 50}},
        {"words": 400, "delay": 0.02, "chunk": 8, "running_usage": True},
    ]
    path, server = models(tmp_path, steps)
    journal = tmp_path / "j.jsonl"
    try:
        messages, receipt = run(library, lambda: stopped_mid_stream(path, journal))
    finally:
        server.close()
    assert (receipt.state, receipt.reason) == ("failed", "interrupted"), receipt
    usages = [m for m in messages if isinstance(m, UsageEvent)]
    assert [u.stop_reason for u in usages] == ["toolUse", "aborted"]
    aborted = usages[-1].usage
    assert aborted.input > 0 and aborted.output > 0, aborted
    assert summed(usages) == receipt.usage
    assert receipt.usage is not None and receipt.usage.input == 1000 + aborted.input and receipt.usage.messages == 2
    assert [r.usage for r in replay(str(journal)).receipts] == [receipt.usage]


async def test_a_provider_that_reports_usage_only_at_the_end_gives_the_aborted_message_none(
    pinned_pi: object, tmp_path: Path
) -> None:
    """OpenAI's chat completions send the usage in a last chunk (``include_usage``): a stream
    stopped before it reported nothing, and Pi's aborted message says 0 tokens. The receipt
    says what was reported -- the first turn's -- and counts the aborted message, not a guess."""
    steps = [
        {**TOOL, "usage": {"prompt_tokens": 1000, "completion_tokens": 50}},
        {"words": 400, "delay": 0.02, "chunk": 8},
    ]
    path, server = models(tmp_path, steps)
    try:
        messages, receipt = await stopped_mid_stream(path, tmp_path / "j.jsonl")
    finally:
        server.close()
    usages = [m for m in messages if isinstance(m, UsageEvent)]
    assert [(u.stop_reason, u.usage.input, u.usage.output) for u in usages] == [
        ("toolUse", 1000, 50),
        ("aborted", 0, 0),
    ]
    assert receipt.usage == summed(usages)
    assert receipt.usage is not None and (receipt.usage.input, receipt.usage.messages) == (1000, 2)
