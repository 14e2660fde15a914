"""Issue 41, tenants: a hostile tool (the scripted model emitting each attack as a ``bash`` call to
the real pinned Pi) reaches no other bridge's private folders, journals or conversations,
whatever ``TMPDIR`` is; in a pool, nothing of one user's prompt is there for the next one's; a
killed pool leaves nothing behind; the conversation store is 0700 all the way.

Each attack was run on the code before the fix (``main`` at e342d0c) and succeeded there: the
secret was read, the process lived on, the folder stayed, the parents were 0755.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.pool import open_pool
from bridge.live.supervisor import BridgeConfig
from bridge.profiles import orphans
from bridge.profiles.conversation import Conversation
from bridge.profiles.pi import scripted_profile
from tests.conftest import ROOT
from tests.helpers_sandbox import tool_outputs, tool_step

#: Marked ``pi`` (tests/conftest.py): each attack is a tool call of the real pinned Pi.
pytestmark = pytest.mark.pi

REPLY = "Done with the tool."


def with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in argv and state != "Z":
                found.append(int(entry))
    return found


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A ``TMPDIR`` outside ``/tmp`` (which every sandbox hides): ``/var/tmp/pi-bridge-test-…``."""
    folder = Path("/var/tmp") / f"pi-bridge-test-tenants-{uuid.uuid4().hex[:10]}"
    folder.mkdir(mode=0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- bridges apart


@pytest.mark.parametrize("where", ["var-tmp", "home"])
async def test_a_tool_reads_nothing_of_another_bridges_private_folders_whatever_tmpdir_is(
    tmp_path: Path, var_tmp: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Bridge B (in this process) holds a literal key in its config folder, a journal in a folder
    of its own and a named conversation in a store of its own, all under a ``TMPDIR`` outside
    ``/tmp``; bridge A (``bridge run``, same ``TMPDIR``) runs a tool that lists and reads them."""
    if where == "home":
        tmpdir = Path.home() / f".pi-bridge-test-tmp-{uuid.uuid4().hex[:10]}"
        tmpdir.mkdir(mode=0o700)
    else:
        tmpdir = var_tmp / "tmp"
        tmpdir.mkdir()
    key, secret = f"sk-literal-{uuid.uuid4().hex}", f"PIN-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setenv("PI_BRIDGE_CONVERSATION_DIR", str(var_tmp / "conversations-b"))
    journals_b = var_tmp / "journals-b"
    server_b = start_server([{"text": "noted"}])
    try:
        profile_b = scripted_profile(server_b.write_models(str(tmp_path)), api_key=key)
        with trio.fail_after(90):
            async with open_bridge(profile_b, journal=journals_b / "b.jsonl", conversation="bee") as b:
                receipt = await b.prompt(f"remember my {secret}")
                assert receipt.state == "finished", receipt
                assert b.engine is not None
                config_b = b.engine.launch.env["PI_CODING_AGENT_DIR"]
                cwd_b = b.engine.launch.cwd
                session_b = var_tmp / "conversations-b" / "bee" / "session.jsonl"
                # (The key is held outside: B's auth.json holds B's engine's token, as secret to A.)
                token_b = (Path(config_b) / "auth.json").read_text()
                assert token_b.strip(), "the test would prove nothing"
                for _ in range(100):  # (recorded by a worker thread as the receipt is delivered)
                    if session_b.exists() and secret in session_b.read_text():
                        break
                    await trio.sleep(0.05)
                assert secret in session_b.read_text() and secret in (journals_b / "b.jsonl").read_text()
                attack = (
                    f"ls -A {tmpdir} {orphans.private_root()}; "
                    f"cat {config_b}/auth.json; ls -A {config_b} {cwd_b}; "
                    f"ls -A {journals_b}; cat {journals_b}/b.jsonl; cat {session_b}; "
                    f"grep -rl {secret} {tmpdir} {var_tmp} /tmp 2>/dev/null; echo attack-done"
                )
                out = await trio.to_thread.run_sync(_run_a, attack, tmp_path, tmpdir)
    finally:
        server_b.close()
        if where == "home":
            shutil.rmtree(tmpdir, ignore_errors=True)
    assert "attack-done" in out, out
    assert key not in out and secret not in out and token_b not in out, out
    names = ("auth.json", "b.jsonl", "session.jsonl", f"-{os.getpid()}-")  # B's, this process's
    seen = [line for line in out.splitlines() if any(n in line for n in names)]
    assert all("No such file or directory" in line for line in seen), out


def _run_a(attack: str, tmp_path: Path, tmpdir: Path) -> str:
    """Bridge A: ``bridge run`` of one prompt whose tool runs ``attack``; its tool's output."""
    server = start_server([tool_step(attack), {"text": REPLY}])
    try:
        models = server.write_models(str(tmp_path / "a"))
        journal = tmp_path / "a" / "a.jsonl"
        env = {k: v for k, v in os.environ.items() if k != "PI_BRIDGE_CONVERSATION_DIR"}
        env["TMPDIR"] = str(tmpdir)
        argv = [sys.executable, "-m", "bridge", "run", "go", "--json", "--journal", str(journal)]
        argv += ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=str(ROOT), env=env, check=False)
        assert done.returncode == 0, done.stderr
        return "\n".join(tool_outputs(journal))
    finally:
        server.close()


# --------------------------------------------------------------------------- a pool's tenants


async def test_in_a_pool_the_next_users_prompt_finds_nothing_of_the_last_ones(tmp_path: Path) -> None:
    """User A's prompt (no key) leaves a process copying the engine's session files into its
    working folder and /tmp, and files in both; user B's keyed prompt says a PIN and a password;
    user C's prompt (no key, the same engine: the pool has one) looks for all of it."""
    mark = uuid.uuid4().hex[:12]
    pin, password = f"PIN-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex[:10]}"
    # The PIN and password the session files hold, kept short (Pi shows a long output's tail only).
    steal = 'grep -ho "PIN-[0-9a-f]*\\|pw-[0-9a-f]*" "$PI_CODING_AGENT_DIR"/sessions/*.jsonl 2>/dev/null'
    loop = (
        f"while :; do {steal} >> /tmp/stolen.txt; sort -u -o /tmp/stolen.txt /tmp/stolen.txt; "
        'cp /tmp/stolen.txt "$0"/stolen.txt; sleep 0.1; done'
    )
    plant = (
        f"echo a-was-here > left-{mark}.txt; echo a-was-here > /tmp/left-{mark}.txt; "
        f"echo a-was-here > /dev/shm/left-{mark}; echo a-was-here > /dev/left-{mark}; "
        # The engine's config folder is writable: a file of A's there, and a changed settings.json
        f'echo a-was-here > "$PI_CODING_AGENT_DIR/left-{mark}"; '
        """printf '{"a-was-here": true}\\n' > "$PI_CODING_AGENT_DIR/settings.json"; """
        'echo a-was-here >> "$PI_CODING_AGENT_DIR/models-store.json"; '
        f"setsid nohup sh -c '{loop}' \"$PWD\" spy-{mark} >/dev/null 2>&1 & sleep 0.3; echo planted"
    )
    look = (
        f"ls -A . /tmp /dev/shm; cat left-{mark}.txt /tmp/left-{mark}.txt /dev/shm/left-{mark} /dev/left-{mark}; "
        "cat stolen.txt /tmp/stolen.txt; sleep 0.5; cat stolen.txt /tmp/stolen.txt; "
        f'cat "$PI_CODING_AGENT_DIR/left-{mark}"; grep -h a-was-here "$PI_CODING_AGENT_DIR"/*.json; '
        # (the PIN in two halves: this command, which C's own session file records, does not hold it)
        f'grep -rlF "$(printf %s%s {pin[:4]} {pin[4:]})" . /tmp /dev /dev/shm "$PI_CODING_AGENT_DIR" 2>/dev/null | head; '
        "echo looked"
    )
    script = [tool_step(plant), {"text": REPLY}, {"text": "noted"}, tool_step(look), {"text": REPLY}]
    server = start_server(script)
    journals = tmp_path / "journals"
    try:
        profile = scripted_profile(server.write_models(str(tmp_path)))
        with trio.fail_after(120):
            async with open_pool(profile, engines=1, journal=journals, config=BridgeConfig()) as pool:
                told: list[dict[str, Any]] = []
                pool.listeners.append(told.append)
                a = await pool.prompt("user A")
                assert a.state == "finished", a
                b = await pool.prompt(f"user B: my {pin}, my password {password}", conversation="user-b")
                assert b.state == "finished", b
                c = await pool.prompt("user C")
                assert c.state == "finished", c
                alive = with_marker(f"spy-{mark}")
                assert set(pool.journals) == {1}, [t for t in told if t.get("type") == "pool"]
                assert a.pid == b.pid == c.pid, "one engine process: the clean-ups killed nothing of the sandbox's own"
    finally:
        server.close()
        for pid in with_marker(f"spy-{mark}"):
            os.kill(pid, signal.SIGKILL)
    planted, looked = tool_outputs(pool.journals[1])
    assert "planted" in planted and "looked" in looked, (planted, looked)
    assert "a-was-here" not in looked and pin not in looked and password not in looked, looked
    seen = [line for line in looked.splitlines() if f"left-{mark}" in line or "stolen" in line or "/sessions/" in line]
    assert all("No such file or directory" in line for line in seen), looked
    assert alive == [], "user A's process outlived A's prompt"


# --------------------------------------------------------------------------- leftovers


class Serve:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(ROOT),
            env=env,
            text=True,
        )

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, kind: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            got = json.loads(line)
            if got.get("type") == kind:
                return got
        raise AssertionError(f"serve ended before a {kind!r} line")


def test_a_sigkilled_pools_folders_are_gone_once_the_next_bridge_starts(tmp_path: Path, var_tmp: Path) -> None:
    server = start_server([{"text": "noted"}])
    try:
        models = server.write_models(str(tmp_path))
        env = {**os.environ, "TMPDIR": str(var_tmp), "PI_BRIDGE_JOURNAL_DIR": str(tmp_path / "journals")}
        model = ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]
        pool = Serve(["--engines", "1", *model], env)
        try:
            pool.wait_for("ready")
            pool.send({"type": "prompt", "id": "p1", "message": "my secret", "conversation": "k"})
            receipt = pool.wait_for("receipt")["receipt"]
            assert receipt["state"] == "finished", receipt
            places = [var_tmp, orphans.private_root()]
            left = [p for place in places for p in place.iterdir() if f"-{pool.proc.pid}-" in p.name]
            left += [p for p in var_tmp.iterdir() if p.name.startswith("pi-bridge-pool-conversations-")]
            assert any("pool" in p.name for p in left), left
            assert any(b"my secret" in f.read_bytes() for p in left for f in p.rglob("*") if f.is_file())
            pool.proc.kill()
            pool.proc.wait(timeout=10)
        finally:
            pool.proc.kill()
            pool.proc.wait(timeout=10)
        assert all(p.exists() for p in left), "SIGKILL cleans nothing up"
        nxt = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", *model],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(ROOT),
            env=env,
            check=False,
        )
        assert nxt.returncode == 0, nxt.stderr
    finally:
        server.close()
    assert [p for p in left if p.exists()] == []


def test_the_conversation_store_and_its_parents_are_0700(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"  # XDG_STATE_HOME, none of it there yet
    monkeypatch.delenv("PI_BRIDGE_CONVERSATION_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    conv = Conversation.open("mine")
    try:
        made = [state, state / "pi-bridge", state / "pi-bridge" / "conversations", conv.folder]
        assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in made} == {str(p): "0o700" for p in made}
    finally:
        conv.close()
    (state / "pi-bridge").chmod(0o755)  # an older bridge's: tightened at the next open
    Conversation.open("mine").close()
    assert stat.S_IMODE((state / "pi-bridge").stat().st_mode) == 0o700
