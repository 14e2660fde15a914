"""The command line tells the truth: usage errors are named and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bridge import BridgeConfig, __version__
from tests.conftest import ROOT


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=60)


def _bridge_sh(tail: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``bridge TAIL`` through a shell (TAIL may redirect or close its streams)."""
    return subprocess.run(
        f"{sys.executable} -m bridge {tail}",
        shell=True,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_help_lists_every_command_and_version_prints():
    p = bridge("--help")
    assert p.returncode == 0
    for command in ("replay", "conform", "serve", "acp", "run", "models", "diagnose", "demo"):
        assert command in p.stdout
    assert bridge("--version").stdout.strip() == f"pi-bridge {__version__}"


@pytest.mark.parametrize(
    "args, says",
    [
        (["serve", "--queue-max", "0"], "--queue-max: must be more than 0"),
        (["run", "x", "--ack-timeout", "abc"], "--ack-timeout: 'abc' is not a number"),
        (["run", "x", "--timeout", "-1"], "--timeout: must be more than 0"),
        (["serve", "--seal-check", "maybe"], "invalid choice: 'maybe'"),
        (["replay", "x.jsonl", "--", "engine"], "takes no engine after --"),
        (["run"], "give at least one PROMPT"),
        (["run", "x", "--journal", ""], "--journal: an empty path"),
        (["serve", "--journal", "j.jsonl", "--no-journal"], "--no-journal: not allowed with argument --journal"),
        (["demo", "--journal", ""], "--journal: an empty path"),
        (["demo", "--journal", "out/"], "--journal: out/ names a folder (give a file's path in it)"),
        (["serve", "--journal", "/tmp/x/"], "--journal: /tmp/x/ names a folder"),
        (["run", "x", "--timeout", "inf"], "--timeout: must be a finite number of seconds, got inf"),
        # 2.5 is a number: what --queue-max wants is a whole one (it said "'2.5' is not a number")
        (["run", "x", "--queue-max", "2.5"], "--queue-max: '2.5' is not a whole number"),
        (["serve", "--queue-max", "1e3"], "--queue-max: '1e3' is not a whole number"),
    ],
)
def test_bad_usage_is_named_and_exits_2(args, says):
    p = bridge(*args)
    assert p.returncode == 2 and says in p.stderr, p.stderr


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["serve", "--thinking", "bogus"],
            "bridge serve: --thinking: invalid choice: 'bogus' (choose from 'off', 'minimal', 'low', 'medium', "
            "'high', 'xhigh', 'max') (see bridge serve --help)",
        ),
        (
            ["serve", "--queue-max", "0"],
            "bridge serve: --queue-max: must be more than 0, got 0 (see bridge serve --help)",
        ),
        (["serve", "--bogus-flag"], "bridge serve: unrecognized arguments: --bogus-flag (see bridge serve --help)"),
        (["replay"], "bridge replay: the following arguments are required: FILE (see bridge replay --help)"),
        (["diagnose"], "bridge diagnose: the following arguments are required: FILE (see bridge diagnose --help)"),
        (["demo", "--bogus"], "bridge demo: unrecognized arguments: --bogus (see bridge demo --help)"),
        (["conform", "x", "--", "e"], "bridge conform: it takes no engine after -- (see bridge conform --help)"),
        (
            ["run", "hi", "--"],
            "bridge run: no engine command after -- (give the engine's argv, e.g. -- python tools/fake_engine.py)",
        ),
        (
            [],
            "bridge: no command given; one of: replay, conform, serve, acp, run, models, diagnose, "
            "conversations, receipts, demo (see bridge --help)",
        ),
        (
            ["frob"],
            "bridge: COMMAND: invalid choice: 'frob' (choose from 'replay', 'conform', 'serve', 'acp', 'run', "
            "'models', 'diagnose', 'conversations', 'receipts', 'demo') (see bridge --help)",
        ),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_exits_2(args: list[str], line: str) -> None:
    """docs: guide/exit-codes.md: one line on stderr naming the mistake and the fix -- argparse's own
    error was two (its usage line, then ``bridge serve: error: …``); nothing on stdout."""
    p = bridge(*args)
    assert (p.returncode, p.stderr, p.stdout) == (2, line + "\n", ""), p.stderr


def test_acp_help_says_where_each_answer_carries_its_receipt():
    """``bridge acp --help`` said "every answer carries the receipt under _meta": an error answer
    carries it in its ``data`` (docs: guide/acp.md), and a cancelled prompt is a result, not an
    error (found by a new-user trial)."""
    text = " ".join(bridge("acp", "--help").stdout.split())
    assert "every answer carries the receipt under _meta" not in text
    assert "answers cancelled, each result carrying the receipt under _meta" in text
    assert "error whose data carries it" in text
    assert "session/close" in text and "141" in text


def test_replay_help_names_the_versions_it_reads():
    """The journals the bridge writes are version 2 (lean); replay's --help said "transcript v1"."""
    assert "versions 1 and 2" in " ".join(bridge("replay", "--help").stdout.split())


def _option_help(command: str, option: str) -> str:
    """The words ``bridge COMMAND --help`` gives ``option``, on one line."""
    lines = bridge(command, "--help").stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {option} "))
    words = [lines[start].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10) or line.strip().startswith("-"):
            break
        words.append(line.strip())
    return " ".join(words)


def test_models_help_says_what_models_does_with_model_and_journal(tmp_path):
    """``bridge models`` leaves the start-up check of ``--model`` out and writes a journal only
    when given ``--journal``; its --help gave both options run's words ("fails its start-up
    check ... exit 2"; "default: $PI_BRIDGE_JOURNAL_DIR ...") against its own description (a
    README trial). What it says is checked against what it does in tests/test_model_at_start.py
    and here: no journal in the default folder."""
    model = _option_help("models", "--model")
    assert "not refused here" in model and "start-up check" not in model, model
    journal = _option_help("models", "--journal")
    assert "default: none" in journal and "PI_BRIDGE_JOURNAL_DIR" not in journal, journal
    assert "fails its start-up check" in _option_help("run", "--model")
    assert "PI_BRIDGE_JOURNAL_DIR" in _option_help("serve", "--journal")
    env = {**os.environ, "PI_BRIDGE_JOURNAL_DIR": str(tmp_path / "journals")}
    fake = [sys.executable, str(ROOT / "tools" / "fake_engine.py")]
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "models", "--", *fake], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and "fake-model" in p.stdout, p.stderr
    assert not (tmp_path / "journals").exists()


def test_diagnose_help_names_every_stop_of_the_bridge_s_own():
    """``bridge diagnose`` explains every receipt the bridge's own stop gave (each ``StopBy`` but
    the controller's); its --help named timeout and closing, not stalled (a README trial)."""
    from bridge.core.receipts import STOP_REASONS
    from bridge.core.words import StopBy

    said = " ".join(bridge("diagnose", "--help").stdout.split())
    for by, reason in STOP_REASONS.items():
        if by is not StopBy.CONTROLLER:
            assert reason.value in said.split("each run the bridge stopped itself", 1)[1].split(")")[0], said


def test_every_journal_help_names_the_same_default_places():
    """The default journal folder is one rule (``bridge/live/journal.py``): demo's --help left
    out ``$XDG_STATE_HOME`` (a README trial)."""
    for command in ("run", "serve", "acp", "demo"):
        said = _option_help(command, "--journal").replace("- ", "-")
        for place in (
            "$PI_BRIDGE_JOURNAL_DIR",
            "$XDG_STATE_HOME/pi-bridge/journals",
            "~/.local/state/pi-bridge/journals",
        ):
            assert place in said, (command, said)


def test_an_engine_that_cannot_be_launched_is_named(tmp_path):
    p = bridge("run", "hi", "--no-journal", "--", str(tmp_path / "no-such-engine"))
    assert p.returncode == 2 and "rejected (engine-down)" in p.stderr and "no-such-engine" in p.stderr


def test_serve_on_an_engine_that_cannot_be_launched_answers_every_prompt_then_exits_2(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--no-journal", "--", str(tmp_path / "no-such-engine")],
        input='{"type":"prompt","id":"q1","message":"hi"}\n',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.splitlines()
    assert (
        line.startswith("bridge serve: the engine cannot be set up: cannot start the engine")
        and "no-such-engine" in line
    )
    import json

    (r,) = [json.loads(x)["receipt"] for x in p.stdout.splitlines() if '"type":"receipt"' in x]
    assert (r["state"], r["reason"]) == ("rejected", "engine-down")


def test_config_refuses_nonsense():
    for bad in (dict(queue_max=0), dict(ack_timeout=-1.0), dict(settle_timeout=0.0), dict(seal_check="x")):
        with pytest.raises(ValueError):
            BridgeConfig(**bad)  # type: ignore[arg-type]


# -- bridge run: user paths -------------------------------------------------------------------

FAKE = [sys.executable, "tools/fake_engine.py"]


def test_run_sends_prompts_one_after_another_whatever_their_number():
    prompts = [f"q{n}" for n in range(70)]
    p = bridge("run", *prompts, "--no-journal", "--json", "--", *FAKE)
    assert p.returncode == 0, p.stderr
    import json

    receipts = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["state"] for r in receipts] == ["finished"] * 70  # no queue-full: one at a time


@pytest.mark.parametrize("prompts, which", [([b"caf\xe9"], "PROMPT 1"), (["ok", b"\xff\xfeabc"], "PROMPT 2")])
def test_run_refuses_a_prompt_whose_bytes_are_not_utf8(tmp_path, prompts: list[str | bytes], which: str) -> None:
    """A prompt byte that is not UTF-8 (a Latin-1 file in "$(cat f)") reached Python as a lone
    surrogate, was sent on, and Pi dropped it: the model was asked "caf" for "caf\xe9", and the
    receipt said finished. Refused before anything starts, one line naming the prompt."""
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "run", *prompts, "--no-journal", "--", str(tmp_path / "no-such-engine")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUTF8": "1"},
    )
    line = f"bridge run: {which} is not UTF-8 text (byte 0x"
    assert (p.returncode, p.stdout, p.stderr.count("\n")) == (2, "", 1), p.stderr
    assert p.stderr.startswith(line), p.stderr


@pytest.mark.pi
def test_run_reads_a_prompt_given_as_dash_from_stdin(tmp_path) -> None:
    """``bridge run - < prompt.txt``: the model was asked "-" (and the receipt said finished);
    a prompt past the 128 KiB the kernel lets one argument have had no way in at all. Here the
    real, sealed Pi gets the file's text, 300 KiB of it, as the one prompt beside another."""
    from bridge.demo.model_server import start_server

    text = "Summarise this. " + "\u00e9t\u00e9 " * 60_000  # UTF-8, multi-byte, past 128 KiB
    with start_server([], default={"text": "Read it."}) as server:
        models = server.write_models(str(tmp_path))
        p = subprocess.run(
            [sys.executable, "-m", "bridge", "run", "first", "-", "--no-journal", "--json"]
            + ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"],
            input=text.encode(),
            capture_output=True,
            timeout=120,
        )
        asked = [r["body"]["messages"][-1]["content"] for r in server.requests]
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["state"] for line in p.stdout.splitlines()] == ["finished", "finished"]
    said = [c if isinstance(c, str) else "".join(part.get("text", "") for part in c) for c in asked]
    assert said[:2] == ["first", text], [s[:40] for s in said]  # (then Pi compacts: past its context window)


@pytest.mark.parametrize(
    "args, stdin, line",
    [
        (["-", "-"], b"x", "bridge run: - (a prompt read from stdin) can be given once: stdin is read once"),
        (["-"], b"caf\xe9", "bridge run: the prompt on stdin is not UTF-8 text (byte 0xe9 at offset 3): convert it"),
    ],
)
def test_run_dash_mistakes_are_one_line(tmp_path, args: list[str], stdin: bytes, line: str) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "run", *args, "--no-journal", "--", str(tmp_path / "no-such-engine")],
        input=stdin,
        capture_output=True,
        timeout=60,
    )
    err = p.stderr.decode()
    assert (p.returncode, p.stdout, err.count("\n")) == (2, b"", 1) and err.startswith(line), err


@pytest.mark.pi
def test_run_json_keeps_its_receipts_on_stdout_when_stderr_is_a_closed_pipe(tmp_path) -> None:
    """With --json the reply text goes to stderr, a courtesy; stdout has the receipts. A stderr
    whose reader had gone (``2> >(head -c 5)``) was taken for a closed stdout: the run was
    stopped (p2 rejected closing), nothing came on stdout, exit 141."""
    from bridge.demo.model_server import start_server

    read, write = os.pipe()
    os.close(read)  # the stderr's reader is gone before the bridge starts: every write is EPIPE
    try:
        with start_server([], default={"text": "Hello."}) as server:
            models = server.write_models(str(tmp_path))
            p = subprocess.run(
                [sys.executable, "-m", "bridge", "run", "a", "b", "--no-journal", "--json"]
                + ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"],
                stdout=subprocess.PIPE,
                stderr=write,
                text=True,
                timeout=120,
            )
    finally:
        os.close(write)
    receipts = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(r["request"], r["state"], r["reply"]) for r in receipts] == [
        ("p1", "finished", "Hello."),
        ("p2", "finished", "Hello."),
    ]
    assert p.returncode == 0


def test_run_json_stdout_is_json_lines_only_and_the_text_goes_to_stderr():
    import json

    p = bridge("run", "a", "b", "--no-journal", "--json", "--", *FAKE)
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["state"] for line in p.stdout.splitlines()] == ["finished", "finished"]
    assert "[p1] ok: a" in p.stderr and "[p2] ok: b" in p.stderr


def test_run_into_a_closed_pipe_ends_quietly_with_every_receipt():
    proc = subprocess.run(
        f"{sys.executable} -m bridge run a b c --no-journal -- {' '.join(FAKE)} | head -c 5",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        executable="/bin/bash",
    )
    assert proc.stdout == "[p1] "
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert all(f"p{n}:" in proc.stderr for n in (1, 2, 3))  # every prompt's receipt, on stderr


def test_a_receipt_line_is_one_line_even_when_the_engine_error_is_not():
    """An engine refusing a prompt with a five-line error (Pi's "No API key found ... Use
    /login" was one): the receipt line kept the line breaks and spread over five lines, cut in
    the middle of a path. Now one line, the breaks shown as `` | ``."""
    error = "No API key found for the selected model.\nUse /login to log in.\nSee:\n/a/path\n/another"
    fake = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json"]
    fake.append(json.dumps({"prompts": [{"reject": error}]}))
    p = bridge("run", "hi", "--no-journal", "--", *fake)
    assert p.returncode == 1, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("p1: rejected (engine) ["), lines
    assert "error: No API key found for the selected model. | Use /login" in lines[0], lines
    assert lines[0].endswith("]"), lines


@pytest.mark.pi
def test_the_first_run_with_no_provider_is_one_set_up_line_and_exit_2():
    """Issue 42: ``bridge run hi`` with no options (what a new user runs first) gave a
    ``rejected (engine)`` receipt carrying Pi's "Use /login" advice, and exit 1. Pi has no
    model then: the start-up check says so in one line naming what to give, exit 2, as the
    other set-up errors. ``--env-allow LANG`` keeps any provider key of this machine's
    environment from the engine."""
    p = bridge("run", "hi", "--no-journal", "--env-allow", "LANG")
    assert p.returncode == 2, p.stderr
    assert "Pi has no model to run" in p.stderr and "--api-key-env" in p.stderr and "--models-json" in p.stderr
    assert "/login" not in p.stderr


@pytest.mark.pi
@pytest.mark.parametrize("json_mode", [False, True])
def test_demo_into_a_closed_pipe_ends_quietly(tmp_path, json_mode: bool):
    """``bridge demo | head -1`` (the real, sealed Pi): 141 and no traceback, as for every
    subcommand. The broken pipe reached main inside the nursery's exception group, and main
    took it for a bug: a traceback and exit 70 (a new-user trial)."""
    flag = " --json" if json_mode else ""
    proc = subprocess.run(
        f"{sys.executable} -m bridge demo{flag} --journal {tmp_path / 'j.jsonl'} | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        executable="/bin/bash",
        cwd=ROOT,
    )
    assert proc.returncode == 141, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "bug in pi-bridge" not in proc.stderr, proc.stderr
    assert len(proc.stdout.splitlines()) == 1, proc.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "--bogus"], "bridge run: unrecognized arguments: --bogus (see bridge run --help)"),
        (["run", "hi", "--"], "no engine command after --"),
        (["serve", "--", ""], "no engine command after --"),
        (
            ["run", "hi", "--engine-cwd", "/nonexistent-folder", "--", *FAKE],
            "--engine-cwd /nonexistent-folder does not exist",
        ),
        (["run", "hi", "--engine-cwd", "README.md", "--", *FAKE], "--engine-cwd README.md is not a folder"),
        (["run", "hi", "--journal", "README.md", "--", *FAKE], "the journal README.md already exists"),
        (
            ["serve", "--journal", "README.md/j.jsonl", "--", *FAKE],
            "cannot create the journal README.md/j.jsonl: Not a directory",
        ),
        (["run", "hi", "--no-journal", "--", "/nonexistent/engine"], "cannot start the engine '/nonexistent/engine'"),
        (
            ["models", "--", "/nonexistent/engine"],
            "bridge models: the engine cannot be set up: cannot start the engine '/nonexistent/engine'",
        ),
        (["run", "hi", "--no-journal", "--provider", "nosuch"], "--provider nosuch needs --model too"),
        pytest.param(["demo", "--journal", "README.md"], "the journal README.md already exists", marks=pytest.mark.pi),
        (["run", "hi", "--journal", "tests", "--", *FAKE], "the journal tests is a folder (give a file's path in it"),
        (["acp", "--no-journal", "--pi-dir", "/nonexistent-pi"], "bridge acp: the pinned Pi is not installed"),
        (["acp", "--pi-settings", "/nonexistent.json"], "--pi-settings /nonexistent.json: No such file"),
        (["run", "hi", "--pi-settings", "README.md"], "--pi-settings README.md: Expecting value"),
        (["acp", "--pi-settings", "pyproject.toml", "--", *FAKE], "--pi-settings is for the sealed Pi"),
        (["acp", "--engine-cwd", "/tmp"], "unrecognized arguments: --engine-cwd"),
    ],
)
def test_run_and_serve_setup_mistakes_are_one_line_and_exit_2(args: list[str], says: str):
    p = bridge(*args)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--journal", "README.md", "--", *FAKE], "the journal README.md already exists"),
        (["--journal", "README.md/j.jsonl", "--", *FAKE], "cannot create the journal README.md/j.jsonl"),
        (["--no-journal", "--models-json", "/nonexistent.json"], "models.json /nonexistent.json is unusable"),
        (["--no-journal", "--models-json", "SETTINGS_LIST"], 'is unusable: Pi reads {"providers"'),
        (["--no-journal", "--models-json", "MODELS_NO_PROVIDERS"], 'is unusable: Pi reads {"providers"'),
        (["--no-journal", "--extension", "/nonexistent.ts"], "extension /nonexistent.ts does not exist"),
        (["--no-journal", "--pi-settings", "SETTINGS_EXT"], "settings extensions would load resources"),
        (["--no-journal", "--pi-settings", "SETTINGS_LIST"], "must hold a JSON object"),
        (["--no-journal", "--thinking", "bogus"], "--thinking: invalid choice"),
    ],
)
def test_serve_that_cannot_be_set_up_writes_nothing_on_stdout(tmp_path, args: list[str], says: str) -> None:
    """docs: guide/serve.md: a setup failure is one line on stderr and exit 2, stdout empty
    (some wrote a lone ``{"type":"bye","receipts":0}`` without ``ready``, others nothing); the
    prompt waiting on stdin was never read, so no receipt is owed."""
    (tmp_path / "ext.json").write_text('{"extensions": ["x"]}')
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "five.json").write_text('{"providers": 5}')
    paths = {"SETTINGS_EXT": str(tmp_path / "ext.json"), "SETTINGS_LIST": str(tmp_path / "list.json")}
    paths["MODELS_NO_PROVIDERS"] = str(tmp_path / "five.json")
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", *[paths.get(a, a) for a in args]],
        input='{"type":"prompt","id":"a","message":"x"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert (p.returncode, p.stdout, p.stderr.count("\n")) == (2, "", 1), (p.stdout, p.stderr)
    assert p.stderr.startswith("bridge serve: ") and says in p.stderr, p.stderr


async def test_submit_refuses_a_message_that_is_not_text():
    from bridge import CommandProfile, open_bridge

    async with open_bridge(CommandProfile(FAKE), journal=False) as b:
        for bad in (123, None, b"bytes"):
            with pytest.raises(TypeError, match="message must be a str"):
                await b.submit(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="request id"):
            await b.submit("hi", request="")
        with pytest.raises(ValueError, match=r'images\[0\]: "data" is not base64'):
            await b.submit("hi", images=[{"type": "image", "data": "not base64!", "mimeType": "image/png"}])
        assert b.status()["queued"] == [] and b.receipts_issued == 0


def test_a_journal_has_its_header_on_disk_before_the_first_prompt(tmp_path):
    import json
    import signal
    import time

    journal = tmp_path / "j.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--", *FAKE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["type"] == "ready"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    time.sleep(0.1)
    header = json.loads(journal.read_bytes().split(b"\n")[0])
    assert header["transcript"] == "pi-bridge"


def _run_on_a_terminal(*args: str) -> tuple[subprocess.CompletedProcess[bytes], str]:
    """``bridge run ARGS`` with its stderr on a terminal (a pty): the process and that text."""
    import os
    import pty

    leader, follower = pty.openpty()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "bridge", "run", *args],
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=60,
        )
        os.close(follower)
        follower = -1
        err = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return p, err.decode()


def test_run_on_a_terminal_shows_the_engine_starting_and_retrying():
    import json

    scenario = json.dumps({"prompts": [{"retries": 1, "retry_delay": 0.1, "reply": "at last"}]})
    p, text = _run_on_a_terminal("hi", "--no-journal", "--", *FAKE, "--scenario-json", scenario)
    assert p.returncode == 0 and b"at last" in p.stdout
    assert "… engine started (pid" in text
    assert "… the engine retries p1 (attempt 1 of 3 in 0.1 s): 529 overloaded_error" in text, text


def test_run_on_a_terminal_says_how_the_engine_died_in_words():
    """The line said "(code None, signal 9); restarting": Python's None for the status it did
    not have, and a restart that never came (the prompt was the last one; found by a trial,
    with an engine that killed itself mid-run)."""
    import json

    scenario = json.dumps({"prompts": [{"kill_at": 3}]})
    p, text = _run_on_a_terminal("hi", "--no-journal", "--", *FAKE, "--scenario-json", scenario)
    assert p.returncode == 1, text
    assert "… engine exited by itself (signal 9)\r\n" in text, text
    assert "None" not in text and "restarting" not in text, text
    assert "generation 2" not in text, text


def test_a_bug_is_the_only_traceback_and_exits_70():
    code = (
        "import sys, bridge.readers.replay, bridge.cli\n"
        "def broken(path): raise RuntimeError('an invariant broke')\n"
        "bridge.readers.replay.replay = broken\n"
        "sys.exit(bridge.cli.main(['replay', 'README.md']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 70
    assert "Traceback" in p.stderr and "this is a bug in pi-bridge" in p.stderr and "please report it" in p.stderr


@pytest.mark.parametrize("stage", ["build_parser", "_split_engine"])
def test_ctrl_c_while_the_command_line_is_read_is_exit_130_without_a_traceback(stage: str) -> None:
    """Ctrl-C in the first moments (the parser is built while the subcommands' modules are
    imported, a few hundred ms) was Python's KeyboardInterrupt traceback and death by SIGINT,
    not the 130 of docs: guide/exit-codes.md. The SIGINT is sent by the process to itself, at that stage."""
    code = (
        "import os, signal, sys, bridge.cli, bridge.cli.entry\n"
        f"real = bridge.cli.entry.{stage}\n"
        "def interrupted(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        f"bridge.cli.entry.{stage} = interrupted\n"
        "sys.exit(bridge.cli.main(['run', 'hi', '--no-journal', '--', 'true']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr, p.stdout) == (130, "", ""), p.stderr


def test_every_reader_ends_quietly_into_a_closed_pipe():
    for args in (
        "replay fixtures/core/*.jsonl",
        "replay --json fixtures/core/*.jsonl",
        "conform fixtures",
        "diagnose fixtures/pi-1.6.0/steer_unsealed.jsonl",
    ):
        p = subprocess.run(
            f"{sys.executable} -m bridge {args} | head -c 3; exit ${{PIPESTATUS[0]}}",
            shell=True,
            capture_output=True,
            text=True,
            timeout=120,
            executable="/bin/bash",
        )
        assert p.returncode in (0, 141), (args, p.returncode, p.stderr)
        assert p.stderr == "", (args, p.stderr)


def test_a_stdout_that_cannot_be_written_is_one_line_and_a_failure():
    """A full disk behind stdout (/dev/full) is not a reader that went away (| head, 141): every
    command says so in one line and exits 1 -- serve and run after giving every receipt (run's
    on stderr), serve naming where the receipts are. A stdout closed outright (>&-) is a
    mistake to fix: exit 2 (found by trying both: a traceback and exit 70, and serve exited 0)."""
    fake = f"{sys.executable} tools/fake_engine.py"

    def sh(args: str, redirect: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return _bridge_sh(f"{args} {redirect}", stdin)

    full = {
        args: sh(args, "> /dev/full")
        for args in (
            "replay fixtures/core/aborted_without_stop.jsonl",
            "diagnose fixtures/pi-1.6.0/stalled.jsonl",
            f"run hi --no-journal -- {fake}",
            f"models --json -- {fake}",
        )
    }
    for args, p in full.items():
        assert p.returncode == 1, (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr and "No space left on device" in p.stderr, (args, p.stderr)
    run = full[f"run hi --no-journal -- {fake}"]
    assert "p1: finished" in run.stderr, run.stderr
    serve = sh(f"serve --no-journal -- {fake}", "> /dev/full", '{"type":"prompt","id":"a","message":"x"}\n')
    assert serve.returncode == 1 and serve.stderr.strip().splitlines() == [
        "bridge serve: cannot write to stdout (No space left on device); there is no journal"
    ], serve.stderr
    for args in (f"run hi --no-journal -- {fake}", f"serve --no-journal -- {fake}"):
        closed = sh(args, ">&- </dev/null")
        assert closed.returncode == 2 and closed.stderr.count("\n") == 1, closed.stderr
        assert closed.stderr.startswith(f"bridge {args.split()[0]}: stdout is closed"), closed.stderr


def test_a_journal_whose_header_cannot_be_written_is_not_left_behind(tmp_path):
    """A full disk at the header (``RLIMIT_FSIZE`` here) is one line and exit 2, and the
    empty file is removed: it was left, so the same command run again once the disk had room
    said "the journal ... already exists" (a new-user trial, on a full tmpfs)."""
    import resource

    journal = tmp_path / "j.jsonl"

    def tiny_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    p = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "hi", "--journal", str(journal), "--", *FAKE],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        preexec_fn=tiny_files,
    )
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"bridge run: cannot write the journal {journal}: File too large"
    ], p.stderr
    assert not journal.exists()
    again = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "hi", "--journal", str(journal), "--", *FAKE],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert again.returncode == 0, again.stderr


def test_a_closed_stderr_is_as_quiet_as_dev_null_and_never_reaches_stdout(tmp_path):
    """Started with ``2>&-``, Python has no ``sys.stderr``, and ``print(file=None)`` writes to
    stdout: serve's one-line error landed in its JSON stream, replay's on stdout, and ``bridge
    run`` died with a traceback (on stdout) and exit 70 (a new-user trial). Now the messages go
    nowhere, as with ``2>/dev/null``, and stdout and the exit status are what they would be."""
    fake = f"{sys.executable} tools/fake_engine.py"
    existing = tmp_path / "j.jsonl"
    existing.write_text("")

    def sh(args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return _bridge_sh(f"{args} 2>&-", stdin)

    run = sh(f"run hi --json --no-journal -- {fake}")
    assert run.returncode == 0, run.stdout
    assert [json.loads(line)["state"] for line in run.stdout.splitlines()] == ["finished"], run.stdout
    serve = sh(f"serve --journal {existing} -- {fake}", '{"type":"prompt","id":"a","message":"x"}\n')
    assert serve.returncode == 2 and all(line.startswith("{") for line in serve.stdout.splitlines()), serve.stdout
    replay = sh(f"replay {existing}")
    assert (replay.returncode, replay.stdout) == (2, ""), replay.stdout


def test_pi_settings_must_be_an_object_and_leave_the_seals_own_settings_alone(tmp_path):
    """``--pi-settings`` (its effect, Pi's retries, is checked through the real Pi in
    tests/test_acp.py): a JSON object, not one of the settings the seal sets."""
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    sealed = tmp_path / "sealed.json"
    sealed.write_text('{"retry": {"maxRetries": 1}, "defaultProjectTrust": "always"}')
    loads = tmp_path / "loads.json"
    loads.write_text('{"extensions": ["/x.ts"]}')
    for path, says in (
        (listed, "must hold a JSON object"),
        (sealed, "defaultProjectTrust is set by the seal"),
        (loads, "settings extensions would load resources into the sealed Pi"),
    ):
        p = bridge("run", "hi", "--no-journal", "--pi-settings", str(path))
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_serve_whose_reader_went_away_closes_and_exits_141(tmp_path):
    """``bridge serve … | head -1``: after ``ready`` nobody reads. serve closes as for a signal
    (nothing more is written to the engine; every accepted prompt's receipt is in the journal)
    and exits 141 -- it used to go on running prompts for nobody and exit 0 (a new-user trial)."""
    journal = tmp_path / "j.jsonl"
    fake = " ".join(FAKE)
    lines = "".join(f'echo \'{{"type":"prompt","id":"p{n}","message":"hi"}}\'; ' for n in range(3))
    p = subprocess.run(
        f"({lines} sleep 2) | {sys.executable} -m bridge serve --journal {journal} -- {fake} | head -1; "
        "exit ${PIPESTATUS[1]}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        executable="/bin/bash",
        cwd=ROOT,
    )
    assert p.returncode == 141, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.startswith('{"type":"ready"') and p.stderr == "", p.stderr
    text = journal.read_text()
    assert '"controller-gone"' in text
    receipts = [line for line in text.splitlines() if line.startswith('{"receipt"')]
    prompts = [line for line in text.splitlines() if '"type":"prompt"' in line and '"send"' in line]
    assert len(receipts) >= 1 and len(receipts) >= len(prompts)


def test_models_says_so_when_the_engine_offers_none() -> None:
    """An empty list is Pi's answer without a provider key: a line on stderr says why (exit 0),
    not an empty table; with models, the table and no such line."""
    import shlex

    fake = f"{sys.executable} tools/fake_engine.py --scenario-json"
    none = _bridge_sh(f"models -- {fake} {shlex.quote(json.dumps({'models': []}))}")
    assert none.returncode == 0 and none.stdout == "", none
    assert none.stderr.strip().splitlines() == [
        "bridge models: the engine offers no model: Pi lists a provider's models once it has its key "
        "(--api-key-env NAME, or a --models-json provider)"
    ]
    assert _bridge_sh(f"models --json -- {fake} {shlex.quote(json.dumps({'models': []}))}").stdout == ""
    some = _bridge_sh(f"models -- {fake} {shlex.quote(json.dumps({'models': [{'provider': 'p', 'id': 'm'}]}))}")
    assert some.returncode == 0 and "p                m" in some.stdout and some.stderr == "", some


def test_run_shows_a_reply_with_surrogates_whole():
    """A reply with a lone surrogate (JSON.parse reads ``"\\ud83d"``; a model can send one) is
    shown whole on a UTF-8 stdout, the surrogate as U+FFFD, as JavaScript's TextEncoder writes
    it: no text lost, no stdout taken for closed, exit 0."""
    scenario = {"prompts": [{"reply": "Hi \ud83d there \U0001f600 end", "deltas": 3}]}
    engine = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json", json.dumps(scenario)]
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "hi", "--no-journal", "--", *engine],
        capture_output=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode() == "Hi \ufffd there \U0001f600 end\n"
    assert b"finished" in p.stderr and b"cannot write" not in p.stderr


def test_a_prompt_with_no_text_leaves_stdout_empty():
    """A prompt that fails before any text (a provider error) writes nothing on stdout: its
    line end came after no text, and on a terminal made a second blank line before the
    receipt's (found by a trial). With text, the text's line is ended."""
    fake = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json"]
    failed = json.dumps({"prompts": [{"reply": "", "stopReason": "error", "deltas": 0}]})
    p = bridge("run", "hi", "--no-journal", "--", *fake, failed)
    assert (p.returncode, p.stdout) == (1, ""), p.stderr
    assert "p1: failed" in p.stderr
    p = bridge("run", "hi", "--no-journal", "--", *fake, json.dumps({"prompts": [{"reply": "yes", "deltas": 2}]}))
    assert (p.returncode, p.stdout) == (0, "yes\n"), p.stderr
    p = bridge("run", "a", "b", "--no-journal", "--", *fake, failed)
    assert p.stdout == "[p1] \n[p2] ok: b\n", p.stdout  # labelled: each line ended


def test_the_halves_of_a_surrogate_pair_in_two_pieces_are_shown_as_one_character(capsys):
    """JavaScript strings are UTF-16: a delta may end between the two halves of a pair. The
    piece keeps its first half for the next one; a half with no other is U+FFFD."""
    import trio

    from bridge.controller.run import Run
    from bridge.profiles.command import CommandProfile

    class Handle:
        async def text(self):
            for piece in ("a\ud83d", "\ude00b\ud83d", "\ude01", "c\ud83d"):
                yield piece

    run = Run([], CommandProfile(FAKE), journal=False, config=BridgeConfig())
    trio.run(run._stream, None, Handle())
    assert capsys.readouterr().out == "a\U0001f600b\U0001f601c\ufffd"


def test_run_json_shows_the_text_on_stderr_as_on_stdout():
    """With ``--json`` the reply text goes to stderr, surrogates made characters there too."""
    scenario = {"prompts": [{"reply": "x \ud83d y", "deltas": 2}]}
    engine = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json", json.dumps(scenario)]
    p = bridge("run", "hi", "--no-journal", "--json", "--", *engine)
    assert p.returncode == 0, p.stderr
    assert "x \ufffd y" in p.stderr and json.loads(p.stdout)["state"] == "finished"


def test_a_journal_path_that_is_a_dangling_link_is_named_so(tmp_path):
    link = tmp_path / "j.jsonl"
    link.symlink_to(tmp_path / "nowhere")
    p = bridge("run", "hi", "--journal", str(link), "--", *FAKE)
    assert p.returncode == 2, p.stderr
    assert f"the journal {link} is a symbolic link" in p.stderr and not (tmp_path / "nowhere").exists()


def test_a_tool_that_blocks_is_stopped_by_the_tool_timeout_not_waited_on_for_ever(tmp_path):
    """Issue 42: a tool that blocks held its prompt for ever by default (the stall timer rests
    while a tool runs, --timeout has none). --tool-timeout (default 1800 s) bounds it: the
    prompt is stopped as a stall, failed/stalled, the stop's note naming the tool bound, well
    before the 300 s stall timeout."""
    journal = tmp_path / "tool.jsonl"
    scenario = json.dumps({"defaults": {"tools": 1, "tool_hang": True}})
    fake = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json", scenario]
    p = bridge("run", "--json", "--journal", str(journal), "--tool-timeout", "1", "hi", "--", *fake)
    receipt = json.loads(p.stdout.strip().splitlines()[-1])
    assert (receipt["state"], receipt["reason"]) == ("failed", "stalled"), p.stderr
    notes = [json.loads(line)["note"] for line in journal.read_text().splitlines() if '"note"' in line[:8]]
    (stop,) = [n for n in notes if n.get("event") == "stop"]
    assert stop["by"] == "stall" and "a tool ran for 1 s" in stop["why"]
    assert "--tool-timeout" in bridge("run", "--help").stdout
