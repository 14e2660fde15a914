"""Issue 41, limits: a hostile tool cannot exhaust the machine (SPEC §5 "the tool boundary").

Against the real pinned Pi: the scripted model calls Pi's ``bash`` tool with each attack, then
replies; a second prompt follows. Each attack gets an ordinary tool error -- a non-zero exit and
its error in the tool result the model reads on its next call -- the prompt is ``finished``
with the model's reply, and the same engine answers the next prompt. Small limits keep them
fast (:data:`SMALL`). Without the limits (``Limits(None, None, None, None)``, as before issue
41) every attack here succeeds: the controls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.command import ProfileError
from bridge.profiles.limits import CgroupRoot, EngineLimits, Limits, find_cgroup_root, parse_size, sweep_cgroups
from bridge.profiles.pi import scripted_profile

#: Marked ``pi`` (tests/conftest.py): each attack is a tool call of the real pinned Pi.
pytestmark = pytest.mark.pi

REPLY = "Done with the tool."
AGAIN = "Here again."
#: 256 MiB, 64 tasks, 16 MiB of /tmp and of the working folder.
SMALL = Limits(memory="256M", processes=64, tmp="16M", disk="16M")
#: For the many small tools: Pi's Node holds 120-200 MiB (more on a loaded machine, its GC
#: behind); under 256 MiB it was near the limit by itself on a loaded CI run, and once every
#: tool was killed the kernel had only Pi left to kill. 384 MiB leaves Pi room while the eight
#: 40 MiB tools (320 MiB) still pass the limit.
ROOMY = Limits(memory="384M", processes=64, tmp="16M", disk="16M")
NONE = Limits(memory=None, processes=None, tmp=None, disk=None)

needs_cgroup = pytest.mark.skipif(find_cgroup_root() is None, reason="no cgroup the bridge may make here")


@pytest.fixture
def server_for() -> Iterator[Any]:
    """This file's own (not conftest's): the model runs one bash ``command``, then replies to it
    and to the next prompt."""
    servers: list[Any] = []

    def start(command: str) -> Any:
        script = [{"tool_call": {"name": "bash", "arguments": {"command": command}}}, {"text": REPLY}, {"text": AGAIN}]
        servers.append(start_server(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def attack(tmp_path: Path, server: Any, limits: Limits) -> dict[str, Any]:
    """Run the attack's prompt and a next one on one bridge; what the model was told and the receipts."""
    profile = scripted_profile(server.write_models(str(tmp_path)), limits=limits)

    async def main() -> dict[str, Any]:
        with trio.fail_after(120):
            async with open_bridge(profile, journal=tmp_path / "j.jsonl", config=BridgeConfig()) as bridge:
                first = await bridge.prompt("go")
                second = await bridge.prompt("again")
                return {"first": first, "second": second}

    out = trio.run(main)
    told = [m for m in server.requests[1]["body"]["messages"] if m.get("role") == "tool"]
    out["tool"] = told[-1]["content"] if told else ""
    return out


def assert_ordinary_tool_error(out: dict[str, Any], *errors: str) -> None:
    first, second = out["first"], out["second"]
    assert (first.state, first.reply) == ("finished", REPLY), first
    assert (second.state, second.reply, second.generation) == ("finished", AGAIN, first.generation), second
    said = out["tool"]
    assert "Command exited with code" in said and "code 0" not in said, said
    assert any(e in said for e in errors), said


#: Allocates 512 MiB in one process.
BIG = "python3 -c \"b = bytearray(512 << 20); print('allocated')\""
#: Eight processes of 40 MiB each: none as large as Pi's Node (~120 MiB resident), so at the
#: limit the OOM killer would pick Pi -- unless the tools' oom_score_adj is above Pi's.
MANY = (
    'for i in 1 2 3 4 5 6 7 8; do python3 -c "b = bytearray(40 << 20); import time; time.sleep(3)" & done; wait; exit 9'
)
#: 200 processes that live 3 s.
FORKS = (
    "python3 -c 'import os, time\n"
    "for i in range(200):\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(3); os._exit(0)\n"
    'print("forked 200")\''
)
#: 64 MiB into /tmp, and into the working folder.
TMP_FILL = "dd if=/dev/zero of=/tmp/fill bs=1M count=64 && echo filled"
CWD_FILL = "dd if=/dev/zero of=./fill bs=1M count=64 && echo filled"


@needs_cgroup
def test_a_tool_allocating_past_the_memory_limit_is_killed_and_pi_goes_on(tmp_path: Path, server_for: Any):
    out = attack(tmp_path, server_for(BIG), SMALL)
    assert_ordinary_tool_error(out, "code 137")
    assert "allocated" not in out["tool"]


@needs_cgroup
def test_many_small_tools_past_the_memory_limit_are_killed_not_pi(tmp_path: Path, server_for: Any):
    out = attack(tmp_path, server_for(MANY), ROOMY)
    assert_ordinary_tool_error(out, "Killed")


@needs_cgroup
def test_a_tool_forking_past_the_process_limit_fails_its_fork(tmp_path: Path, server_for: Any):
    out = attack(tmp_path, server_for(FORKS), SMALL)
    assert_ordinary_tool_error(out, "Resource temporarily unavailable", "BlockingIOError")
    assert "forked 200" not in out["tool"]


def test_a_tool_writing_past_tmp_size_gets_no_space(tmp_path: Path, server_for: Any):
    out = attack(tmp_path, server_for(TMP_FILL), SMALL)
    assert_ordinary_tool_error(out, "No space left on device")
    assert "filled" not in out["tool"]


def test_a_tool_writing_past_the_working_folders_size_gets_no_space(tmp_path: Path, server_for: Any):
    out = attack(tmp_path, server_for(CWD_FILL), SMALL)
    assert_ordinary_tool_error(out, "No space left on device")
    assert "filled" not in out["tool"]


@pytest.mark.parametrize("command", [BIG, FORKS, TMP_FILL, CWD_FILL], ids=["memory", "forks", "tmp", "cwd"])
def test_without_limits_each_attack_succeeds(tmp_path: Path, server_for: Any, command: str):
    """The control: the tests above can fail (issue 41's finding, reproduced)."""
    out = attack(tmp_path, server_for(command), NONE)
    assert out["first"].state == "finished", out["first"]
    assert "code" not in out["tool"] and any(w in out["tool"] for w in ("allocated", "forked 200", "filled")), out


@needs_cgroup
def test_without_the_tools_oom_score_many_small_tools_get_pi_killed(tmp_path: Path, server_for: Any, monkeypatch: Any):
    """The control of the OOM protection: with the tools' oom_score_adj left at Pi's (the bridge's
    value patched to 0: a tool cannot lower its own, the tool shell's Landlock rules deny its
    writes to /proc), the same eight processes get Pi killed."""
    monkeypatch.setattr("bridge.profiles.limits.TOOL_OOM_SCORE_ADJ", 0)
    out = attack(
        tmp_path, server_for("cat /proc/self/oom_score_adj; echo 1000 > /proc/self/oom_score_adj; " + MANY), ROOMY
    )
    assert out["first"].state != "finished", out["first"]


@needs_cgroup
def test_a_tool_cannot_lower_its_oom_score_back_to_pis(tmp_path: Path, server_for: Any):
    """Before the tool shell, a tool could put its score back to Pi's and get Pi killed: now its
    write to /proc is denied (the tool shell's Landlock rules) and Pi goes on."""
    out = attack(tmp_path, server_for("echo 0 > /proc/self/oom_score_adj; echo set=$?; " + MANY), ROOMY)
    assert "set=1" in out["tool"], out["tool"]
    assert out["first"].state == "finished", out["first"]


def test_without_a_cgroup_each_tool_process_has_rlimit_data(tmp_path: Path, server_for: Any, monkeypatch: Any):
    """Where no cgroup can be made (forced here): the big allocation fails in the tool
    (``MemoryError``) under RLIMIT_DATA, which the probe saw as a tool sees it; Pi is not held to it."""
    monkeypatch.setattr("bridge.profiles.limits.find_cgroup_root", lambda: None)
    processes = None if os.geteuid() == 0 else 64  # RLIMIT_NPROC does not bind root: refused there
    out = attack(tmp_path, server_for(BIG), Limits(memory="256M", processes=processes, tmp="16M", disk="16M"))
    assert_ordinary_tool_error(out, "MemoryError")
    lines = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert lines[0]["seal"]["sandbox"]["limits"]["memory"].startswith("256 MiB (RLIMIT_DATA")
    [note] = [x["note"] for x in lines if isinstance(x.get("note"), dict) and x["note"]["event"] == "confinement"]
    assert note["verified"]["limits"]["tool_rlimit_data_kib"] == str(256 << 10)


@needs_cgroup
def test_the_journal_says_what_was_enforced_and_the_probe_saw_it(tmp_path: Path, server_for: Any):
    tamper = (
        'cat /proc/self/oom_score_adj; echo "ulimit -v 1" >> "$BASH_ENV"; echo append=$?; rm -f "$BASH_ENV"; echo rm=$?'
    )
    out = attack(tmp_path, server_for(tamper), SMALL)
    assert out["first"].state == "finished"
    lines = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    limits = lines[0]["seal"]["sandbox"]["limits"]
    assert limits["memory"].startswith("256 MiB (cgroup v") and limits["processes"].startswith("64 (cgroup v")
    assert limits["tmp"] == "16 MiB (tmpfs)" and limits["working_folder"] == "16 MiB (tmpfs)"
    [note] = [x["note"] for x in lines if isinstance(x.get("note"), dict) and x["note"]["event"] == "confinement"]
    seen = note["verified"]["limits"]
    assert seen["tmp_bytes"] == seen["working_folder_bytes"] == 16 << 20
    assert seen["tool_oom_score_adj"] == "1000"
    names = {os.path.basename(c) for c in limits["cgroup"]}
    assert all(any(line.endswith("/" + n) for line in seen["cgroups"]) for n in names), seen
    assert out["tool"].startswith("1000")
    assert "append=1" in out["tool"] and "rm=1" in out["tool"], out["tool"]  # the tools' shell is read-only
    assert not any(os.path.exists(c) for c in limits["cgroup"]), "the engine's cgroup outlived it"


def test_a_given_working_folder_is_not_bounded_and_the_header_says_so(tmp_path: Path):
    made = EngineLimits.make(SMALL, own_cwd=False, root=None if os.geteuid() else find_cgroup_root())
    try:
        assert made.header["working_folder"] == "not bounded (given: --engine-cwd)"
        assert not made.cwd_tmpfs
    finally:
        made.remove()


def test_without_a_cgroup_root_cannot_keep_a_process_limit(tmp_path: Path):
    if os.geteuid() != 0:
        made = EngineLimits.make(SMALL, own_cwd=True, root=None)
        assert "ulimit -H -S -u 64 " in made.tool_shell and "ulimit -H -S -d 262144 " in made.tool_shell
        return
    with pytest.raises(ProfileError, match="--engine-processes 0"):
        EngineLimits.make(SMALL, own_cwd=True, root=None)
    made = EngineLimits.make(Limits(memory="256M", processes=0), own_cwd=True, root=None)
    assert "ulimit -H -S -d 262144 " in made.tool_shell and "RLIMIT_DATA" in made.header["memory"]
    assert made.prefix == [] and made.header["processes"] == "none"


def test_a_fake_v2_tree_gets_a_child_with_the_limits(tmp_path: Path):
    """cgroup v2 (none delegated on this machine): the files a delegated subtree has, in a folder."""
    (tmp_path / "cgroup.procs").write_text("")
    root = CgroupRoot(2, {"memory": str(tmp_path), "pids": str(tmp_path)})
    made = EngineLimits.make(SMALL, own_cwd=True, root=root)
    [folder] = made.cgroups
    assert Path(folder, "memory.max").read_text() == str(256 << 20)
    assert Path(folder, "pids.max").read_text() == "64"
    assert made.prefix[-2:] == [os.path.join(folder, "cgroup.procs"), "--"]
    made.remove()  # a plain folder with files: rmdir fails, left for the sweep
    assert sweep_cgroups(root) == [] and Path(folder).exists()  # (its bridge, this process, lives)


def test_sizes_parse_and_zero_lifts():
    assert parse_size("2G") == 2 << 30 and parse_size("16MiB") == 16 << 20 and parse_size("1048576") == 1 << 20
    assert parse_size("0") is None and parse_size("none") is None
    assert Limits(memory="none").memory is None and Limits().processes == 512
    with pytest.raises(ValueError):
        parse_size("lots")


@needs_cgroup
def test_a_killed_bridges_cgroup_is_swept_by_the_next(tmp_path: Path):
    """Named for a bridge pid that is gone: removed; one of a live bridge (ours) stays."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    root = find_cgroup_root()
    assert root is not None
    left = [os.path.join(f, f"pi-bridge-{gone.pid}-1") for f in sorted(set(root.folders.values()))]
    ours = EngineLimits.make(SMALL, own_cwd=True)
    for folder in left:
        os.mkdir(folder)
    try:
        assert sorted(sweep_cgroups()) == sorted(left)
        assert not any(os.path.exists(f) for f in left) and all(os.path.exists(f) for f in ours.cgroups)
    finally:
        ours.remove()
        for folder in left:
            if os.path.exists(folder):
                os.rmdir(folder)
    assert not any(os.path.exists(f) for f in ours.cgroups)


@needs_cgroup
def test_a_sigkilled_bridges_cgroup_is_emptied_and_the_next_bridge_removes_it(tmp_path: Path, server_for: Any):
    import signal
    import subprocess
    import sys
    import time

    server = server_for("sleep 30")
    models = server.write_models(str(tmp_path))
    cli = [sys.executable, "-m", "bridge", "run", "--json", "--no-journal", "--models-json", models]
    cli += ["--provider", "scripted", "--model", "scripted-model"]
    root = find_cgroup_root()
    assert root is not None
    first = subprocess.Popen([*cli, "go"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pattern = f"pi-bridge-{first.pid}-"
        deadline = time.monotonic() + 60
        made: list[str] = []
        while time.monotonic() < deadline and len(server.requests) < 1:
            time.sleep(0.05)
        for folder in sorted(set(root.folders.values())):
            made += [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(pattern)]
        assert len(made) == len(set(root.folders.values())), made
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f, "cgroup.procs").read_text().strip() for f in made):
        time.sleep(0.05)
    assert all(os.path.isdir(f) and not Path(f, "cgroup.procs").read_text().strip() for f in made)
    server2 = server_for("true")
    cli[cli.index(models)] = server2.write_models(str(tmp_path))
    done = subprocess.run([*cli, "again"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert not any(os.path.exists(f) for f in made), "the next bridge left the killed one's cgroup"
