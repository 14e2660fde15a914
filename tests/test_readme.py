"""The README's Python API example runs as written (against the fake engine)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_python_api_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has no python example"
    p = subprocess.run([sys.executable, "-c", blocks[0]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "finished" in p.stdout and "ok: hello" in p.stdout


def test_the_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("```")[1]
    assert "tools/demo" in head and "tools/test" in head


def test_the_custom_provider_example_runs_against_the_scripted_model_server(tmp_path):
    """README "Your own OpenAI-compatible server": its models.json and command, as written,
    against tools/model_server.py (only the port differs) through the real pinned Pi."""
    import json
    import os

    text = (ROOT / "README.md").read_text()
    section = text.split("### Your own OpenAI-compatible server", 1)[1].split("\n### ", 1)[0]
    models = re.findall(r"```json\n(.*?)```", section, re.S)[0]
    command = re.findall(r"```sh\n(.*?)```", section, re.S)[0].strip()
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tools" / "model_server.py"),
            "--default",
            json.dumps({"text": "Hello from your server."}),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = json.loads(server.stdout.readline())["base_url"]
        assert "http://127.0.0.1:8000/v1" in models
        (tmp_path / "my-models.json").write_text(models.replace("http://127.0.0.1:8000/v1", base_url))
        argv = command.split(" ", 1)[1]  # after .venv/bin/bridge
        env = {**os.environ, "PI_BRIDGE_JOURNAL_DIR": str(tmp_path / "journals")}
        p = subprocess.run(
            f"{sys.executable} -m bridge {argv}",
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert p.returncode == 0, p.stderr
    assert "Hello from your server." in p.stdout and "p1: finished" in p.stderr
