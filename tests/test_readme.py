"""The README tells the truth where a test can check it: its examples run as written (the
Python API, the custom provider, the serve exchange), and the places the code sends a reader
to are there."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import ROOT


@contextlib.contextmanager
def _model_server(*args: str) -> Iterator[dict[str, Any]]:
    """``tools/model_server.py ARGS`` started as a user starts it: what its first line says
    (where it listens), and stopped at the end."""
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "model_server.py"), *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        yield json.loads(server.stdout.readline())
    finally:
        server.terminate()
        server.wait(timeout=10)


def _bridge(command: str | list[str], *, cwd: Path, journals: Path) -> subprocess.CompletedProcess[str]:
    """A README command run as written (a string: through the shell), its journals kept apart."""
    return subprocess.run(
        command,
        shell=isinstance(command, str),
        cwd=cwd,
        env={**os.environ, "PI_BRIDGE_JOURNAL_DIR": str(journals)},
        capture_output=True,
        text=True,
        timeout=120,
    )


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

    text = (ROOT / "README.md").read_text()
    section = text.split("### Your own OpenAI-compatible server", 1)[1].split("\n### ", 1)[0]
    models = re.findall(r"```json\n(.*?)```", section, re.S)[0]
    command = re.findall(r"```sh\n(.*?)```", section, re.S)[0].strip()
    with _model_server("--default", json.dumps({"text": "Hello from your server."})) as listening:
        assert "http://127.0.0.1:8000/v1" in models
        (tmp_path / "my-models.json").write_text(models.replace("http://127.0.0.1:8000/v1", listening["base_url"]))
        argv = command.split(" ", 1)[1]  # after .venv/bin/bridge
        p = _bridge(f"{sys.executable} -m bridge {argv}", cwd=tmp_path, journals=tmp_path / "journals")
    assert p.returncode == 0, p.stderr
    assert "Hello from your server." in p.stdout and "p1: finished" in p.stderr


def _shape(value: object) -> object:
    """The keys of a JSON value, nested: what a controller parses, without the values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__ if value is not None else None


def _same_keys(want: object, got: object) -> bool:
    """The same keys at every level where both sides are objects (a null beside an object is
    a value, not a shape)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_same_keys(want[k], got[k]) for k in want)
    return True


def test_the_serve_exchange_has_the_lines_and_keys_a_real_one_has(tmp_path):
    """README "bridge serve": the "real exchange" is sent as written to bridge serve with the
    real, sealed Pi and the scripted model server, and each line it shows has the keys the
    real line has, at every level (times, pids and paths differ). Its status line had lost
    "shutdown" and "closing" and said generation 0, and its receipt had no "config" (a
    new-user trial: a controller written from the README parses what is there)."""

    text = (ROOT / "README.md").read_text()
    section = text.split("A real exchange with the sealed Pi and the scripted model server", 1)[1]
    block = section.split("```\n", 2)[1]
    sent = [line[2:] for line in block.splitlines() if line.startswith("> ")]
    shown = [json.loads(line[2:]) for line in block.splitlines() if line.startswith("< ")]
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tools" / "model_server.py"),
            "--write-models",
            str(tmp_path),
            "--default",
            json.dumps({"text": "Hello! How can I help?"}),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "bridge",
                "serve",
                "--models-json",
                str(tmp_path / "models.json"),
                "--provider",
                "scripted",
                "--model",
                "scripted-model",
                "--journal",
                str(tmp_path / "j.jsonl"),
            ],
            input="".join(line + "\n" for line in sent),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in p.stdout.splitlines()]

    def kind(line: dict) -> tuple[object, object]:
        return line["type"], line.get("event")

    assert sorted(map(str, (kind(line) for line in got if line["type"] != "text"))) == sorted(
        map(str, (kind(line) for line in shown if line["type"] != "text"))
    ), got
    for want in shown:
        real = next(line for line in got if kind(line) == kind(want))
        assert _same_keys(_shape(want), _shape(real)), (want, real)
        if want["type"] == "status":
            assert want["engine"]["generation"] == real["engine"]["generation"], real
        if want["type"] == "receipt":
            assert want["receipt"]["ackIdx"] == real["receipt"]["ackIdx"], real  # the README explains its 4


def _readme_places() -> list[str]:
    """What a reference to the README can name: its headings (without the #s) and the bold
    words that open a paragraph (``**Stalls**``, ``**Sizes.**``)."""
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    leads = re.findall(r"^\*\*(.+?)\.?\*\*", text, re.M)
    return headings + leads


def test_every_readme_section_the_code_names_is_there():
    """A message, a --help or a docstring that sends the reader to README "X" names a heading
    (or a paragraph's bold lead) that begins with X. Found by a README trial: "see the README's
    custom providers" (a section called so there is none), README "Limits" and README
    "Editors: `bridge acp`" (renamed long ago)."""
    places = _readme_places()
    refs = re.compile(r"""README(?:'s)?\W{0,3}["“]([^"”\\]{2,80})["”]|README's ([a-z][a-z -]+)""")
    files = [*sorted((ROOT / "bridge").rglob("*.py")), *sorted((ROOT / "tools").glob("*.py"))]
    files += sorted((ROOT / "tools" / "acp").glob("*.py"))
    files += [ROOT / "tools" / name for name in ("setup", "setup_bubblewrap", "setup_pi", "demo", "test", "record")]
    wrong = []
    for path in files:
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            for m in refs.finditer(line):
                name = m.group(1) or m.group(2)
                if m.group(2) is not None and m.group(2).split()[0] in ("main", "own", "voice"):
                    continue  # "the README's main job": words about the README, not a place in it
                if not any(place.startswith(name) for place in places):
                    wrong.append(f"{path.relative_to(ROOT)}:{n}: README {name!r}")
    assert not wrong, "README places that are not there:\n" + "\n".join(wrong)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_sizes_the_readme_states_are_the_tree_s():
    """README "Where things are", **Sizes.**: the module count (give or take 2), the lines (give
    or take 5%), the bounds on a module's and a function's length, and the largest module named
    first, as ``wc -l`` and ``def`` to its last line count them. It said 72 modules, 15,600
    lines, none over 790 and no function over 60 while the tree had 75, 18,900, 1,070 and 89 (a
    README trial)."""
    import ast

    text = (ROOT / "README.md").read_text()
    para = " ".join(text.split("**Sizes.**", 1)[1].split("\n\n", 1)[0].split())
    m = re.match(r"(\d+) modules, about ([\d,]+) lines; no module over ([\d,]+) lines and no function over (\d+)", para)
    assert m, para
    modules, lines, module_max, function_max = (_number(g) for g in m.groups())
    sizes: dict[str, int] = {}
    longest: list[tuple[int, str]] = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        source = path.read_text()
        sizes[str(path.relative_to(ROOT))] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                longest.append((node.end_lineno - node.lineno + 1, f"{path.name}:{node.name}"))
    assert abs(len(sizes) - modules) <= 2, (len(sizes), modules)
    assert abs(sum(sizes.values()) - lines) <= lines * 0.05, (sum(sizes.values()), lines)
    assert max(sizes.values()) <= module_max, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    assert max(longest)[0] <= function_max, sorted(longest)[-3:]
    first = re.search(r"The largest: `([^`]+)` \(~([\d,]+) lines", para)
    assert first, para
    assert first.group(1) == max(sizes, key=lambda k: sizes[k]), first.group(1)
    assert abs(sizes[first.group(1)] - _number(first.group(2))) <= 0.05 * sizes[first.group(1)]


def test_the_seal_s_refusal_of_a_model_is_what_run_prints(tmp_path):
    """README "The seal", "The model asked for": the command it shows, against the scripted
    model server's models.json, ends with exactly the lines it shows (the journal's path
    aside) and exit 2. The README gave the command without the models.json its provider is
    in (Pi then refuses the provider, in other words) and left out the journal's line (a
    README trial)."""

    text = (ROOT / "README.md").read_text()
    section = text.split("**The model asked for.**", 1)[1]
    command = re.search(r"`bridge run (--models-json DIR/models\.json[^`]*)` ends with", section, re.S)
    assert command, "the README shows no bridge run command before the refusal"
    shown = section.split("```\n", 2)[1].splitlines()
    with _model_server("--write-models", str(tmp_path)):
        argv = " ".join(command.group(1).split()).replace("DIR/", f"{tmp_path}/").split(" ")
        p = _bridge([sys.executable, "-m", "bridge", "run", *argv], cwd=ROOT, journals=tmp_path / "journals")
    assert p.returncode == 2, p.stderr
    got = [line for line in p.stderr.splitlines() if line]
    assert len(got) == len(shown), (got, shown)
    for want, real in zip(shown, got, strict=True):
        if want.startswith("journal: "):
            assert real.startswith(f"journal: {tmp_path}/journals/") and real.endswith(".jsonl"), real
        else:
            assert real == want, (real, want)
