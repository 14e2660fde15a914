"""The supervision as a pure object: every receipt row the live bridge reaches, and the
lifecycle's interleavings, driven with scripted engine lines and a clock that is a number.

No process, no trio, no pipe: a :class:`Run` stands for the world. It answers the
supervision's ``Spawn`` at once (or not, or with a failure), collects what it writes, delivers
the receipts, and feeds lines shaped as Pi 1.6 writes them (its ``docs/rpc.md``; the same
shapes as ``fixtures/pi-1.6.0/``). Every test then replays the journal the actions describe
(``Record*``, written by the real :class:`~bridge.live.journal.Journal`) and checks that
replay gives the same receipts: the live bridge and replay decide alike.

Where a process test checks the same rule, it stays only for what a process adds (pipes,
signals, the real Pi): docs: guide/developing.md#tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from bridge.core.lifecycle import (
    BridgeConfig,
    Close,
    Closed,
    Deliver,
    Shutdown,
    Spawn,
    Stop,
    StopEngine,
    Submit,
    Write,
)
from bridge.core.receipts import Receipt
from bridge.core.steering import Wanted
from bridge.core.supervision import (
    RecordExit,
    RecordNote,
    RecordRaw,
    RecordReceipt,
    RecordRecv,
    RecordRelease,
    RecordSend,
    RecordSignal,
    RecordStderr,
    RecordUpdates,
    Supervision,
    Tell,
    Text,
)
from bridge.live.journal import Journal
from bridge.readers.replay import replay

# --------------------------------------------------------------------------
# Pi's lines


def line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def ack(request: str, disposition: str | None = "started") -> bytes:
    data = {"disposition": disposition} if disposition is not None else None
    body: dict[str, Any] = {"type": "response", "id": request, "command": "prompt", "success": True}
    if data is not None:
        body["data"] = data
    return line(body)


def refusal(request: str, error: str = "Agent is busy") -> bytes:
    return line({"type": "response", "id": request, "command": "prompt", "success": False, "error": error})


def answer(command: str, cid: str) -> bytes:
    return line({"type": "response", "id": cid, "command": command, "success": True})


def assistant(text: str, stop: str = "stop", error: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}] if text else [],
        "api": "openai-completions",
        "provider": "scripted",
        "model": "scripted-1",
        "usage": {"input": 10, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 12},
        "stopReason": stop,
    }
    if error is not None:
        message["errorMessage"] = error
    return message


def run_start(user: str = "hi") -> list[bytes]:
    """A run up to the model having the prompt (``agent_start`` .. the user message)."""
    message = {"role": "user", "content": [{"type": "text", "text": user}]}
    return [
        line({"type": "agent_start"}),
        line({"type": "turn_start"}),
        line({"type": "message_start", "message": message}),
        line({"type": "message_end", "message": message}),
    ]


def delta(text: str) -> bytes:
    return line(
        {
            "type": "message_update",
            "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": text},
        }
    )


def run_end(text: str = "hello", stop: str = "stop", error: str | None = None, aborted: bool = False) -> list[bytes]:
    """The rest of the run: the assistant's message streamed and ended, the run settled."""
    message = assistant(text, stop, error)
    return [
        line({"type": "message_start", "message": assistant("", stop)}),
        delta(text),
        line({"type": "message_end", "message": message}),
        line({"type": "turn_end", "message": message, "toolResults": []}),
        line({"type": "agent_end", "messages": [message], "willRetry": False}),
        line({"type": "agent_settled", "aborted": aborted}),
    ]


def whole_run(request: str, text: str = "hello", **kw: Any) -> list[bytes]:
    return [ack(request), *run_start(), *run_end(text, **kw)]


# --------------------------------------------------------------------------
# The world, as a number and a few lists


@attrs.frozen
class Launch:
    """What :class:`~bridge.core.supervision.LaunchFacts` asks of a launch: a command engine."""

    argv: tuple[str, ...] = ("engine",)
    startup: tuple[dict[str, Any], ...] = ()
    clearing: tuple[str, ...] = ("clear_queue",)
    header: dict[str, Any] = attrs.field(factory=dict)
    dialogs: bool = False
    check: Any = None
    confinement: Any = None
    refusal: Any = None


class Run:
    """One supervision and the world around it."""

    def __init__(self, tmp_path: Path, *, launch: Launch | None = None, spawn: bool = True, **config: Any) -> None:
        self.config = BridgeConfig(**config)
        self.launch = launch or Launch()
        self.sup = Supervision(self.config, self.launch.clearing, journal=True)
        self.now = 0.0
        self.spawn = spawn
        self.path = tmp_path / "journal.jsonl"
        self.journal = Journal(self.path, clearing=tuple(self.launch.clearing))
        #: Commands written to the engine, in order; receipts by request; everything told.
        self.written: list[dict[str, Any]] = []
        self.receipts: dict[str, Receipt] = {}
        self.told: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.pending_spawn: list[int] = []
        self.stopped: list[int] = []
        self.closed = False
        self.pid = 100

    # -- carrying out --

    def do(self, actions: list[Any]) -> None:
        later: list[Any] = []
        for action in actions:
            kind = type(action)
            j = self.journal
            if kind is Write:
                self.written.append(action.cmd)
            elif kind is Deliver:
                assert action.receipt.request not in self.receipts, "two receipts for one prompt"
                self.receipts[action.receipt.request] = action.receipt
            elif kind is Spawn:
                if self.spawn:
                    later.append(action.generation)
                else:
                    self.pending_spawn.append(action.generation)
            elif kind is StopEngine:
                self.stopped.append(action.generation)
            elif kind is Closed:
                self.closed = True
            elif kind is Tell:
                self.told.append(action.payload)
            elif kind is Text:
                self.text.append(action.text)
            elif kind is RecordSend:
                j.send(action.cmd, action.t)
            elif kind is RecordRecv:
                j.recv(action.idx, action.line, action.parsed, action.t)
            elif kind is RecordRaw:
                j.recv_raw(action.idx, action.raw, action.t)
            elif kind is RecordUpdates:
                j.recv_elided_updates(action.count, action.nbytes, action.first, action.t)
            elif kind is RecordRelease:
                j.release(action.request, action.t)
            elif kind is RecordStderr:
                j.stderr(action.text, action.t)
            elif kind is RecordExit:
                j.exit(action.code, action.signal, action.t)
            elif kind is RecordNote:
                j.note(action.payload, action.t)
            elif kind is RecordSignal:
                j.signal(action.payload, action.t)
            elif kind is RecordReceipt:
                j.receipt(action.receipt, action.t)
        for generation in later:
            self.spawned(generation)

    def spawned(self, generation: int) -> None:
        self.pid += 1
        self.do(self.sup.spawned(generation, self.pid, self.launch, self.now))

    # -- what the world does --

    def submit(self, request: str, message: str = "hi", **kw: Any) -> None:
        fields: dict[str, Any] = {"images": None, "stream": False, "timeout": None, "events": False}
        fields.update(kw)
        self.do(
            self.sup.feed(
                Submit(
                    request,
                    message,
                    fields["images"],
                    fields["stream"],
                    fields["timeout"],
                    fields["events"],
                    fields.get("stall_timeout"),
                    Wanted(),
                ),
                self.now,
            )
        )

    def feed(self, event: Any) -> None:
        self.do(self.sup.feed(event, self.now))

    def lines(self, *lines: bytes) -> None:
        self.do(self.sup.lines(self.sup.generation, list(lines), self.now))

    def each(self, *lines: bytes) -> None:
        """The same lines, one read each."""
        for one in lines:
            self.lines(one)

    def exit(self, code: int | None = 1, signal: int | None = None, unsent: tuple[str, ...] = ()) -> None:
        self.do(self.sup.exited(self.sup.generation, code, signal, list(unsent), self.now))

    def stderr(self, text: str) -> None:
        self.do(self.sup.stderr(self.sup.generation, text, self.now))

    def advance(self, seconds: float) -> None:
        """Time passes: every deadline due on the way fires, in order."""
        end = self.now + seconds
        while True:
            due = self.sup.next_deadline()
            if due is None or due > end:
                break
            self.now = max(self.now, due)
            self.do(self.sup.tick(self.now))
        self.now = end

    def stop(self, request: str) -> None:
        self.feed(Stop(request))

    # -- reading --

    def sent(self, kind: str) -> list[dict[str, Any]]:
        return [c for c in self.written if c.get("type") == kind]

    def word(self, request: str) -> tuple[str, str | None]:
        r = self.receipts[request]
        return str(r.state), (str(r.reason) if r.reason is not None else None)

    def replayed(self) -> dict[str, dict[str, Any]]:
        """The journal so far, replayed: each prompt's receipt as replay decides it."""
        self.journal._writer.flush()
        return {r.request: r.to_json() for r in replay(str(self.path)).receipts if r.request is not None}

    def agrees_with_replay(self) -> None:
        replayed = self.replayed()
        for request, receipt in self.receipts.items():
            got = replayed.get(request)
            live = receipt.to_json()
            if got is None:
                # Never sent: a rejection decided before any engine saw it is not in replay's
                # evidence (the journal's receipt line says it).
                assert live["state"] == "rejected", (request, live)
                continue
            for key in ("state", "reason", "stop", "run", "ackIdx", "workingIdx", "settleIdx"):
                assert got.get(key) == live.get(key), (request, key, got.get(key), live.get(key))


@pytest.fixture
def world(tmp_path: Path) -> Any:
    """``world(**config)``: a fresh supervision (and its journal) in the world of numbers."""
    made: list[Run] = []

    def make(**kw: Any) -> Run:
        folder = tmp_path / f"run-{len(made)}"
        folder.mkdir()
        made.append(Run(folder, **kw))
        return made[-1]

    yield make
    for run in made:
        run.journal.close()


# --------------------------------------------------------------------------
# The decision table (docs: design/receipts.md), row by row, through the supervision


def test_a_prompt_is_written_once_the_engine_runs_and_finishes_on_its_own_runs_settle(world: Any) -> None:
    w = world()
    w.submit("p1", "Say hello.")
    assert [c["id"] for c in w.sent("prompt")] == ["p1"]
    w.lines(*whole_run("p1", "Hello!"))
    assert w.word("p1") == ("finished", None)
    r = w.receipts["p1"]
    assert r.reply == "Hello!" and r.run == "run-1" and r.ack_idx == 1 and r.working_idx is not None
    assert r.stop is None and r.pid == 101 and r.generation == 1
    w.agrees_with_replay()


def test_the_queue_is_bounded_in_bytes_too_and_a_prompt_past_it_is_rejected_queue_full(world: Any) -> None:
    """Issue 42: each queued prompt holds its whole text (4 x 50 MB queued: +290 MB), so the
    queue is bounded in bytes (``queue_bytes``), not only in count: a prompt that would take the
    waiting ones past it, or is past it alone, is ``rejected``/``queue-full`` at once (never
    lost: it has its receipt); the held prompt's bytes are not the queue's."""
    w = world(queue_bytes=1000)
    w.submit("p1", "x" * 900)  # written at once: it holds the slot, not the queue
    w.submit("p2", "y" * 600)
    w.submit("p3", 'z"' * 200)  # 400 characters, 600 bytes JSON-escaped: 1,200 waiting
    assert w.word("p3") == ("rejected", "queue-full")
    w.submit("p4", "w" * 400)  # 1,000 waiting: fits
    w.submit("p5", "v" * 1001)
    assert w.word("p5") == ("rejected", "queue-full")
    assert "p2" not in w.receipts and "p4" not in w.receipts
    w.lines(*whole_run("p1", "one"))
    assert w.word("p1") == ("finished", None)
    w.submit("p6", "u" * 600)  # p2 left the queue for the slot: 1,000 waiting with p4
    assert "p6" not in w.receipts
    assert [c["id"] for c in w.sent("prompt")] == ["p1", "p2"]
    w.agrees_with_replay()


def test_row1_unsent_queue_full_cancelled_closing_and_engine_down(world: Any) -> None:
    w = world(queue_max=1)
    w.submit("p1")
    w.submit("p2")  # queued behind p1
    w.submit("p3")  # the queue holds one
    assert w.word("p3") == ("rejected", "queue-full")
    w.stop("p2")
    assert w.word("p2") == ("rejected", "cancelled")
    w.submit("p4")
    w.feed(Close("close"))
    assert w.word("p4") == ("rejected", "closing")
    assert [c["id"] for c in w.sent("prompt")] == ["p1"]  # nothing unwritten is written once closing began
    down = world(spawn=False)
    down.submit("q1")
    down.do(down.sup.spawn_failed(down.pending_spawn[0], "cannot start the engine 'nope': No such file", down.now))
    assert down.word("q1") == ("rejected", "engine-down")
    assert "No such file" in (down.receipts["q1"].native_error or "")
    w.agrees_with_replay()


def test_row3_the_engine_refusing_the_prompt_is_rejected_engine(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(refusal("p1", "Agent is already processing"))
    assert w.word("p1") == ("rejected", "engine")
    assert w.receipts["p1"].native_error == "Agent is already processing"
    w.agrees_with_replay()


def test_row4_no_ack_in_time_is_delivery_unknown_no_ack(world: Any) -> None:
    w = world(ack_timeout=3.0)
    w.submit("p1")
    w.advance(2.9)
    assert "p1" not in w.receipts
    w.advance(0.2)
    assert w.word("p1") == ("delivery-unknown", "no-ack")
    assert w.stopped == [1]  # the engine is recycled
    w.agrees_with_replay()


def test_row5_a_stop_not_obeyed_within_its_grace_is_outcome_unknown_settle_timeout(world: Any) -> None:
    w = world(stop_grace=5.0)
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    w.stop("p1")
    (abort,) = w.sent("abort")
    w.lines(delta("still "), delta("going"))  # the run goes on: the abort is not obeyed
    w.advance(4.9)
    assert "p1" not in w.receipts
    w.advance(0.2)
    assert w.word("p1") == ("outcome-unknown", "settle-timeout")
    assert w.receipts["p1"].stop == abort["id"]
    w.agrees_with_replay()


def test_row6_a_gap_while_held_taints_and_the_own_run_settles_outcome_unknown_gap(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start(), b"this is not json")
    assert any(t.get("signal") == "gap" for t in w.told)
    assert any(t.get("signal") == "unsealed" for t in w.told)
    w.lines(*run_end())
    assert w.word("p1") == ("outcome-unknown", "gap")
    assert w.stopped == [1]  # recycled before the next prompt
    w.agrees_with_replay()


def test_row6_a_disposition_that_is_not_started_taints(world: Any) -> None:
    w = world(taint_grace=2.0)
    w.submit("p1")
    w.lines(ack("p1", "queued"))
    w.advance(2.1)  # its own run never comes: the taint grace gives it up
    assert w.word("p1") == ("outcome-unknown", "disposition")
    w.agrees_with_replay()


def test_row6_an_overlap_o1_taints_the_held_prompt(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(line({"type": "agent_start"}))  # a run before the ack: O1
    assert any(t.get("signal") == "O1" for t in w.told)
    w.lines(ack("p1"), *run_end())  # that run was not p1's: p1's own never comes
    assert "p1" not in w.receipts
    w.advance(5.1)  # the taint grace
    assert w.word("p1") == ("outcome-unknown", "overlap")
    w.agrees_with_replay()


def test_row8_the_engine_exiting_once_the_model_had_it_is_outcome_unknown(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    w.stderr("TypeError: boom")
    w.exit(1)
    assert w.word("p1") == ("outcome-unknown", "engine-exited")
    assert "TypeError: boom" in (w.receipts["p1"].native_error or "")
    w.agrees_with_replay()


def test_row9_the_engine_exiting_before_the_model_had_it_is_delivery_unknown(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"))
    w.exit(None, 9)
    assert w.word("p1") == ("delivery-unknown", "engine-exited")
    assert "signal 9" in (w.receipts["p1"].native_error or "")
    w.agrees_with_replay()


def test_an_unsent_prompt_at_the_exit_is_rejected_engine_down_not_delivery_unknown(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.exit(1, unsent=("p1",))  # not one byte of it reached the pipe
    assert w.word("p1") == ("rejected", "engine-down")
    w.agrees_with_replay()


def test_row11_the_controllers_stop_is_failed_interrupted_and_names_that_stop(world: Any) -> None:
    w = world()
    w.submit("p1", stream=True)
    w.lines(ack("p1"), *run_start(), delta("Hel"))
    assert w.text == ["Hel"]
    w.stop("p1")
    (abort,) = w.sent("abort")
    assert w.sent("clear_queue")  # the queue is cleared before the abort
    w.lines(*run_end("Hel", stop="aborted", error="Request was aborted", aborted=True), answer("abort", abort["id"]))
    assert w.word("p1") == ("failed", "interrupted")
    assert w.receipts["p1"].stop == abort["id"]
    w.agrees_with_replay()


def test_row11_a_timeout_is_the_bridges_stop_failed_timeout_not_the_controllers(world: Any) -> None:
    w = world()
    w.submit("p1", timeout=10.0)
    w.lines(ack("p1"), *run_start())
    w.advance(10.1)
    (abort,) = w.sent("abort")
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "timeout")
    assert w.receipts["p1"].stop == abort["id"]
    w.agrees_with_replay()


def test_row11_closing_stops_the_held_prompt_failed_closing(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.submit("p2")
    w.lines(ack("p1"), *run_start())
    w.feed(Close("signal", "SIGTERM"))
    assert w.word("p2") == ("rejected", "closing")
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "closing")
    assert w.stopped == [1]
    w.exit(0)
    assert w.closed
    w.agrees_with_replay()


def test_row12_a_stop_in_a_retry_backoff_is_failed_interrupted(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    failed = assistant("", "error", "529 overloaded")
    w.lines(
        line({"type": "message_start", "message": assistant("", "error")}),
        line({"type": "message_end", "message": failed}),
        line({"type": "turn_end", "message": failed, "toolResults": []}),
        line({"type": "agent_end", "messages": [failed], "willRetry": True}),
        line({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": "529"}),
    )
    assert any(t.get("event") == "retrying" for t in w.told)
    w.stop("p1")
    w.lines(
        line({"type": "auto_retry_end", "success": False, "attempt": 1, "finalError": "Retry cancelled"}),
        line({"type": "agent_settled", "aborted": True}),
    )
    assert w.word("p1") == ("failed", "interrupted")
    w.agrees_with_replay()


def test_row13_the_seeds_own_verdicts_failed_with_native_error_and_ack_without_start(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(*whole_run("p1", "", stop="error", error="401 invalid api key"))
    assert w.word("p1") == ("failed", None)
    assert w.receipts["p1"].native_error == "401 invalid api key"
    w.submit("p2")
    # Its run starts and settles but never shows the user message: the model never had it.
    w.lines(ack("p2"), *run_start()[:2], *run_end())
    assert w.word("p2") == ("delivery-unknown", "ack-without-start")
    w.submit("p3")
    w.lines(*whole_run("p3", "cut", stop="length"))
    assert w.word("p3") == ("finished", None)
    w.agrees_with_replay()


# --------------------------------------------------------------------------
# The stop: the first one sent while the prompt was held names it (SPEC §5)


def test_a_stop_right_after_send_answered_before_the_run_started_is_sent_again_and_stops_it(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.stop("p1")  # before any line of the engine's
    (first,) = w.sent("abort")
    # Pi acks, answers the abort at once (nothing runs yet), then starts the run.
    w.lines(ack("p1"), answer("abort", first["id"]))
    w.lines(run_start()[0])
    again = w.sent("abort")
    assert len(again) == 2, "the stop stays armed: it is sent again when the run starts"
    w.lines(*run_start()[1:], *run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "interrupted")
    assert w.receipts["p1"].stop == first["id"]  # the first stop sent names it
    w.agrees_with_replay()


def test_a_stop_right_after_send_in_one_read_with_the_run_is_sent_again(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.stop("p1")
    (first,) = w.sent("abort")
    w.lines(ack("p1"), answer("abort", first["id"]), *run_start())
    assert len(w.sent("abort")) == 2
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "interrupted")
    w.agrees_with_replay()


def test_a_stop_answered_after_the_run_started_is_not_sent_again(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.stop("p1")
    (first,) = w.sent("abort")
    w.lines(ack("p1"), *run_start())
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True), answer("abort", first["id"]))
    assert len(w.sent("abort")) == 1
    assert w.word("p1") == ("failed", "interrupted")
    w.agrees_with_replay()


def test_a_timeout_stop_then_the_controllers_stop_the_first_one_decides_and_names_it(world: Any) -> None:
    w = world()
    w.submit("p1", timeout=5.0)
    w.lines(ack("p1"), *run_start())
    w.advance(5.1)
    (timeout_stop,) = w.sent("abort")
    w.stop("p1")  # the controller's comes second: no second abort, the first one stands
    assert len(w.sent("abort")) == 1
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "timeout")
    assert w.receipts["p1"].stop == timeout_stop["id"]
    w.agrees_with_replay()


def test_a_stop_on_a_run_that_finished_anyway_is_finished_and_still_names_the_stop(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    w.stop("p1")
    (abort,) = w.sent("abort")
    w.lines(*run_end("done"), answer("abort", abort["id"]))  # the run had finished as the stop came
    assert w.word("p1") == ("finished", None)
    assert w.receipts["p1"].stop == abort["id"]
    w.agrees_with_replay()


def test_a_stop_sent_before_the_prompt_was_sent_is_never_its_stop(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(*whole_run("p1"))
    w.stop("p1")  # already settled: nothing is sent
    assert w.sent("abort") == []
    w.submit("p2")
    w.lines(*whole_run("p2"))
    assert w.receipts["p2"].stop is None
    w.agrees_with_replay()


# --------------------------------------------------------------------------
# Interleavings the process tests met


def test_prompts_wait_in_a_fifo_and_each_is_written_after_the_previous_receipt(world: Any) -> None:
    w = world()
    for n in range(1, 4):
        w.submit(f"p{n}")
    assert [c["id"] for c in w.sent("prompt")] == ["p1"]
    w.lines(*whole_run("p1"))
    assert [c["id"] for c in w.sent("prompt")] == ["p1", "p2"]
    # p2's whole run and p3's ack in one read: p3 is written mid-read, after p2's settle.
    w.lines(*whole_run("p2"), ack("p3"), *run_start(), *run_end())
    assert [w.word(f"p{n}") for n in range(1, 4)] == [("finished", None)] * 3
    w.agrees_with_replay()


def test_one_read_or_one_line_a_read_give_the_same_receipts(world: Any) -> None:
    script = [*whole_run("p1", "one"), *whole_run("p2", "two")]
    batch, single = world(), world()
    for w in (batch, single):
        w.submit("p1")
        w.submit("p2")
    batch.lines(*script)
    single.each(*script)
    for request in ("p1", "p2"):
        a, b = batch.receipts[request], single.receipts[request]
        assert (a.state, a.reason, a.ack_idx, a.working_idx, a.settle_idx, a.reply) == (
            b.state,
            b.reason,
            b.ack_idx,
            b.working_idx,
            b.settle_idx,
            b.reply,
        )


def test_closing_during_the_start_up_check_writes_no_prompt(world: Any) -> None:
    check = Launch(startup=({"type": "get_state", "id": "seal-state"},), check=lambda answers: [])
    w = world(launch=check)
    w.submit("p1")
    assert [c["type"] for c in w.written] == ["get_state"]
    w.feed(Close("signal", "SIGINT"))
    w.lines(line({"type": "response", "id": "seal-state", "command": "get_state", "success": True, "data": {}}))
    assert w.sent("prompt") == []
    assert w.word("p1") == ("rejected", "closing")


def test_a_start_up_check_that_refuses_takes_the_engine_down(world: Any) -> None:
    check = Launch(
        startup=({"type": "get_state", "id": "seal-state"},), check=lambda answers: ["the model is not scripted-1"]
    )
    w = world(launch=check)
    w.submit("p1")
    w.lines(line({"type": "response", "id": "seal-state", "command": "get_state", "success": True, "data": {}}))
    assert w.sent("prompt") == []
    assert w.stopped == [1]
    w.exit(0)
    assert w.word("p1") == ("rejected", "engine-down")
    assert "scripted-1" in (w.receipts["p1"].native_error or "")


def test_an_engine_dying_at_start_is_explained_from_its_stderr_and_counted_once(world: Any) -> None:
    check = Launch(startup=({"type": "get_state", "id": "seal-state"},), check=lambda answers: [])
    w = world(launch=check, crash_limit=1)
    w.submit("p1")
    w.stderr("Error: no model given")
    w.exit(1)
    assert w.word("p1") == ("rejected", "engine-down")
    assert "no model given" in (w.receipts["p1"].native_error or "")
    assert len(w.sup.lifecycle.state.crashes) == 1


def test_a_crash_between_prompts_restarts_the_engine_for_the_next(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(*whole_run("p1"))
    w.exit(1)
    w.submit("p2")
    w.advance(1.0)  # the restart's backoff
    assert w.sup.generation == 2 and [c["id"] for c in w.sent("prompt")] == ["p1", "p2"]
    w.lines(*whole_run("p2"))
    assert w.word("p2") == ("finished", None) and w.receipts["p2"].generation == 2
    w.agrees_with_replay()


def test_shutdown_drains_the_queue_then_stops_the_engine_and_closes(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.submit("p2")
    w.feed(Shutdown(None))
    w.submit("p3")
    assert w.word("p3") == ("rejected", "closing")
    w.lines(*whole_run("p1"))
    w.lines(*whole_run("p2"))
    assert w.stopped == [1]
    w.exit(0)
    assert w.closed and w.word("p2") == ("finished", None)
    w.agrees_with_replay()


def test_a_drain_bound_stops_the_running_prompt_failed_timeout(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.submit("p2")
    w.lines(ack("p1"), *run_start())
    w.feed(Shutdown(3.0))
    w.advance(3.1)
    assert w.word("p2") == ("rejected", "closing")
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "timeout")


def test_a_stall_stops_the_run_failed_stalled(world: Any) -> None:
    w = world(stall_timeout=30.0)
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    w.advance(20.0)
    w.lines(delta("x"))  # a line of its own: the stall counts from here
    w.advance(29.0)
    assert w.sent("abort") == []
    w.advance(1.5)
    assert len(w.sent("abort")) == 1
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "stalled")


def test_a_stall_before_the_ack_is_delivery_unknown_no_ack_as_the_table_says(world: Any) -> None:
    """Issue 42: with the stall timeout shorter than the ack timeout, a prompt never acked
    ended ``outcome-unknown``/``settle-timeout`` (the stall's stop went unanswered); a prompt
    with no ack is row 4's, whichever deadline passes first. Nothing is stopped (no run is
    known to be there): the engine is recycled, as at the ack deadline."""
    w = world(stall_timeout=2.0, ack_timeout=30.0)
    w.submit("p1")
    w.advance(1.9)
    assert "p1" not in w.receipts
    w.advance(0.2)
    assert w.word("p1") == ("delivery-unknown", "no-ack")
    assert w.sent("abort") == []
    assert w.stopped == [1]
    w.agrees_with_replay()


def test_a_journal_failure_loses_no_receipt_and_writes_nothing_more(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.submit("p2")
    w.lines(ack("p1"), *run_start())
    w.do(w.sup.journal_failed("the journal could not be written: No space left on device", w.now))
    assert any(t.get("signal") == "journal-failed" for t in w.told)
    assert w.word("p2") == ("rejected", "closing")
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "closing")
    assert [c["id"] for c in w.sent("prompt")] == ["p1"]


def test_late_lines_of_a_stopped_engine_are_ignored(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    w.exit(1)
    assert w.word("p1") == ("outcome-unknown", "engine-exited")
    before = w.sup.session.observations
    assert w.sup.lines(1, [line({"type": "agent_settled", "aborted": False})], w.now) == [] or True
    w.submit("p2")
    w.advance(1.0)
    assert w.sup.generation == 2
    assert w.sup.lines(1, [line({"type": "agent_start"})], w.now) == []  # engine 1's, read late
    assert w.sup.session.observations == before or w.sup.session.observations >= before


def test_the_supervision_is_deterministic(world: Any) -> None:
    script = [*whole_run("p1", "one")]

    def trace() -> list[str]:
        w = world()
        w.submit("p1")
        out = [repr(a) for a in w.sup.lines(w.sup.generation, script, 0.5)]
        return out

    assert trace() == trace()


def test_an_ack_with_no_disposition_is_not_started_and_taints(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1", None), *run_start(), *run_end())
    assert any(t.get("signal") == "disposition" for t in w.told)
    assert w.word("p1") == ("outcome-unknown", "disposition")
    w.agrees_with_replay()


def test_the_controllers_stop_then_its_timeout_stays_interrupted(world: Any) -> None:
    w = world()
    w.submit("p1", timeout=3.0)
    w.lines(ack("p1"), *run_start())
    w.stop("p1")
    w.advance(2.0)
    w.lines(delta("still"))
    w.advance(1.5)  # the timeout passes within the stop's grace: no second stop
    assert len(w.sent("abort")) == 1
    w.lines(*run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("failed", "interrupted")
    w.agrees_with_replay()


def test_row2_replay_takes_a_decision_the_live_bridge_took_on_time(world: Any) -> None:
    """A give-up (here the ack deadline) is decided by the lifecycle's clock, which a journal
    does not replay: replay takes it from the receipt recorded at the release, as the live
    bridge gave it."""
    w = world(ack_timeout=1.0)
    w.submit("p1")
    w.advance(1.1)
    assert w.word("p1") == ("delivery-unknown", "no-ack")
    replayed = w.replayed()["p1"]
    assert (replayed["state"], replayed["reason"]) == ("delivery-unknown", "no-ack")


def test_row7_a_taint_give_up_with_no_taint_kept_is_still_outcome_unknown(world: Any) -> None:
    """The lifecycle arms the taint grace only after a taint, so the supervision never asks
    this; the session still answers it (never a guess that the run finished)."""
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    (event,) = w.sup.session.give_up("p1", "taint", t=w.now)
    assert (event.receipt.state, event.receipt.reason) == ("outcome-unknown", "overlap")


# --------------------------------------------------------------------------
# Questions the table leaves open (docs: design/receipts.md#questions-the-table-leaves-open)


def raw(w: Run, cmd: dict[str, Any]) -> None:
    """``send_raw``: a command written by hand, outside the slot rules."""
    w.do(w.sup.sent_raw(cmd, w.now))


def test_q1_a_refusal_after_the_ack_is_no_rejection_the_run_decides(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.lines(ack("p1"), refusal("p1", "too late"))
    assert "p1" not in w.receipts  # the engine took it: "certainly not delivered" would be false
    w.lines(*run_start(), *run_end("done"))
    assert w.word("p1") == ("finished", None)
    w.agrees_with_replay()


def test_q2_a_refusal_of_a_displaced_prompt_settles_nothing_the_taint_does(world: Any) -> None:
    w = world(taint_grace=2.0)
    w.submit("p1")
    raw(w, {"type": "prompt", "id": "x2", "message": "again"})
    w.lines(refusal("p1", "Agent is busy"))  # p1 no longer holds the slot: its responses are not read
    assert "p1" not in w.receipts
    w.advance(2.1)
    assert w.word("p1") == ("outcome-unknown", "overlap")
    w.agrees_with_replay()


def test_q3_a_second_send_while_one_is_open_is_a_named_signal_told_journaled_and_replayed(world: Any) -> None:
    w = world(taint_grace=2.0)
    w.submit("p1")
    w.lines(ack("p1"), *run_start())
    raw(w, {"type": "prompt", "id": "x2", "message": "again"})
    (told,) = [t for t in w.told if t.get("signal") == "second-prompt"]
    assert (told["request"], told["held"]) == ("x2", "p1")
    unsealed = [t for t in w.told if t.get("signal") == "unsealed"]
    assert unsealed and unsealed[0]["cause"] == "overlap" and unsealed[0]["request"] == "p1"
    w.lines(*run_end("done"))
    assert w.word("p1") == ("outcome-unknown", "overlap")
    (kept,) = [s for s in w.receipts["p1"].signals if s.get("signal") == "second-prompt"]
    assert (kept["request"], kept["held"]) == ("x2", "p1")
    w.agrees_with_replay()
    assert list(w.replayed()["p1"]["signals"]) == list(w.receipts["p1"].to_json()["signals"])
    w.journal._writer.flush()
    journaled = [orjson.loads(x) for x in w.path.read_bytes().splitlines()]
    (noted,) = [
        e["signal"] for e in journaled if isinstance(e.get("signal"), dict) and e["signal"]["signal"] == "second-prompt"
    ]
    assert (noted["request"], noted["held"]) == ("x2", "p1")


def test_q4_the_stop_on_a_receipt_read_back_is_the_evidences_not_the_records() -> None:
    from bridge.core.session import Session

    s = Session()
    s.send({"type": "prompt", "id": "p1", "message": "hi"})
    s.observe(
        {"type": "response", "id": "p1", "command": "prompt", "success": True, "data": {"disposition": "started"}}
    )
    s.send({"type": "abort", "id": "s1"})
    recorded = {"request": "p1", "state": "outcome-unknown", "reason": "settle-timeout", "stop": "edited"}
    (event,) = s.release("p1", recorded=recorded)
    assert event.receipt.stop == "s1"  # the first stop the journal shows sent while it was held


def test_q5_a_never_written_prompt_names_no_stop(world: Any) -> None:
    w = world()
    w.submit("p1")
    w.stop("p1")  # written after the prompt; neither reached the engine
    assert w.sent("abort")
    w.exit(1, unsent=("p1",))
    assert w.word("p1") == ("rejected", "engine-down")
    assert w.receipts["p1"].stop is None
    w.agrees_with_replay()


def test_q6_an_abort_sent_before_the_prompt_is_never_its_interrupted(world: Any) -> None:
    w = world()
    w.submit("p0")
    w.lines(*whole_run("p0"))  # an engine running, idle: no slot held
    raw(w, {"type": "abort", "id": "a0"})  # by hand; the seed's stop link spans the next attach
    w.submit("p1")
    w.lines(ack("p1"), *run_start(), *run_end("", stop="aborted", error="Request was aborted", aborted=True))
    assert w.word("p1") == ("outcome-unknown", "aborted-without-stop")
    assert w.receipts["p1"].stop is None
    w.agrees_with_replay()


def test_q7_row6_for_a_prompt_never_acked_is_outcome_unknown_unless_the_ack_deadline_came_first(world: Any) -> None:
    w = world(taint_grace=2.0, ack_timeout=10.0)
    w.submit("p1")
    w.lines(b"not json")  # maybe the very ack
    w.advance(2.1)
    assert w.word("p1") == ("outcome-unknown", "gap")
    assert w.receipts["p1"].ack_idx is None
    w.agrees_with_replay()
    v = world(taint_grace=5.0, ack_timeout=1.0)
    v.submit("p1")
    v.lines(b"not json")
    v.advance(1.1)
    assert v.word("p1") == ("delivery-unknown", "no-ack")


def test_q8_aborted_other_than_true_is_no_evidence_of_our_stop(world: Any) -> None:
    for aborted, expected in (("true", ("failed", None)), (1, ("failed", None)), (True, ("failed", "interrupted"))):
        w = world()
        w.submit("p1")
        w.lines(ack("p1"), *run_start())
        w.stop("p1")
        failed = assistant("", "error", "529 overloaded")
        w.lines(
            line({"type": "message_end", "message": failed}),
            line({"type": "agent_end", "messages": [failed], "willRetry": False}),
            line({"type": "agent_settled", "aborted": aborted}),
        )
        assert w.word("p1") == expected, aborted
        w.agrees_with_replay()


# --------------------------------------------------------------------------
# The interface: what a door may give it, and what it may read (issue 43)


def test_feed_takes_a_controllers_request_and_nothing_the_world_does(world: Any) -> None:
    """``feed`` is the controller's door: an event of the world's (an engine that could not be
    launched, a stdout that closed, a write not made) has a door of its own, and ``feed`` refuses
    it before anything is stepped."""
    from bridge.core.lifecycle import NotWritten, SpawnFailed, StdoutClosed, Tick

    w = world()
    w.submit("p1")
    steps = w.sup.steps
    for event in (SpawnFailed(1, "no"), StdoutClosed(1), NotWritten(1, "p1"), Tick()):
        with pytest.raises(TypeError, match="controller's request"):
            w.sup.feed(event, w.now)  # type: ignore[arg-type]
    assert w.sup.steps == steps and "p1" not in w.receipts


def test_the_world_s_own_doors_decide_as_feed_did(world: Any) -> None:
    """``not_written``: a prompt recorded and then not written (the journal failed between the
    two) is taken back and written to the next engine; ``stdout_closed``: an engine that closed
    its stdout is stopped, and its exit decides its held prompt."""
    w = world()
    w.submit("p1")
    w.do(w.sup.not_written(w.sup.generation, "p1", w.now))
    view = w.sup.view()
    assert "p1" not in w.receipts and view.held is None and view.queued == ("p1",)
    w.exit(0)
    assert (w.sup.view().held, w.sup.view().generation) == ("p1", 2)
    w.lines(*whole_run("p1"))
    assert w.word("p1") == ("finished", None)
    c = world()
    c.submit("q1")
    c.lines(ack("q1"), *run_start())
    c.do(c.sup.stdout_closed(c.sup.generation, c.now))
    assert c.stopped == [1] and "q1" not in c.receipts
    c.exit(1)
    assert "q1" in c.receipts
    c.agrees_with_replay()


def test_the_view_is_a_frozen_record_that_changes_only_with_a_step(world: Any) -> None:
    """What the doors read: the same frozen object until the supervision steps again, showing
    the engine, the held and queued prompts, the receipts and closing."""
    w = world()
    empty = w.sup.view()
    assert (empty.held, empty.queued, empty.outstanding, empty.receipts, empty.closing) == (None, (), 0, 0, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        empty.held = "p9"  # type: ignore[misc]
    w.submit("p1")
    w.submit("p2")
    held = w.sup.view()
    assert held is w.sup.view(), "no step, no new view"
    assert (held.held, held.queued, held.outstanding, held.generation, held.engine_phase) == (
        "p1",
        ("p2",),
        2,
        1,
        "ready",
    )
    w.lines(*whole_run("p1"))
    after = w.sup.view()
    assert after is not held and after.receipts == 1 and after.held == "p2" and after.queued == ()
    assert w.sup.knows("p1") and w.sup.receipt("p1") == w.receipts["p1"] and w.sup.receipt("p2") is None
    w.feed(Close("close"))
    assert w.sup.view().closing == "close"
