"""The Python API under asyncio (SPEC §7: "the same under trio and asyncio"): ``asyncio.run``
around ``open_bridge``, through the real pinned Pi and the scripted model server -- receipts,
streaming, a stop, a cancelled ``prompt``, five bridges at once, the block's exceptions, Ctrl-C,
a profile that cannot be prepared -- and after each, nothing left behind (no private folder,
no engine). The bridge runs as trio's guest (``bridge/live/aio.py``); the trio path is the rest
of the suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import ProfileError, State, open_bridge
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.aio import AsyncioBridge
from bridge.profiles.orphans import private_root
from bridge.profiles.pi import PiProfile, scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import ROOT

STEPS = [{"text": "Hello from asyncio", "chunk": 3}, {"words": 400, "delay": 0.02}, {"text": "third"}]


@pytest.fixture
def models(tmp_path: Path, pinned_pi: object) -> Iterator[Any]:
    """``(models.json, server)``: the scripted server with :data:`STEPS` (then its default)."""
    server = start_server(STEPS)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    try:
        yield str(path), server
    finally:
        server.close()


def _nothing_left(tmp: Path, pid: int | None = None) -> None:
    """Nothing private in ``tmp``, nor, given a process's ``pid``, in the bridges' per-user root."""
    left = [p.name for p in tmp.iterdir() if p.name.startswith(("pi-bridge-pi-", "pi-bridge-cwd-"))]
    if pid is not None:
        left += [p.name for p in private_root().iterdir() if p.name.startswith(f"pi-bridge-pi-{pid}-")]
        left += [p.name for p in private_root().iterdir() if p.name.startswith(f"pi-bridge-cwd-{pid}-")]
    assert left == [], "a bridge's private folders (its key) are still on disk"


def test_receipts_streaming_a_stop_and_prompt_under_asyncio(models: Any, private_tmp: Path, tmp_path: Path) -> None:
    path, _ = models
    journal = tmp_path / "j.jsonl"

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with open_bridge(scripted_profile(path), journal=journal) as bridge:
            assert isinstance(bridge, AsyncioBridge)
            h = await bridge.submit("hi", stream=True)
            out["text"] = [t async for t in h.text()]
            out["r1"] = await h.receipt()
            h2 = await bridge.submit("write a lot", stream=True)
            async for _ in h2.text():
                out["stop"] = await h2.stop()
                break
            out["r2"] = await h2.receipt()
            out["r3"] = await bridge.prompt("third")
            out["status"] = bridge.status()  # a synchronous call, from asyncio
            assert bridge.engine is not None and bridge.engine.alive
            out["pid"] = bridge.engine.pid
        return out

    out = asyncio.run(main())
    assert "".join(out["text"]) == "Hello from asyncio" and len(out["text"]) > 1
    assert out["r1"].state is State.FINISHED and out["r1"].reply == "Hello from asyncio"
    assert (out["r2"].state, out["r2"].reason) == ("failed", "interrupted") and out["r2"].stop == out["stop"]
    assert out["r3"].state is State.FINISHED and out["r3"].reply == "third"
    assert out["status"]["receipts"] == 3
    with pytest.raises(ProcessLookupError):
        os.kill(out["pid"], 0)  # the engine is reaped
    _nothing_left(private_tmp)
    replayed = {r.request: (r.state, r.reason) for r in replay(str(journal)).receipts}
    assert replayed == {r.request: (r.state, r.reason) for r in (out["r1"], out["r2"], out["r3"])}


def test_a_cancelled_prompt_is_stopped_and_still_gets_its_receipt(models: Any, private_tmp: Path) -> None:
    path, _ = models

    async def main() -> Any:
        async with open_bridge(scripted_profile(path), journal=False) as bridge:
            await bridge.prompt("warm up")
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await bridge.prompt("write a lot", request="long")
            await bridge.drain()
            return bridge.get_receipt("long")

    receipt = asyncio.run(main())
    assert (receipt.state, receipt.reason) == ("failed", "interrupted"), receipt
    _nothing_left(private_tmp)


def test_five_bridges_at_once_under_asyncio_each_with_its_own_journal(
    models: Any, private_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = models
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    async def one(n: int) -> tuple[str, Any]:
        async with open_bridge(scripted_profile(path)) as bridge:
            receipt = await bridge.prompt(f"hello {n}")
            return str(bridge.journal.path), receipt

    async def main() -> list[tuple[str, Any]]:
        return await asyncio.gather(*(one(n) for n in range(5)))

    results = asyncio.run(main())
    assert len({j for j, _ in results}) == 5
    assert all(r.state is State.FINISHED for _, r in results)
    for journal, receipt in results:
        assert [(r.request, r.state) for r in replay(journal).receipts] == [(receipt.request, receipt.state)]
    _nothing_left(private_tmp)


class Boom(Exception):
    pass


def test_the_blocks_own_exception_comes_out_as_raised_and_nothing_is_left(models: Any, private_tmp: Path) -> None:
    path, _ = models

    async def main() -> None:
        async with open_bridge(scripted_profile(path), journal=False) as bridge:
            h = await bridge.submit("write a lot", stream=True)
            async for _ in h.text():
                raise Boom("mine")

    with pytest.raises(Boom, match="mine"):
        asyncio.run(main())
    _nothing_left(private_tmp)


def test_a_profile_that_cannot_be_prepared_raises_profile_error_under_asyncio(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_bridge(PiProfile(pi_dir=str(tmp_path / "no-pi")), journal=False):
            raise AssertionError("never opened")

    with pytest.raises(ProfileError):
        asyncio.run(main())


def test_signals_and_steering_calls_under_asyncio(models: Any, private_tmp: Path) -> None:
    path, _ = models

    async def main() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with open_bridge(scripted_profile(path), journal=False) as bridge:

            async def watch() -> None:
                async for note in bridge.signals():
                    seen.append(note)

            watcher = asyncio.create_task(watch())
            await asyncio.sleep(0)
            bridge.configure(thinking="off")  # synchronous, from asyncio
            with pytest.raises(ValueError, match="already in use"):
                bridge.submit_nowait("a", request="x")
                bridge.submit_nowait("b", request="x")  # its check sees the first at once
            await bridge.drain()
            bridge.shutdown()
            await bridge.wait_closed()
        await watcher  # the channel ends when the bridge has closed
        return seen

    seen = asyncio.run(main())
    assert any(n.get("type") == "receipt" and n["id"] == "x" for n in seen), seen
    assert any(n.get("type") == "engine" for n in seen), seen
    _nothing_left(private_tmp)


def test_ctrl_c_under_asyncio_settles_every_receipt_and_leaves_nothing(models: Any, tmp_path: Path) -> None:
    """A program of a user's: ``asyncio.run`` with a prompt streaming, SIGINT. ``asyncio.run``
    cancels the block; the bridge closes as it does under trio (the running prompt stopped,
    its receipt given and journaled, the engine reaped, the folders removed)."""
    path, _ = models
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    journal = tmp_path / "j.jsonl"
    program = tmp_path / "user.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import asyncio, sys
            from bridge import open_bridge
            from bridge.profiles.pi import scripted_profile

            async def main():
                async with open_bridge(scripted_profile({path!r}), journal={str(journal)!r}) as bridge:
                    await bridge.prompt("warm up")
                    h = await bridge.submit("write a lot", stream=True)
                    async for _ in h.text():
                        print("streaming", bridge.engine.pid, flush=True)
                        await asyncio.sleep(30)

            try:
                asyncio.run(main())
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
            """
        )
    )
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, str(program)], stdout=subprocess.PIPE, env=env, cwd=ROOT) as proc:
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline().decode()
            assert line.startswith("streaming"), line
            pid = int(line.split()[1])
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130
            assert proc.stdout.read().decode().strip() == "interrupted"
        finally:
            if proc.poll() is None:
                proc.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    _nothing_left(tmp, proc.pid)
    receipts = {r.request: (r.state, r.reason) for r in replay(str(journal)).receipts}
    assert receipts["p1"] == ("finished", None)
    assert receipts["p2"][0] == "failed", receipts


def _query_steps() -> list[dict[str, Any]]:
    return [
        {"tool_call": {"name": "bash", "arguments": {"command": "echo from-the-tool"}}},
        {"text": "ran it", "chunk": 2},
    ]


def _check_messages(messages: list[Any]) -> None:
    from bridge.core.progress import TextEvent, ToolEnd, ToolStart
    from bridge.core.receipts import Receipt

    kinds = [type(m).__name__ for m in messages]
    assert isinstance(messages[-1], Receipt) and messages[-1].state is State.FINISHED, kinds
    assert not any(isinstance(m, Receipt) for m in messages[:-1]), "the receipt comes once, last"
    assert any(isinstance(m, ToolStart) and m.tool == "bash" for m in messages), kinds
    assert any(isinstance(m, ToolEnd) and "from-the-tool" in (m.result or "") for m in messages), kinds
    assert "".join(m.delta for m in messages if isinstance(m, TextEvent)) == "ran it"


@pytest.fixture
def tool_models(tmp_path: Path, pinned_pi: object) -> Iterator[str]:
    server = start_server(_query_steps())
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    try:
        yield str(path)
    finally:
        server.close()


def test_query_is_one_typed_stream_under_asyncio(tool_models: str, private_tmp: Path) -> None:
    from bridge import query

    async def main() -> list[Any]:
        return [m async for m in query("run a tool", engine=scripted_profile(tool_models), journal=False)]

    _check_messages(asyncio.run(main()))
    _nothing_left(private_tmp)


async def test_query_is_one_typed_stream_under_trio(tool_models: str, private_tmp: Path) -> None:
    from bridge import query

    _check_messages([m async for m in query("run a tool", engine=scripted_profile(tool_models), journal=False)])
    _nothing_left(private_tmp)


@pytest.mark.parametrize("heading", ["## One call: `query()`", "## asyncio and trio alike"])
def test_the_readmes_examples_run_as_written(heading: str, tool_models: str, tmp_path: Path) -> None:
    """The query() and asyncio examples (the README's once, now guide "The Python API"'s) run
    as written against a model server that calls a tool, outside the checkout."""
    text = (ROOT / "docs" / "pages" / "guide" / "python-api.md").read_text()
    code = text.split(heading, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    program = tmp_path / "example.py"
    program.write_text(code.replace('"models.json"', repr(tool_models)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, str(program)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert ": finished [" in done.stdout, done.stdout


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_a_provider_without_a_model_is_a_profile_error_at_open(library: str, pinned_pi: object) -> None:
    """Not five engine starts and a ``rejected``/``engine-down`` receipt at the first prompt:
    one clear line at open, as the CLI refuses it."""
    import trio

    async def main() -> None:
        async with open_bridge(PiProfile(provider="anthropic"), journal=False):
            raise AssertionError("never opened")

    with pytest.raises(ProfileError, match="needs a model too"):
        asyncio.run(main()) if library == "asyncio" else trio.run(main)


def test_after_the_block_the_bridge_answers_as_a_closed_trio_bridge_does(models: Any, private_tmp: Path) -> None:
    """Found by a new-user trial: after ``async with`` ended, a settled handle's ``receipt()``,
    ``submit``, ``prompt``, a second ``aclose`` and ``stop`` raised trio's ``RunFinishedError`` or
    ``BridgeClosedError`` under asyncio, where a closed trio bridge answers them."""
    path, _ = models

    async def main() -> list[Any]:
        async with open_bridge(scripted_profile(path), journal=False) as bridge:
            h = await bridge.submit("hi")
            first = await h.receipt()
        late = await bridge.submit("too late")
        return [
            first,
            await h.receipt(),
            await late.receipt(),
            await bridge.prompt("later still"),
            await bridge.aclose(),
            await bridge.stop(h.request),
            await h.stop(),
        ]

    first, again, late, later, closed, stopped, handle_stopped = asyncio.run(main())
    assert first.state is State.FINISHED and again is first
    assert (late.state, late.reason) == ("rejected", "closing")
    assert (later.state, later.reason) == ("rejected", "closing")
    assert closed is None and stopped is None and handle_stopped is None
    _nothing_left(private_tmp)


def test_open_bridge_outside_an_event_loop_says_where_it_runs(tmp_path: Path) -> None:
    opened = open_bridge(PiProfile(pi_dir=str(tmp_path)), journal=False)

    def enter() -> None:
        opened.__aenter__().send(None)

    with pytest.raises(RuntimeError, match=r"trio.run\(main\) or asyncio.run\(main\(\)\)"):
        enter()


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_a_misspelt_keyword_is_a_type_error_naming_the_call_made(library: str) -> None:
    """``await bridge.submit("hi", timout=3)`` names ``submit`` (under asyncio it named
    ``submit_nowait``, which the door passed ``**kw`` to), and nothing is accepted."""
    import trio

    from bridge import CommandProfile

    engine = CommandProfile([sys.executable, str(ROOT / "tools" / "fake_engine.py")])

    async def main() -> dict[str, str]:
        said: dict[str, str] = {}
        async with open_bridge(engine, journal=False) as bridge:
            for name, call in (("submit", bridge.submit), ("prompt", bridge.prompt)):
                with pytest.raises(TypeError) as e:
                    await call("hi", timout=3)  # type: ignore[call-arg]
                said[name] = str(e.value)
            with pytest.raises(TypeError) as e:
                bridge.submit_nowait("hi", timout=3)  # type: ignore[call-arg]
            said["submit_nowait"] = str(e.value)
            with pytest.raises(TypeError) as e:
                bridge.configure(modle="m")  # type: ignore[call-arg]
            said["configure"] = str(e.value)
            assert bridge.receipts_issued == 0 and bridge.status()["held"] is None and bridge.status()["queued"] == []
        return said

    said = asyncio.run(main()) if library == "asyncio" else trio.run(main)
    for name, message in said.items():
        keyword = "modle" if name == "configure" else "timout"
        assert message.endswith(f".{name}() got an unexpected keyword argument '{keyword}'"), message


LEAVE_EARLY = """
import asyncio, sys, trio
from bridge import query, scripted_profile

async def main() -> None:
    seen = []
    stream = query("hi", engine=scripted_profile(sys.argv[2]), journal=sys.argv[3])
    async for message in stream:
        seen.append(type(message).__name__)
        if sys.argv[4] == "break":
            break
        raise KeyError("the loop's own error")
    print("left after", seen)

async def main_raising() -> None:
    try:
        await main()
    except KeyError as e:
        print("caught", e)

run = main if sys.argv[4] == "break" else main_raising
if sys.argv[1] == "trio":
    trio.run(run)
else:
    asyncio.run(run())
print("the program ended")
"""


@pytest.mark.parametrize("how", ["break", "raise"])
@pytest.mark.parametrize("library", ["trio", "asyncio"])
def test_leaving_query_early_stops_the_prompt_and_the_program_ends_cleanly(
    library: str, how: str, models: Any, tmp_path: Path
) -> None:
    """Issue 42: ``async for m in query(...): break`` and then returning from ``main`` crashed
    under trio (``Nursery is closed to new arrivals``, ``TrioInternalError``, exit 1, after
    40 s) and printed ``aclose(): asynchronous generator is already running`` under asyncio.
    Now the program ends with status 0 and nothing on stderr, the prompt is stopped
    (``failed``/``closing``, journaled) and the engine exited."""
    path, _server = models
    program = tmp_path / "leave.py"
    program.write_text(LEAVE_EARLY)
    journal = tmp_path / "leave.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, str(program), library, path, str(journal), how],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert "the program ended" in done.stdout
    if how == "raise":
        assert "caught" in done.stdout and "own error" in done.stdout, done.stdout
    assert [(r.state, r.reason) for r in replay(str(journal)).receipts] == [(State.FAILED, "closing")]
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any("exit" in line for line in lines), "the engine was not reaped before the program ended"


async def test_a_query_closed_at_once_ends_when_the_bridge_has_closed(models: Any, tmp_path: Path) -> None:
    """``await stream.aclose()`` mid-stream: the bridge is closed when it returns (the journal
    holds the engine's exit and the stopped prompt's receipt), and the stream ends there."""
    from bridge import query

    path, _server = models
    journal = tmp_path / "closed.jsonl"
    stream = query("hi", engine=scripted_profile(path), journal=str(journal))
    first = await stream.__anext__()
    assert first is not None
    await stream.aclose()
    text = journal.read_text()
    assert '"exit"' in text and '"closing"' in text
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
