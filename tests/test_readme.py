"""The README and the docs tell the truth where a test can check it: the README is short and
starts with the two commands, its example runs from any folder, the docs' other examples run as
written (the custom provider, the serve exchange, the seal's refusal), the numbers they state
are the tree's, and the places the code sends a reader to are there. (Every Python block of
every page runs too: tests/test_docs.py.)"""

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

import pytest

from tests.conftest import ROOT
from tests.test_docs import PAGES, documents, python_blocks, run_block


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


def _page(name: str) -> str:
    """A page of the docs site (``guide/serve.md``), as its reader reads it."""
    return (PAGES / name).read_text(encoding="utf-8")


def test_the_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("```")[1]
    assert "tools/demo" in head and "tools/test" in head


def test_the_readme_is_short():
    """Issue 30: at most 300 lines; the rest is in the docs site."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, len(lines)


def test_no_page_points_outside_the_repository_for_the_contract():
    """The docs stand alone: the contract is docs/pages/design/, not a file beside the clone."""
    wrong = [
        name
        for name, path in documents()
        for word in ("../shared", "SPEC.md", "shared/seeds")
        if word in path.read_text(encoding="utf-8")
    ]
    assert not wrong, wrong


def test_the_readme_example_runs_from_any_folder(tmp_path, pinned_pi):
    """README "The Python API, in one example": from a folder outside the checkout, with nothing
    there, it streams the scripted model's reply and prints a finished receipt."""
    code = next(code for page, _, code, _ in python_blocks() if page == "README.md")
    done = run_block(code, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Hello from the model." in done.stdout, done.stdout
    assert re.search(r"^p1: finished \[run-1; ", done.stdout, re.M), done.stdout


def test_the_other_engines_example_runs_from_a_checkout(tmp_path):
    """Guide "The Python API", "Other engines": marked not run standalone (it names the
    checkout's tools/fake_engine.py), so it runs here from the checkout's root, as it says."""
    code = next(code for page, _, code, why in python_blocks() if page == "guide/python-api.md" and why)
    done = run_block(code, tmp_path, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "p1: finished" in done.stdout, done.stdout


@pytest.mark.pi
def test_the_custom_provider_example_runs_against_the_scripted_model_server(tmp_path):
    """Guide "Your own model server": its models.json and command, as written, against
    tools/model_server.py (only the port differs) through the real pinned Pi."""

    text = _page("guide/own-server.md")
    models = re.findall(r"```json\n(.*?)```", text, re.S)[0]
    command = re.findall(r"```sh\n(.*?)```", text, re.S)[0].strip()
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


@pytest.mark.pi
def test_the_serve_exchange_has_the_lines_and_keys_a_real_one_has(tmp_path):
    """Guide "`bridge serve`": the "real exchange" is sent as written to bridge serve with the
    real, sealed Pi and the scripted model server, and each line it shows has the keys the
    real line has, at every level (times, pids and paths differ). Its status line had lost
    "shutdown" and "closing" and said generation 0, and its receipt had no "config" (a
    new-user trial: a controller written from the README parses what is there)."""

    text = _page("guide/serve.md")
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
            assert want["receipt"]["ackIdx"] == real["receipt"]["ackIdx"], real  # the page explains its 4


def _readme_places() -> list[str]:
    """What a reference to the README can name: its headings (without the #s) and the bold
    words that open a paragraph."""
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    leads = re.findall(r"^\*\*(.+?)\.?\*\*", text, re.M)
    return headings + leads


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc slugs, markup left out)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _code_files(*, tests: bool = False) -> list[Path]:
    """Where the code sends a reader: its modules, docstrings, --help texts and tools (and,
    with ``tests``, the tests' docstrings)."""
    files = [*sorted((ROOT / "bridge").rglob("*.py")), *sorted((ROOT / "tools").glob("*.py"))]
    files += sorted((ROOT / "tests").glob("test_*.py")) if tests else []
    files += sorted((ROOT / "tests" / "shared").rglob("*.py"))  # what the tools share with the suite
    files += sorted((ROOT / "tools" / "acp").glob("*.py"))
    files += sorted((ROOT / "tools" / "pi" / "extensions").glob("*.ts"))
    files += [ROOT / "tools" / name for name in ("demo", "test", "record", "fuzz")]
    # Each group of tools/ (tools/bench/, tools/setup/, tools/soak/): all its files.
    files += sorted(
        p for group in ("bench", "setup", "soak") for p in (ROOT / "tools" / group).iterdir() if p.is_file()
    )
    assert {"setup", "setup_pi", "soak", "soaklib.py", "bench", "bench_sandbox"} <= {p.name for p in files}
    return [path for path in files if path.is_file()]


def test_every_docs_page_and_section_the_code_names_is_there():
    """A message, a --help or a docstring that sends the reader to ``docs: PAGE`` or
    ``docs: PAGE#SECTION`` names a page of docs/pages and, after ``#``, the id of one of its
    headings. (Before the docs site it was README "X", and a README trial found three that
    were not there: "see the README's custom providers", README "Limits" and README
    "Editors: `bridge acp`".)"""
    refs = re.compile(r"docs:\s+([\w./-]+\.md)(?:#([\w-]+))?")
    wrong, seen = [], 0
    for path in _code_files(tests=True):
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\bdocs:\s*$", line):
                wrong.append(f"{path.relative_to(ROOT)}:{n}: 'docs:' with its page on the next line")
            for m in refs.finditer(line):
                seen += 1
                page, anchor = PAGES / m.group(1), m.group(2)
                if not page.is_file():
                    wrong.append(f"{path.relative_to(ROOT)}:{n}: no page {m.group(1)}")
                elif anchor is not None and anchor not in _anchors(page):
                    wrong.append(f"{path.relative_to(ROOT)}:{n}: no section #{anchor} in {m.group(1)}")
    assert seen >= 20, seen  # the pattern still finds the references
    assert not wrong, "docs places that are not there:\n" + "\n".join(wrong)


def test_every_readme_section_the_code_names_is_there():
    """A reference to README "X" names a heading (or a paragraph's bold lead) of the README that
    begins with X: the few that still point there (its two commands) must stay true."""
    places = _readme_places()
    refs = re.compile(r"""README(?:'s)?\W{0,3}["“]([^"”\\]{2,80})["”]|README's ([a-z][a-z -]+)""")
    wrong = []
    for path in _code_files():
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


def test_the_sizes_the_docs_state_are_the_tree_s():
    """Guide "Developing pi-bridge", **Sizes.**: the module count (give or take 2), the lines (give
    or take 5%), the bounds on a module's and a function's length, and the largest module named
    first, as ``wc -l`` and ``def`` to its last line count them. It said 72 modules, 15,600
    lines, none over 790 and no function over 60 while the tree had 75, 18,900, 1,070 and 89 (a
    README trial)."""
    import ast

    text = _page("guide/developing.md")
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


@pytest.mark.pi
def test_the_seal_s_refusal_of_a_model_is_what_run_prints(tmp_path):
    """Guide "The seal", "The model asked for": the command it shows, against the scripted
    model server's models.json, ends with exactly the lines it shows (the journal's path
    aside) and exit 2. The README gave the command without the models.json its provider is
    in (Pi then refuses the provider, in other words) and left out the journal's line (a
    README trial)."""

    text = _page("guide/seal.md")
    section = text.split("## The model asked for", 1)[1]
    command = re.search(r"`bridge run\s+(--models-json DIR/models\.json[^`]*)` ends with", section, re.S)
    assert command, "the page shows no bridge run command before the refusal"
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
