"""Extension dialogs to the controller (docs: guide/extension-dialogs.md; :mod:`bridge.core.dialogs`):
an allowlisted extension asks ``confirm`` before the model's ``bash`` call, against the real
pinned Pi and the scripted model server, read and answered exactly as a controller does it
(``bridge serve``'s stdin and stdout, or the API's ``Bridge.dialogs()``).

Each dialog must get exactly one ``extension_ui_response`` in the journal: the controller's,
or ``cancelled`` by its timeout, its prompt's stop, or nobody to ask. Never a yes nobody gave.

Every wait is bounded; every process is killed in a ``finally``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.dialogs import check_answer, ui_fields
from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.handles import DialogError
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import ROOT, ServeProc, read_journal

EXTENSION = ROOT / "tools" / "pi" / "extensions" / "confirm_bash.ts"


def bash_then_reply(command: str, reply: str) -> list[dict[str, Any]]:
    return [{"tool_call": {"name": "bash", "arguments": {"command": command}}}, {"text": reply}]


def responses(journal: Path) -> list[dict[str, Any]]:
    """The ``extension_ui_response`` lines the bridge wrote to the engine, in order."""
    return [
        e["send"]
        for e in read_journal(journal)
        if isinstance(e.get("send"), dict) and e["send"].get("type") == "extension_ui_response"
    ]


def requests(journal: Path, method: str = "confirm") -> list[dict[str, Any]]:
    return [
        e["recv"]
        for e in read_journal(journal)
        if isinstance(e.get("recv"), dict)
        and e["recv"].get("type") == "extension_ui_request"
        and e["recv"].get("method") == method
    ]


def tool_result(sp: ServeProc, request: str) -> dict[str, Any]:
    (end,) = [x for x in sp.lines if x["type"] == "event" and x["event"] == "tool-end" and x["id"] == request]
    return end


@pytest.mark.trio
async def test_a_confirm_dialog_answered_yes_no_unanswered_and_stopped(pinned_pi: Any, tmp_path: Path) -> None:
    """Four prompts through one ``bridge serve``, each asking the model to run ``bash``; the
    extension asks ``confirm`` first. Yes runs the command; no and the timeout block it (the
    run goes on and finishes); a stop while the dialog is open cancels the dialog before the
    abort and ends ``interrupted``. Exactly one response per dialog, each journaled."""
    server = start_server(
        bash_then_reply("echo yes-ran", "ran it")
        + bash_then_reply("echo no-ran", "blocked")
        + bash_then_reply("echo late-ran", "too late")
        + [{"tool_call": {"name": "bash", "arguments": {"command": "echo stopped-ran"}}}]
    )
    models = server.write_models(str(tmp_path / "models"))
    journal = tmp_path / "j.jsonl"
    argv = [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--models-json", models]
    argv += ["--provider", "scripted", "--model", "scripted-model", "--extension", str(EXTENSION)]
    argv += ["--dialog-timeout", "2"]
    stderr_path = tmp_path / "serve.stderr"
    with open(stderr_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(ROOT)
        )
    sp = ServeProc(proc, stderr_path)
    try:
        assert (await sp.next(timeout=30) or {}).get("type") == "ready", sp.stderr

        async def prompt(rid: str) -> dict[str, Any]:
            await sp.send({"type": "prompt", "id": rid, "message": "run it", "events": True})
            return await sp.until(lambda x: x["type"] == "ask", timeout=30)

        def ended(rid: str) -> dict[str, Any]:
            (end,) = [x for x in sp.lines if x["type"] == "dialog-end" and x["id"] == rid]
            return end

        async def receipt(rid: str) -> dict[str, Any]:
            line = await sp.until(lambda x: x["type"] == "receipt" and x["id"] == rid, timeout=30)
            return dict(line["receipt"])

        # 1. Yes: the command runs.
        ask = await prompt("yes")
        assert ask["method"] == "confirm" and ask["id"] == "yes"
        assert ask["title"] == "Run this command?" and ask["message"] == "echo yes-ran"
        assert ask["timeout"] == 2 and ask["dialog"].startswith("dialog-")
        await sp.send({"type": "answer", "dialog": ask["dialog"], "confirmed": True})
        r = await receipt("yes")
        assert (r["state"], r["reason"]) == ("finished", None), r
        assert ended("yes")["by"] == "controller" and ended("yes")["answer"] == {"confirmed": True}
        assert tool_result(sp, "yes")["isError"] is False and "yes-ran" in tool_result(sp, "yes")["result"]
        notes = [x for x in sp.lines if x["type"] == "ui" and x["id"] == "yes"]
        assert [(n["method"], n["message"], n["notifyType"]) for n in notes] == [
            ("notify", "approved: echo yes-ran", "info")
        ]
        # A second answer to the same dialog is refused: it has had its one.
        await sp.send({"type": "answer", "dialog": ask["dialog"], "confirmed": False})
        err = await sp.until(lambda x: x["type"] == "error")
        assert "not taken" in err["error"] and ask["dialog"] in err["error"]

        # 2. No: blocked, the run goes on.
        ask = await prompt("no")
        await sp.send({"type": "answer", "dialog": ask["dialog"], "value": "yes please"})  # does not fit
        err = await sp.until(lambda x: x["type"] == "error")
        assert "confirmed" in err["error"], err
        await sp.send({"type": "answer", "dialog": ask["dialog"], "confirmed": False})
        r = await receipt("no")
        assert (r["state"], r["reason"]) == ("finished", None), r
        assert ended("no")["by"] == "controller" and ended("no")["answer"] == {"confirmed": False}
        assert tool_result(sp, "no")["isError"] is True and "Blocked by the user" in tool_result(sp, "no")["result"]

        # 3. Unanswered: cancelled at the dialog timeout (2 s), never a yes; the prompt's
        # stall and ack deadlines wait meanwhile.
        ask = await prompt("late")
        r = await receipt("late")
        assert (r["state"], r["reason"]) == ("finished", None), r
        assert ended("late")["by"] == "timeout" and ended("late")["answer"] == {"cancelled": True}
        assert tool_result(sp, "late")["isError"] is True

        # 4. Stopped while the dialog is open.
        ask = await prompt("stopped")
        await sp.send({"type": "stop", "id": "stopped"})
        r = await receipt("stopped")
        assert (r["state"], r["reason"]) == ("failed", "interrupted"), r
        assert ended("stopped")["by"] == "stop" and ended("stopped")["answer"] == {"cancelled": True}

        await sp.close_stdin()
        await sp.read_all(timeout=30)
        assert await sp.wait() == 0, sp.stderr
    finally:
        await sp.kill()
        server.close()

    asked = requests(journal)
    answered = responses(journal)
    assert len(asked) == 4
    # Exactly one response per dialog, to its own id, in the order asked.
    assert [a["id"] for a in answered] == [q["id"] for q in asked]
    assert [{k: v for k, v in a.items() if k not in ("type", "id")} for a in answered] == [
        {"confirmed": True},
        {"confirmed": False},
        {"cancelled": True},
        {"cancelled": True},
    ]
    entries = read_journal(journal)
    assert entries[0]["dialogs"] is True and entries[0]["seal"]["extensions"] == [str(EXTENSION)]
    # The stop's cancel went before its abort.
    sends = [e["send"] for e in entries if "send" in e]
    i_cancel = sends.index(answered[3])
    assert [s["type"] for s in sends[i_cancel + 1 :] if s["type"] in ("abort", "clear_queue")][-1] == "abort"
    assert i_cancel < max(i for i, s in enumerate(sends) if s["type"] == "abort")
    ends = [e["note"] for e in entries if isinstance(e.get("note"), dict) and e["note"].get("event") == "dialog-end"]
    assert [n["by"] for n in ends] == ["controller", "controller", "timeout", "stop"]
    # Replay reaches the same receipts, with no seal diagnostic on them (the extension was allowed).
    replayed = replay(journal)
    assert [(r.state, r.reason) for r in replayed.receipts] == [
        ("finished", None),
        ("finished", None),
        ("finished", None),
        ("failed", "interrupted"),
    ]
    assert not any(s.get("signal") == "seal-diagnostic" for r in replayed.receipts for s in r.signals)
    # diagnose shows each dialog and who answered it.
    out = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    for by in ("answered by the controller: confirmed", "cancelled by its timeout", "cancelled by the prompt's stop"):
        assert by in out.stdout, out.stdout


@pytest.mark.trio
async def test_stdin_eof_cancels_an_open_dialog_at_once(pinned_pi: Any, tmp_path: Path) -> None:
    """After serve's stdin ends nobody can answer: an open dialog is cancelled at once
    (``no-controller``), not after its 120 s timeout, and the prompt runs to its receipt."""
    server = start_server(bash_then_reply("echo eof-ran", "blocked at eof"))
    models = server.write_models(str(tmp_path / "models"))
    journal = tmp_path / "eof.jsonl"
    argv = [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--models-json", models]
    argv += ["--provider", "scripted", "--model", "scripted-model", "--extension", str(EXTENSION)]
    with open(tmp_path / "eof.stderr", "wb") as err:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(ROOT)
        )
    sp = ServeProc(proc, tmp_path / "eof.stderr")
    try:
        assert (await sp.next(timeout=30) or {}).get("type") == "ready", sp.stderr
        await sp.send({"type": "prompt", "id": "p", "message": "run it"})
        ask = await sp.until(lambda x: x["type"] == "ask", timeout=30)
        await sp.close_stdin()
        end = await sp.until(lambda x: x["type"] == "dialog-end", timeout=10)
        assert (end["dialog"], end["by"], end["answer"]) == (ask["dialog"], "no-controller", {"cancelled": True})
        r = await sp.until(lambda x: x["type"] == "receipt", timeout=30)
        assert r["receipt"]["state"] == "finished", r
        await sp.read_all(timeout=30)
        assert await sp.wait() == 0, sp.stderr
    finally:
        await sp.kill()
        server.close()
    assert len(responses(journal)) == 1


@pytest.mark.trio
async def test_the_api_answers_dialogs_and_nobody_listening_is_a_cancel(pinned_pi: Any, tmp_path: Path) -> None:
    """``Bridge.dialogs()`` hands each dialog to the code that answers it; with no channel
    open, a dialog is answered ``cancelled`` at once (``no-controller``), never yes."""
    server = start_server(bash_then_reply("echo api-ran", "ran") + bash_then_reply("echo nobody-ran", "blocked"))
    try:
        models = server.write_models(str(tmp_path / "models"))
        profile = scripted_profile(models, extensions=[str(EXTENSION)])
        journal = tmp_path / "api.jsonl"
        async with open_bridge(profile, journal=journal, config=BridgeConfig(dialog_timeout=20)) as bridge:
            dialogs = bridge.dialogs()

            async def answer_first() -> Any:
                dialog = await dialogs.receive()
                with pytest.raises(DialogError, match="answered with confirmed: true or false"):
                    await dialog.answer("maybe")  # a confirm takes confirmed=, not a value
                await dialog.answer(confirmed=True)
                assert await dialog.wait_ended() == "controller"
                return dialog

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    handle = await bridge.submit("run it", request="api")
                    nursery.start_soon(answer_first)
                    r = await handle.receipt()
            assert (r.state, r.reason) == ("finished", None)
            await dialogs.aclose()
            with trio.fail_after(60):
                r = await bridge.prompt("run it", request="nobody")
            assert (r.state, r.reason) == ("finished", None)
        ends = [
            e["note"]
            for e in read_journal(journal)
            if isinstance(e.get("note"), dict) and e["note"].get("event") == "dialog-end"
        ]
        assert [(n["by"], n["answer"]) for n in ends] == [
            ("controller", {"confirmed": True}),
            ("no-controller", {"cancelled": True}),
        ]
        assert [{k: v for k, v in a.items() if k != "id"} for a in responses(journal)] == [
            {"type": "extension_ui_response", "confirmed": True},
            {"type": "extension_ui_response", "cancelled": True},
        ]
    finally:
        server.close()


def test_an_answer_must_fit_its_dialog() -> None:
    options = {"options": ["red", "green"]}
    assert check_answer("select", options, value="green") == ({"value": "green"}, None)
    assert (
        check_answer("select", options, value="blue")[1] == "'blue' is not one of the dialog's options ('red', 'green')"
    )
    assert check_answer("confirm", {}, confirmed=False) == ({"confirmed": False}, None)
    assert check_answer("confirm", {}, confirmed="yes")[0] is None
    assert check_answer("confirm", {}, value="yes")[0] is None
    assert check_answer("input", {}, value="text") == ({"value": "text"}, None)
    assert check_answer("editor", {}, value=3)[0] is None
    assert check_answer("input", {}, cancelled=True) == ({"cancelled": True}, None)
    assert check_answer("input", {}, value="x", cancelled=True)[0] is None  # two answers
    assert check_answer("input", {})[0] is None  # none
    assert check_answer("confirm", {}, cancelled="true")[0] is None


def test_only_a_methods_own_fields_pass_bounded() -> None:
    long = ["A" * 4100 + f"-{n}" for n in range(250)]
    fields = ui_fields(
        "select",
        {"id": "x", "method": "select", "title": "t" * 5000, "options": ["a", 3, *long], "timeout": 1500, "evil": 1},
    )
    # Options pass whole (an answer must be one of them exactly): none cut, none left out.
    assert fields["options"] == ["a", *long] and fields["timeout"] == 1500 and "evil" not in fields
    assert check_answer("select", fields, value=long[240]) == ({"value": long[240]}, None)
    assert len(fields["title"]) == 4001 and fields["title"].endswith("…")
    assert ui_fields("notify", {"message": "m", "notifyType": "warning", "timeout": 5}) == {
        "message": "m",
        "notifyType": "warning",
    }


@pytest.mark.trio
async def test_a_dialog_before_the_ack_holds_the_ack_deadline(pinned_pi: Any, tmp_path: Path) -> None:
    """select_dialog.ts asks ``select`` in ``before_agent_start``: Pi's ack of the prompt waits
    for the answer. With a 2 s ack timeout and an answer given after 3.5 s, the prompt still
    finishes (the ack deadline waits while its dialog is open) and the extension got the
    option chosen; an option the dialog does not offer is refused."""
    server = start_server([{"text": "after the pick"}])
    try:
        models = server.write_models(str(tmp_path / "models"))
        ext = str(ROOT / "tools" / "pi" / "extensions" / "select_dialog.ts")
        profile = scripted_profile(models, extensions=[ext])
        journal = tmp_path / "sel.jsonl"
        config = BridgeConfig(ack_timeout=2.0, dialog_timeout=30)
        async with open_bridge(profile, journal=journal, config=config) as bridge:
            dialogs = bridge.dialogs()
            notes = bridge.signals()
            with trio.fail_after(60):
                handle = await bridge.submit("hello", request="sel")
                dialog = await dialogs.receive()
                assert (dialog.method, dialog.request, dialog.fields["options"]) == ("select", "sel", ["red", "green"])
                with pytest.raises(DialogError, match="not one of the dialog's options"):
                    await dialog.answer("blue")
                await trio.sleep(3.5)  # longer than the ack timeout
                await dialog.answer("green")
                r = await handle.receipt()
        assert (r.state, r.reason, r.reply) == ("finished", None, "after the pick"), r
        ui = [n async for n in notes if n.get("type") == "ui"]
        assert [(n["method"], n["message"]) for n in ui] == [("notify", "picked green")]
    finally:
        server.close()
    assert [{k: v for k, v in a.items() if k != "id"} for a in responses(journal)] == [
        {"type": "extension_ui_response", "value": "green"}
    ]
