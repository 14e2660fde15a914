"""SPEC §4 and the seed tracker: one test per rule, then properties.

Stories are written as the driver sees them: ``("send", cmd)``, ``("recv", obj)``,
``("raw", text)`` and ``("release", request)``.
"""

from __future__ import annotations

from typing import Any

import cattrs
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.framing import RawLine
from bridge.core.session import Session
from bridge.core.tracker import LAST_ERROR_MAX, Overlap, Settled, Tracker, Working, js_slice

P1 = {"type": "prompt", "id": "p1", "message": "hi"}
ACK1 = {"type": "response", "id": "p1", "command": "prompt", "success": True, "data": {"disposition": "started"}}
START = {"type": "agent_start"}
USER = {"type": "message_start", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}
END = {"type": "agent_end", "willRetry": False}
SETTLE = {"type": "agent_settled", "aborted": False}


def assistant(stop: Any = "stop", error: str | None = None, text: str = "hello") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}
    if error is not None:
        message["errorMessage"] = error
    return {"type": "message_end", "message": message}


def run(*steps: tuple[str, Any], clearing: tuple[str, ...] = ()) -> Session:
    s = Session(clearing, collect=True)
    for kind, value in steps:
        if kind == "send":
            s.send(value)
        elif kind == "recv":
            s.observe(value)
        elif kind == "raw":
            s.observe(RawLine("malformed", value, len(value)))
        elif kind == "release":
            s.release(value)
        else:
            raise AssertionError(kind)
    return s


def prompt_story(*middle: tuple[str, Any]) -> list[tuple[str, Any]]:
    return [("send", P1), ("recv", ACK1), ("recv", START), ("recv", USER), *middle]


def signals(s: Session) -> list[tuple[str, Any]]:
    return [(o.signal, o.detail.get("why") or o.detail.get("cause")) for o in s.overlaps]


def outcome(s: Session) -> list[tuple[str, str | None]]:
    return [(x.state, x.reason) for x in s.settled]


# -- observation index --------------------------------------------------------


def test_every_line_gets_the_next_index_responses_and_raw_alike():
    s = run(("recv", {"type": "response", "id": "x"}), ("raw", "junk"), ("recv", START))
    assert s.tracker.idx == 3 and s.observations == 3
    assert s.overlaps[0].idx == 3


def test_sends_and_releases_take_no_index():
    s = run(("send", P1), ("release", "p1"), ("send", P1))
    assert s.tracker.idx == 0


# -- settlement: classify ---------------------------------------------------------


def test_finished_after_stop_length_or_tool_use():
    for stop in ("stop", "length", "toolUse"):
        s = run(*prompt_story(("recv", assistant(stop)), ("recv", END), ("recv", SETTLE)))
        assert outcome(s) == [("finished", None)], stop
        assert s.settled[0].idx == 6 and s.working == [Working("p1", 3)]


def test_failed_carries_the_engines_error():
    s = run(*prompt_story(("recv", assistant("error", "529 overloaded")), ("recv", END), ("recv", SETTLE)))
    assert s.settled == [Settled("p1", 6, "failed", None, None, "529 overloaded")]


def test_last_error_keeps_at_most_2000_characters():
    s = run(*prompt_story(("recv", assistant("error", "x" * 5000)), ("recv", END), ("recv", SETTLE)))
    assert s.settled[0].native_error == "x" * LAST_ERROR_MAX


def test_last_error_cap_counts_utf16_units_like_javascript():
    assert js_slice("a" * 1999 + "\U0001f600", 2000) == "a" * 1999 + "\ud83d"
    assert js_slice("\U0001f600" * 3, 4) == "\U0001f600" * 2
    assert js_slice("short", 2000) == "short"


def test_aborted_with_our_stop_is_failed_interrupted():
    s = run(
        ("send", P1),
        ("recv", ACK1),
        ("recv", START),
        ("recv", USER),
        ("send", {"type": "abort", "id": "s1"}),
        ("recv", assistant("aborted")),
        ("recv", END),
        ("recv", {"type": "agent_settled", "aborted": True}),
    )
    assert s.settled == [Settled("p1", 6, "failed", "interrupted", "s1", None)]
    assert s.overlaps == []


def test_aborted_without_stop_is_an_overlap_and_nothing_settles():
    s = run(*prompt_story(("recv", assistant("aborted")), ("recv", END), ("recv", SETTLE)))
    assert s.overlaps == [Overlap("aborted-without-stop", 4, "p1", {"run": "run-1"})]
    assert s.settled == []


def test_stop_link_clears_at_release():
    s = run(
        ("send", {"type": "abort", "id": "s0"}),
        ("release", "none"),
        *prompt_story(("recv", assistant("aborted")), ("recv", END), ("recv", SETTLE)),
    )
    assert signals(s) == [("aborted-without-stop", None)]


def test_no_final_assistant_message_is_outcome_unknown():
    s = run(*prompt_story(("recv", END), ("recv", SETTLE)))
    assert outcome(s) == [("outcome-unknown", "no-final-assistant-message")]


def test_unrecognised_stop_reason_is_outcome_unknown():
    s = run(*prompt_story(("recv", assistant("deferred")), ("recv", END), ("recv", SETTLE)))
    assert outcome(s) == [("outcome-unknown", "unrecognised-stop-reason")]


def test_non_string_stop_reason_reads_as_no_stop_reason():
    s = run(*prompt_story(("recv", assistant(7)), ("recv", END), ("recv", SETTLE)))
    assert outcome(s) == [("outcome-unknown", "no-final-assistant-message")]


def test_run_without_user_message_is_ack_without_start():
    s = run(("send", P1), ("recv", ACK1), ("recv", START), ("recv", assistant()), ("recv", END), ("recv", SETTLE))
    assert outcome(s) == [("delivery-unknown", "ack-without-start")]
    assert s.working == []


def test_failure_message_with_no_run_then_settle_is_ack_without_start():
    s = run(("send", P1), ("recv", ACK1), ("recv", assistant("error", "boom")), ("recv", SETTLE))
    assert outcome(s) == [("delivery-unknown", "ack-without-start")]


def test_retried_run_is_one_run_and_settles_on_its_last_attempt():
    s = run(
        *prompt_story(("recv", assistant("error", "500")), ("recv", {"type": "agent_end", "willRetry": True})),
        ("recv", START),
        ("recv", assistant("stop")),
        ("recv", END),
        ("recv", SETTLE),
    )
    assert outcome(s) == [("finished", None)]
    assert list(s.tracker.runs) == ["run-1"]


# -- overlaps ----------------------------------------------------------------------


def test_o1_when_run_starts_with_no_slot_held():
    s = run(("recv", START))
    assert s.overlaps == [Overlap("O1", 1, None, {"run": "run-1", "why": "no slot held"})]


def test_o1_when_run_starts_before_ack():
    s = run(("send", P1), ("recv", START))
    assert signals(s) == [("O1", "before the slot's ack")]


def test_o1_when_run_starts_after_the_slots_run():
    s = run(*prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)), ("recv", START))
    assert signals(s) == [("O1", "after the slot's run")]
    assert s.overlaps[0].detail["run"] == "run-2"


def test_o1_request_names_the_last_slot_after_release():
    s = run(*prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)), ("release", "p1"), ("recv", START))
    assert s.overlaps[0].request == "p1" and s.overlaps[0].detail["why"] == "no slot held"


def test_o2_settle_with_no_slot_held():
    s = run(("recv", SETTLE))
    assert s.overlaps == [Overlap("O2", 1, None, {"why": "no slot held"})]


def test_o2_settle_before_ack():
    s = run(("send", P1), ("recv", SETTLE))
    assert signals(s) == [("O2", "before the slot's ack")]


def test_o2_second_settle_for_one_ack():
    s = run(*prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)), ("recv", SETTLE))
    assert signals(s) == [("O2", "a second settle for one ack")]
    assert outcome(s) == [("finished", None)]


def test_o2_settle_of_a_run_that_is_not_the_slots():
    s = run(("recv", START), ("send", P1), ("recv", END), ("recv", SETTLE))
    assert signals(s) == [("O1", "no slot held"), ("O2", "settle of a run that is not the slot's")]
    assert s.overlaps[1].detail == {"run": "run-1", "why": "settle of a run that is not the slot's"}


def test_o2_the_slots_run_settled_after_the_slot_moved_on():
    s = run(
        *prompt_story(),
        ("release", "p1"),
        ("send", {**P1, "id": "p2"}),
        ("recv", {**ACK1, "id": "p2"}),
        ("recv", END),
        ("recv", SETTLE),
    )
    assert signals(s) == [("O2", "the slot's run settled after the slot moved on")]


def test_o3_settle_while_a_start_is_open():
    s = run(*prompt_story(("recv", SETTLE)))
    assert s.overlaps == [Overlap("O3", 4, "p1", {"run": "run-1"})]
    assert s.tracker.current == "run-1"


def test_o4_settle_after_ack_with_no_start_and_no_failure():
    s = run(("send", P1), ("recv", ACK1), ("recv", SETTLE))
    assert s.overlaps == [
        Overlap("O4", 2, "p1", {"why": "settle after the ack with no agent_start and no failure message"})
    ]


def test_o5_queue_update_with_items():
    s = run(("recv", {"type": "queue_update", "steering": ["a"], "followUp": ["b", "c"]}))
    assert s.overlaps == [Overlap("O5", 1, None, {"cause": "queue-update", "items": 3})]


def test_o5_uncaused_empty_queue_update():
    s = run(("recv", {"type": "queue_update", "steering": [], "followUp": []}))
    assert s.overlaps == [Overlap("O5", 1, None, {"cause": "uncaused-queue-update", "items": 0})]


def test_empty_queue_update_inside_our_clear_window_is_caused():
    cq = {"type": "clear_queue", "id": "c1"}
    empty = {"type": "queue_update", "steering": [], "followUp": []}
    resp = {"type": "response", "id": "c1", "command": "clear_queue", "success": True}
    s = run(("send", cq), ("recv", empty), ("recv", resp), clearing=("clear_queue",))
    assert s.overlaps == [] and s.tracker.clear_window == 0
    s = run(("send", cq), ("recv", resp), ("recv", empty), clearing=("clear_queue",))
    assert signals(s) == [("O5", "uncaused-queue-update")]


def test_a_clear_command_outside_the_profiles_list_opens_no_window():
    s = run(
        ("send", {"type": "clear_queue", "id": "c1"}),
        ("recv", {"type": "queue_update", "steering": [], "followUp": []}),
    )
    assert signals(s) == [("O5", "uncaused-queue-update")]


def test_o6_second_user_message_in_one_run():
    s = run(*prompt_story(("recv", USER)))
    assert s.overlaps == [Overlap("O6", 4, "p1", {"run": "run-1"})]


def test_nothing_settles_after_an_overlap():
    s = run(
        ("recv", {"type": "queue_update", "steering": ["x"], "followUp": []}),
        *prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)),
    )
    assert s.settled == [] and s.working == []


def test_nothing_settles_after_a_gap():
    s = run(("raw", "{oops"), *prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)))
    assert s.tracker.gap == 1 and s.settled == [] and s.working == []


def test_the_gap_stays_at_its_first_index():
    s = run(("raw", "a"), ("recv", START), ("raw", "b"))
    assert s.tracker.gap == 1


def test_started_after_settled_after_and_slot_run():
    s = run(*prompt_story(("recv", assistant()), ("recv", END), ("recv", SETTLE)))
    t = s.tracker
    assert [r.id for r in t.started_after(1)] == ["run-1"] and t.started_after(2) == []
    assert t.settled_after(5) and not t.settled_after(6)
    assert t.slot_run() is t.runs["run-1"] and t.settle_idx("run-1") == 6


# -- properties ----------------------------------------------------------------------

EVENTS = [
    START,
    END,
    {"type": "agent_end", "willRetry": True},
    USER,
    SETTLE,
    {"type": "agent_settled", "aborted": True},
    assistant("stop"),
    assistant("error", "e"),
    assistant("aborted"),
    assistant("length"),
    assistant(None),
    assistant("weird"),
    {"type": "queue_update", "steering": [], "followUp": []},
    {"type": "queue_update", "steering": ["s"], "followUp": []},
    {"type": "message_start", "message": {"role": "assistant"}},
    {"type": "turn_end"},
    {"type": "message_start", "message": "not a dict"},
    {"type": "message_end", "message": None},
    {"type": 5},
    {},
]
ACTIONS = st.one_of(
    st.sampled_from(EVENTS).map(lambda e: ("recv", e)),
    st.sampled_from(["p1", "p2"]).map(lambda r: ("send", {"type": "prompt", "id": r})),
    st.sampled_from(["p1", "p2"]).map(
        lambda r: (
            "recv",
            {"type": "response", "id": r, "command": "prompt", "success": True, "data": {"disposition": "started"}},
        )
    ),
    st.sampled_from(["s1", None]).map(lambda s: ("send", {"type": "abort", "id": s})),
    st.just(("send", {"type": "clear_queue", "id": "c1"})),
    st.just(("recv", {"type": "response", "id": "c1", "command": "clear_queue", "success": True})),
    st.sampled_from(["p1", "p2"]).map(lambda r: ("release", r)),
    st.just(("raw", "junk")),
)


@given(st.lists(ACTIONS, max_size=60))
@settings(max_examples=500)
def test_tracker_never_raises_and_settles_each_slot_at_most_once(steps):
    s = Session(("clear_queue",), collect=True)
    attaches = 0
    for kind, value in steps:
        if kind == "send":
            if value["type"] == "prompt":
                attaches += 1
            s.send(value)
        elif kind == "recv":
            s.observe(value)
        elif kind == "raw":
            s.observe(RawLine("malformed", value, 4))
        else:
            s.release(value)
    assert len(s.settled) <= attaches
    # no settlement once any overlap or gap was seen
    first_taint = min([o.idx for o in s.overlaps] + ([s.tracker.gap] if s.tracker.gap else []), default=None)
    if first_taint is not None:
        assert all(x.idx < first_taint for x in s.settled)
        assert all(w.idx < first_taint for w in s.working)


checkpoint_converter = cattrs.Converter()


@given(st.lists(ACTIONS, max_size=60), st.integers(min_value=0, max_value=60))
@settings(max_examples=300)
def test_checkpoint_and_restore_mid_stream_changes_nothing(steps, cut):
    def feed(tracker: Tracker, kind: str, value: Any, out: list[Any]) -> None:
        if kind == "recv":
            idx = tracker.read()
            if value.get("type") == "response":
                return
            out.extend(tracker.event(value, idx))
        elif kind == "raw":
            tracker.mark_gap(tracker.read())
        elif kind == "send" and value["type"] == "prompt":
            tracker.attach(value["id"])
        elif kind == "send" and value["type"] == "abort":
            tracker.link_stop(value["id"])
        elif kind == "release":
            tracker.release()

    straight: list[Any] = []
    t1 = Tracker()
    for kind, value in steps:
        feed(t1, kind, value, straight)

    resumed: list[Any] = []
    t2 = Tracker()
    for n, (kind, value) in enumerate(steps):
        if n == cut:
            blob = checkpoint_converter.unstructure(t2)
            t2 = checkpoint_converter.structure(blob, Tracker)
        feed(t2, kind, value, resumed)
    assert resumed == straight
    assert checkpoint_converter.unstructure(t1) == checkpoint_converter.unstructure(t2)


@given(st.lists(ACTIONS, max_size=40))
@settings(max_examples=200)
def test_same_inputs_same_outputs(steps):
    def go() -> Any:
        s = Session(("clear_queue",), collect=True)
        for kind, value in steps:
            if kind == "send":
                s.send(value)
            elif kind == "recv":
                s.observe(value)
            elif kind == "raw":
                s.observe(RawLine("malformed", value, 4))
            else:
                s.release(value)
        return s.overlaps, s.working, s.settled, s.receipts

    assert go() == go()


def test_readers_get_a_runs_facts_as_a_copy_and_the_last_loose_settle_before_an_index():
    t = Tracker()
    t.attach("p1")
    t.acked(t.read())
    t.event(START, t.read())
    t.event(END, t.read())
    t.event(SETTLE, t.read())
    facts = t.run_facts("run-1")
    assert facts is not None
    assert (facts.id, facts.start_idx, facts.settle_idx, facts.open_starts) == ("run-1", 2, 4, 0)
    assert t.run_facts(None) is None and t.run_facts("run-9") is None
    t.event(SETTLE, t.read())
    t.event(SETTLE, t.read())
    assert t.loose_settles == [5, 6]
    assert t.loose_settle_before(6) == 5 and t.loose_settle_before(5) is None
