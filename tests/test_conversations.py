"""Named conversations (issue 31): a conversation outlives its engine and its bridge. Through
the real pinned Pi and the scripted model server: what the model was sent is what the server
recorded (its request's ``messages``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import State, open_bridge
from bridge.core.conversation import FORMAT_VERSION, own_part
from bridge.core.receipts import Receipt
from bridge.core.words import Reason
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.api import _hide_journals
from bridge.live.supervisor import Bridge
from bridge.profiles.command import ProfileError
from bridge.profiles.conversation import (
    ENTRIES_ID,
    Conversation,
    EngineConversation,
    list_conversations,
    remove_conversation,
)
from bridge.profiles.pi import scripted_profile
from bridge.profiles.seal import STATE_ID
from tests.helpers_live import carried


@pytest.fixture
def conversations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "conversations"
    monkeypatch.setenv("PI_BRIDGE_CONVERSATION_DIR", str(root))
    return root


def models(tmp_path: Path, steps: list[dict[str, Any]]) -> tuple[str, Any]:
    server = start_server(steps)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    return str(path), server


async def ask(bridge: Any, text: str) -> Any:
    handle = await bridge.submit(text)
    return await handle.receipt()


async def test_a_conversation_outlives_a_killed_engine_and_its_bridge(
    pinned_pi: object, tmp_path: Path, conversations: Path
) -> None:
    """The second prompt after the engine was SIGKILLed, and the third from a new bridge on
    the same name, each send the model the first exchange; ``started`` says
    ``newConversation: false``; the journals name the conversation; the files are private."""
    path, server = models(tmp_path, [{"text": "first reply"}, {"text": "second reply"}, {"text": "third reply"}])
    profile = scripted_profile(path)
    try:
        async with open_bridge(profile, journal=tmp_path / "one.jsonl", conversation="work") as bridge:
            assert isinstance(bridge, Bridge)
            notes: list[dict[str, Any]] = []
            bridge.listeners.append(notes.append)
            assert (await ask(bridge, "hello one")).state is State.FINISHED
            engine = bridge.engine
            assert engine is not None and engine.pid is not None
            os.kill(engine.pid, signal.SIGKILL)
            with trio.fail_after(30):
                while bridge.engine is not None and bridge.engine.alive:
                    await trio.sleep(0.05)
            second = await ask(bridge, "hello two")
            assert second.state is State.FINISHED, second
            started = [n for n in notes if n.get("type") == "engine" and n.get("event") == "started"]
            assert [(n["generation"], n["newConversation"]) for n in started] == [(2, False)]
        async with open_bridge(profile, journal=tmp_path / "two.jsonl", conversation="work") as bridge:
            assert (await ask(bridge, "hello three")).state is State.FINISHED
    finally:
        server.close()
    requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    assert carried(requests[1]) == [("user", "hello one"), ("assistant", "first reply"), ("user", "hello two")]
    assert carried(requests[2]) == [
        ("user", "hello one"),
        ("assistant", "first reply"),
        ("user", "hello two"),
        ("assistant", "second reply"),
        ("user", "hello three"),
    ]
    folder = conversations / "work"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir()} == {
        "session.jsonl": "0o600",
        "conversation.json": "0o600",
        "lock": "0o600",
    }
    record = json.loads((folder / "conversation.json").read_text())
    assert record["prompts"] == 3 and record["version"] == FORMAT_VERSION
    _, cursor = own_part((folder / "session.jsonl").read_bytes().split(b"\n"), "work")
    assert record["cursor"] == cursor
    for journal in ("one.jsonl", "two.jsonl"):
        header = json.loads((tmp_path / journal).read_bytes().split(b"\n")[0])
        assert header["conversation"] == "work"


async def test_two_live_bridges_on_one_name_are_refused_and_bad_names_too(conversations: Path) -> None:
    """The lock: a second opening of a name that is open is refused (not interleaved); it is
    free again once closed. A name with ``/`` (or ``..``) is refused before anything is made."""
    first = Conversation.open("shared")
    try:
        with pytest.raises(ProfileError, match="open in another bridge"):
            Conversation.open("shared")
    finally:
        first.close()
    Conversation.open("shared").close()
    for bad in ("a/b", "..", "", ".hidden", "x" * 65):
        with pytest.raises(ProfileError, match="conversation's name"):
            Conversation.open(bad)
    assert sorted(p.name for p in conversations.iterdir()) == ["shared"]
    # Out of the confined engine's sight, as the journals are (the sandbox mounts it over when
    # it would be visible: outside the private /tmp and the hidden home).
    assert str(conversations) in _hide_journals(scripted_profile("models.json"), None).sandbox.hidden


HEADER = {"type": "session", "version": 3, "id": "s-1", "timestamp": "2026-12-02T00:00:00Z", "cwd": "/old"}


def entry(n: int, role: str, stop: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": f"m{n}"}]}
    if stop is not None:
        message["stopReason"] = stop
    return {"type": "message", "id": f"e{n}", "parentId": f"e{n - 1}" if n > 1 else None, "message": message}


def session_bytes(*objs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def recorded(root: Path, name: str, session: bytes, record: dict[str, Any]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "session.jsonl").write_bytes(session)
    (folder / "conversation.json").write_text(json.dumps({"name": name, "version": 1, **record}))
    return folder


def test_the_bridges_part_ends_at_the_last_assistant_message_that_ends_a_run() -> None:
    """Rule 2: what follows the run's end (a foreign run's user message) is cut; a ``toolUse``
    message does not end a run."""
    lines = session_bytes(
        HEADER, entry(1, "user"), entry(2, "assistant", "stop"), entry(3, "user"), entry(4, "assistant", "toolUse")
    ).split(b"\n")
    kept, cursor = own_part(lines, "c")
    assert cursor == "e2" and [json.loads(k).get("id") for k in kept] == [HEADER["id"], "e1", "e2"]
    assert own_part([json.dumps(HEADER).encode()], "c") == ([json.dumps(HEADER).encode()], None)


def test_a_conversation_from_a_newer_bridge_or_pi_is_refused_politely(conversations: Path) -> None:
    ok = session_bytes(HEADER, entry(1, "user"), entry(2, "assistant", "stop"))
    recorded(conversations, "newer-bridge", ok, {"version": FORMAT_VERSION + 1, "cursor": "e2"})
    with pytest.raises(ProfileError, match="written by a newer pi-bridge .* upgrade pi-bridge"):
        Conversation.open("newer-bridge")
    recorded(conversations, "newer-pi", session_bytes({**HEADER, "version": 4}), {})
    with pytest.raises(ProfileError, match="written by a newer Pi \\(session format 4"):
        Conversation.open("newer-pi")


def test_a_damaged_conversation_is_refused_with_one_line_and_can_be_removed(conversations: Path) -> None:
    ok = session_bytes(HEADER, entry(1, "user"), entry(2, "assistant", "stop"))
    recorded(conversations, "torn", ok + b'{"type":"mess', {"cursor": "e2"})
    recorded(conversations, "behind", ok, {"cursor": "e9"})
    recorded(conversations, "no-header", session_bytes(entry(1, "user")), {})
    (conversations / "garbled").mkdir()
    (conversations / "garbled" / "conversation.json").write_text("{nope")
    recorded(conversations, "good", ok, {"cursor": "e2", "prompts": 1})
    cases = {
        "torn": "line 4 of its session file is not a JSON object",
        "behind": "ends at entry 'e2', its record at 'e9'",
        "no-header": "has no Pi session header",
        "garbled": "its record is not JSON",
    }
    for name, words in cases.items():
        with pytest.raises(ProfileError, match=words) as refused:
            Conversation.open(name)
        assert "\n" not in str(refused.value) and f"conversation {name!r} is damaged" in str(refused.value)
    listed = list_conversations()
    assert [x.name for x in listed if not isinstance(x, str)] == ["good"]
    assert sorted(x.split("'")[1] for x in listed if isinstance(x, str)) == sorted(cases)
    remove_conversation("torn")  # a damaged one can be removed
    held = Conversation.open("good")
    try:
        with pytest.raises(ProfileError, match="open in another bridge"):
            remove_conversation("good")
    finally:
        held.close()
    remove_conversation("good")
    with pytest.raises(ProfileError, match="there is no conversation 'good'"):
        remove_conversation("good")
    assert sorted(p.name for p in conversations.iterdir()) == ["behind", "garbled", "no-header"]


def test_a_full_disk_while_recording_keeps_the_last_recorded_copy_whole(conversations: Path, tmp_path: Path) -> None:
    """The write that fails is a real ENOSPC (the temporary is ``/dev/full``): the journal note
    says so in one line, and what was recorded before is still there, whole, and resumable."""
    ok = session_bytes(HEADER, entry(1, "user"), entry(2, "assistant", "stop"))
    folder = recorded(conversations, "full", ok, {"cursor": "e2", "prompts": 1})
    conv = Conversation.open("full")
    try:
        engine = EngineConversation.place(conv, tmp_path / "config", str(tmp_path), "1.6.0")
        assert json.loads(engine.file.read_bytes().split(b"\n")[0])["cwd"] == str(tmp_path)
        with engine.file.open("ab") as f:
            f.write(session_bytes(entry(3, "user"), entry(4, "assistant", "stop")))
        (folder / "session.jsonl.tmp").symlink_to("/dev/full")
        work = engine.settled(Receipt("p2", State.FINISHED))
        assert work is not None
        note = work()
        assert note["event"] == "conversation-not-recorded", note
        assert "No space left on device" in note["why"] and "\n" not in note["why"]
        assert (folder / "session.jsonl").read_bytes() == ok and not (folder / "session.jsonl.tmp").exists()
        assert engine.settled(Receipt("p3", State.OUTCOME_UNKNOWN, Reason.OVERLAP)) is None  # rule 3: not taken
        work = engine.settled(Receipt("p4", State.FINISHED))  # the disk has room again
        assert work is not None
        note = work()
        assert (note["event"], note["cursor"]) == ("conversation-recorded", "e4")
    finally:
        conv.close()
    reopened = Conversation.open("full")
    reopened.close()
    assert reopened.record.cursor == "e4"


SLOW = {"words": 25, "delay": 0.025, "chunk": 8}


async def test_after_a_taint_the_next_engine_resumes_the_last_exchange_the_bridge_vouched_for(
    pinned_pi: object, tmp_path: Path, conversations: Path
) -> None:
    """Rule 3: a steer written past the bridge during the second prompt (O5/O6) taints it; the
    engine is recycled, and the third prompt's engine resumes the conversation as it was after
    the first prompt: neither the tainted exchange nor the foreign steer is carried forward."""
    steps = [{"text": "first reply"}, SLOW, {"text": "reply to the steer"}, {"text": "third reply"}]
    path, server = models(tmp_path, steps)
    journal = tmp_path / "j.jsonl"
    try:
        async with open_bridge(scripted_profile(path), journal=journal, conversation="tainted") as bridge:
            first = await ask(bridge, "hello one")
            assert first.state is State.FINISHED
            handle = await bridge.submit("hello two", stream=True)
            steered = False
            async for _ in handle.text():
                if not steered:
                    steered = True
                    await bridge.send_raw({"type": "steer", "message": "steered in by someone else"})
            second = await handle.receipt()
            assert (second.state, second.reason) == (State.OUTCOME_UNKNOWN, "overlap"), second
            third = await ask(bridge, "hello three")
            assert third.state is State.FINISHED and third.generation == 2, third
    finally:
        server.close()
    requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    assert ("user", "steered in by someone else") in carried(requests[2]), "the steer reached the model"
    assert carried(requests[-1]) == [("user", "hello one"), ("assistant", "first reply"), ("user", "hello three")]
    notes = [json.loads(line)["note"] for line in journal.read_bytes().splitlines() if b'"note"' in line[:8]]
    recorded_for = [n["request"] for n in notes if n.get("event") == "conversation-recorded"]
    assert recorded_for == [r.request for r in (first, third)], notes


async def test_a_foreign_run_right_after_a_vouched_one_is_not_carried_forward(
    pinned_pi: object, tmp_path: Path, conversations: Path
) -> None:
    """``autorun.ts`` sends a user message of its own as soon as the first prompt's run settles
    (O1), and its run goes on in the tainted engine: the next engine resumes without it. (The
    copy is taken as the first run's ``agent_settled`` is read, before the extension's message
    is written, as far as seen here; rule 2's cut, for when it is not, is tested on its own
    above.) It fails if the bridge took the engine's file at any later point."""
    autorun = str(Path(__file__).parents[1] / "tools" / "pi" / "extensions" / "autorun.ts")
    steps = [{"text": "first reply"}, {"text": "reply to the extension"}, {"text": "second reply"}]
    path, server = models(tmp_path, steps)
    profile = scripted_profile(path, unsealed_extensions=[autorun])
    try:
        async with open_bridge(profile, journal=tmp_path / "j.jsonl", conversation="autorun") as bridge:
            notes: list[dict[str, Any]] = []
            bridge.listeners.append(notes.append)
            assert (await ask(bridge, "hello one")).state is State.FINISHED
            with trio.fail_after(30):
                while not any(n.get("signal") == "O1" for n in notes):
                    await trio.sleep(0.05)
            second = await ask(bridge, "hello two")
            assert second.state is State.FINISHED and second.generation == 2, second
    finally:
        server.close()
    requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    # (The second engine's autorun may ask the model again after "hello two": the request for
    # "hello two" is the one that ends with it.)
    (second_request,) = [r for r in requests if carried(r)[-1] == ("user", "hello two")]
    assert carried(second_request) == [("user", "hello one"), ("assistant", "first reply"), ("user", "hello two")]


def test_bridge_run_continues_a_conversation_and_bridge_conversations_shows_and_removes_it(
    pinned_pi: object, tmp_path: Path, conversations: Path, bridge_argv: list[str]
) -> None:
    """Two ``bridge run --conversation talk`` processes: the second's prompt reaches the model
    with the first's exchange. ``bridge conversations`` lists it, ``show`` gives its history,
    ``rm`` removes it; a run on a name another bridge holds is refused in one line, exit 2."""
    journals = tmp_path / "journals"
    env = {**os.environ, "PI_BRIDGE_CONVERSATION_DIR": str(conversations), "PI_BRIDGE_JOURNAL_DIR": str(journals)}

    def bridge(*args: str, engine: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [*bridge_argv, *args, *(engine or [])]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

    with start_server([{"text": "first reply"}, {"text": "second reply"}, {"text": "third reply"}]) as server:
        models = server.write_models(str(tmp_path))
        pi = ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]
        for text in ("hello one", "hello two"):
            p = bridge("run", "--conversation", "talk", "--json", text, *pi)
            assert p.returncode == 0 and json.loads(p.stdout)["state"] == "finished", p.stderr
        # bridge serve --conversation: the third prompt, from a controller
        line = json.dumps({"type": "prompt", "id": "q3", "message": "hello three"}) + "\n"
        served = subprocess.run(
            [*bridge_argv, "serve", "--conversation", "talk", *pi],
            input=line,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    assert served.returncode == 0, served.stderr
    out = [json.loads(x) for x in served.stdout.splitlines()]
    assert [o["receipt"]["state"] for o in out if o["type"] == "receipt"] == ["finished"]
    assert [o["newConversation"] for o in out if o.get("event") == "started"] == [False]
    assert carried(requests[1]) == [("user", "hello one"), ("assistant", "first reply"), ("user", "hello two")]
    assert carried(requests[2])[:4] == carried(requests[1]) + [("assistant", "second reply")]
    listed = bridge("conversations", "--json", "list")
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["talk"], listed.stderr
    shown = json.loads(bridge("conversations", "--json", "show", "talk").stdout)
    assert shown["prompts"] == 3 and [h["text"] for h in shown["history"]] == [
        "hello one",
        "first reply",
        "hello two",
        "second reply",
        "hello three",
        "third reply",
    ]
    assert len(shown["journals"]) == 3 and {Path(j).parent for j in shown["journals"]} == {journals}
    told = bridge("diagnose", shown["journals"][0])
    assert "conversation talk (`bridge conversations show talk` lists its journals)" in told.stdout, told.stdout
    held = Conversation.open("talk", conversations)
    try:
        for p in (bridge("run", "--conversation", "talk", "x", *pi), bridge("conversations", "rm", "talk")):
            assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
            assert "conversation 'talk' is open in another bridge" in p.stderr
    finally:
        held.close()
    p = bridge("run", "--conversation", "talk", "x", "--no-journal", engine=["--", "/no/such/engine"])
    assert (p.returncode, p.stderr) == (
        2,
        "bridge run: a named conversation needs the Pi engine (its session file is Pi's), not another engine\n",
    )
    assert bridge("conversations", "rm", "talk").returncode == 0
    assert list(conversations.iterdir()) == []
    bad = bridge("run", "--conversation", "../x", "hi")
    assert bad.returncode == 2 and "no '/'" in bad.stderr, bad.stderr


async def test_a_new_conversation_asked_for_restarts_the_named_one_and_a_restart_keeps_that(
    pinned_pi: object, tmp_path: Path, conversations: Path
) -> None:
    """``new_conversation()`` under a name: Pi's ``new_session`` moves it to a new file (beside
    the one it was given); the bridge records that one, so after the engine is SIGKILLed the
    third prompt carries the second exchange and not the first."""
    path, server = models(tmp_path, [{"text": "first reply"}, {"text": "second reply"}, {"text": "third reply"}])
    try:
        async with open_bridge(scripted_profile(path), journal=False, conversation="fresh") as bridge:
            assert isinstance(bridge, Bridge)
            assert (await ask(bridge, "hello one")).state is State.FINISHED
            bridge.new_conversation()
            assert (await ask(bridge, "hello two")).state is State.FINISHED
            engine = bridge.engine
            assert engine is not None and engine.pid is not None
            os.kill(engine.pid, signal.SIGKILL)
            with trio.fail_after(30):
                while engine.alive:
                    await trio.sleep(0.05)
            third = await ask(bridge, "hello three")
            assert third.state is State.FINISHED and third.generation == 2, third
    finally:
        server.close()
    requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    assert carried(requests[1]) == [("user", "hello two")]
    assert carried(requests[2]) == [("user", "hello two"), ("assistant", "second reply"), ("user", "hello three")]
    record = json.loads((conversations / "fresh" / "conversation.json").read_text())
    assert record["title"] == "hello two"


def test_the_start_up_check_refuses_a_session_that_is_not_the_bridges_or_not_where_it_left_it(
    conversations: Path, tmp_path: Path
) -> None:
    """Rule 4 on the start-up answers: ``get_state``'s session file must be the bridge's copy,
    and ``get_entries`` since the recorded cursor must hold no message (Pi refusing the cursor
    means its session does not hold it)."""
    ok = session_bytes(HEADER, entry(1, "user"), entry(2, "assistant", "stop"))
    recorded(conversations, "checked", ok, {"cursor": "e2"})
    conv = Conversation.open("checked")
    try:
        engine = EngineConversation.place(conv, tmp_path / "config", str(tmp_path), "1.6.0")
        assert engine.startup == {"type": "get_entries", "id": ENTRIES_ID, "since": "e2"}
        state = {"id": STATE_ID, "success": True, "data": {"sessionFile": str(engine.file), "messageCount": 2}}

        def entries(*listed: dict[str, Any], success: bool = True) -> dict[str, Any]:
            return {"id": ENTRIES_ID, "success": success, "data": {"entries": list(listed)}}

        assert engine.problems({STATE_ID: state, ENTRIES_ID: entries()}) == []
        assert engine.problems({STATE_ID: state, ENTRIES_ID: entries({"type": "model_change", "id": "m"})}) == []
        moved = engine.problems({STATE_ID: state, ENTRIES_ID: entries(entry(3, "user"))})
        assert moved == ["Pi's session holds messages after the last one the bridge recorded for this conversation"]
        lost = engine.problems({STATE_ID: state, ENTRIES_ID: entries(success=False)})
        assert lost == ["Pi's session does not hold the entry the bridge last recorded for this conversation"]
        other = {**state, "data": {"sessionFile": "/elsewhere.jsonl"}}
        assert engine.problems({STATE_ID: other, ENTRIES_ID: entries()}) == [
            f"Pi resumed the session file '/elsewhere.jsonl', not the conversation's own {engine.file}"
        ]
    finally:
        conv.close()
    recorded(conversations, "stray", ok, {})  # a session file the record does not know
    with pytest.raises(ProfileError, match="damaged: its session file ends at entry 'e2', its record at None"):
        Conversation.open("stray")


def test_acp_lists_the_conversations_with_a_folder_and_loads_only_a_conversations_name() -> None:
    """ACP's rules (sans-IO, bridge.controller.acp.sessions): ``session/list`` shows those that
    recorded a working folder, filtered by ``cwd``; ``session/load`` takes a conversation's name
    and ``session/new``'s ``cwd`` and MCP rules; the replay is one chunk per message, in order."""
    from bridge.controller.acp import protocol as acp
    from bridge.controller.acp.sessions import list_result, new_name, parse_load, replay_updates
    from bridge.core.conversation import Record

    records = [Record("a", cwd="/w/one", title="hi", saved="t1"), Record("b"), Record("c", cwd="/w/two")]
    assert [s["sessionId"] for s in list_result(records, None)["sessions"]] == ["a", "c"]
    assert list_result(records, "/w/one/")["sessions"] == [
        {"sessionId": "a", "cwd": "/w/one", "title": "hi", "updatedAt": "t1"}
    ]
    for bad in ({"sessionId": "../x", "cwd": "/w"}, {"sessionId": "a", "cwd": "rel"}):
        with pytest.raises(acp.AcpError) as refused:
            parse_load(bad)
        assert refused.value.code == acp.INVALID_PARAMS
    with pytest.raises(acp.AcpError, match="MCP servers are refused"):
        parse_load({"sessionId": "a", "cwd": "/w", "mcpServers": [{"name": "files"}]})
    assert parse_load({"sessionId": "a", "cwd": "/w/x/.."}).cwd == "/w"
    assert replay_updates([("user", "q"), ("assistant", "r")]) == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "q"}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "r"}},
    ]
    assert new_name() != new_name()


def test_a_pool_s_take_up_holds_the_start_up_check_after_the_switch() -> None:
    """R12's check (bridge.core.conversation.take_up_problems), on Pi's answers: the copy placed,
    nothing after the cursor, nothing running, the model, modes and commands unchanged."""
    from bridge.core.conversation import take_up_problems

    model = {"provider": "scripted", "id": "scripted-model"}
    before = {"model": model, "thinkingLevel": "off", "steeringMode": "one-at-a-time"}
    after = {**before, "sessionFile": "/c/s.jsonl", "messageCount": 3, "pendingMessageCount": 0}
    ok = {"success": True, "data": {"cancelled": False}}
    clean = {"entries": [], "leafId": "x"}
    same = ([], [])
    assert take_up_problems(before, ok, after, clean, same, "/c/s.jsonl") == []
    cases = [
        ({"success": True, "data": {"cancelled": True}}, after, clean, same, "cancelled"),
        ({"success": False, "error": "nope"}, after, clean, same, "refused switch_session: nope"),
        (ok, {**after, "sessionFile": "/elsewhere"}, clean, same, "not the conversation's own"),
        (ok, after, {"entries": [{"type": "message"}]}, same, "messages after the last one"),
        (ok, after, None, same, "does not hold the entry"),
        (ok, {**after, "isStreaming": True}, clean, same, "running"),
        (ok, {**after, "model": {"provider": "other", "id": "m"}}, clean, same, "changed Pi's model"),
        (ok, {**after, "thinkingLevel": "high"}, clean, same, "changed Pi's thinkingLevel"),
        (ok, after, clean, ([], [{"name": "x"}]), "commands"),
    ]
    for switched, state, entries, commands, words in cases:
        problems = take_up_problems(before, switched, state, entries, commands, "/c/s.jsonl")
        assert any(words in p for p in problems), (words, problems)
