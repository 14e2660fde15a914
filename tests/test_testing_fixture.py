"""Testing against Pi offline, as a user does it (issue 29): ``bridge.testing.ScriptedModel`` for
the length of a block, and the opt-in pytest plugin's ``scripted_model`` fixture.

The plugin is tested the way a user meets it: a user's test folder (a conftest that opts in, a
test file) written into a temporary folder and run by ``python -m pytest`` in a subprocess --
one trio test (pytest-trio), one asyncio test (``asyncio.run``), each a real prompt through the
real pinned Pi against the fixture's server, asserting the receipt and what the server saw;
the same file with a wrong expectation makes that run fail; and after either, nothing is left
in the user's folder or the temporary folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bridge.testing import ScriptedModel
from tests.conftest import private_left

CONFTEST = 'pytest_plugins = ["bridge.testing.pytest_plugin"]\n'

USER_TESTS = textwrap.dedent(
    """
    import asyncio
    import json
    import urllib.request

    import pytest

    from bridge import State, open_bridge, query
    from bridge.core.progress import ToolEnd
    from bridge.testing import ScriptedModel
    from bridge.testing.pytest_plugin import ScriptedModelFactory

    EXPECTED = "Hello from the script"


    @pytest.mark.trio
    @pytest.mark.scripted_model([{"text": "Hello from the script", "chunk": 4}])
    async def test_a_prompt_under_trio(scripted_model: ScriptedModel) -> None:
        async with open_bridge(scripted_model.profile(), journal=False) as bridge:
            handle = await bridge.submit("Say hello", stream=True)
            text = "".join([piece async for piece in handle.text()])
            receipt = await handle.receipt()
        assert receipt.state is State.FINISHED
        assert receipt.reply == text == EXPECTED
        assert [r.user_text for r in scripted_model.completions] == ["Say hello"]
        assert scripted_model.remaining == 0


    TOOL = [
        {"tool_call": {"name": "bash", "arguments": {"command": "echo from-the-tool"}}},
        {"text": "ran it"},
    ]


    @pytest.mark.scripted_model(TOOL)
    def test_a_tool_call_under_asyncio(scripted_model: ScriptedModel) -> None:
        async def main():
            return [m async for m in query("Run it", engine=scripted_model.profile(), journal=False)]

        messages = asyncio.run(main())
        receipt = messages[-1]
        assert receipt.state is State.FINISHED and receipt.reply == "ran it"
        assert any(isinstance(m, ToolEnd) and "from-the-tool" in (m.result or "") for m in messages)
        first, second = scripted_model.completions
        assert first.user_text == second.user_text == "Run it"
        assert second.messages[-1]["role"] == "tool" and "from-the-tool" in second.messages[-1]["content"]


    def test_the_factory_starts_servers(scripted_model_factory: ScriptedModelFactory) -> None:
        model = scripted_model_factory(model_id="mine")
        with urllib.request.urlopen(model.url + "/models") as answer:
            assert json.load(answer)["data"][0]["id"] == "mine"
        assert json.load(open(model.models_json))["providers"]["scripted"]["baseUrl"] == model.url
    """
)


def _run_users_pytest(folder: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PI_BRIDGE_"))}
    env.update(TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1", XDG_STATE_HOME=str(tmp.parent / "state"))
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args]
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def users_folder(tmp_path: Path) -> tuple[Path, Path]:
    """``(the user's test folder, the temporary folder its run uses)``."""
    folder, tmp = tmp_path / "user", tmp_path / "tmp"
    folder.mkdir()
    tmp.mkdir()
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_user.py").write_text(USER_TESTS)
    return folder, tmp


def _left_behind(folder: Path, tmp: Path) -> list[str]:
    return sorted([p.name for p in folder.iterdir() if p.name not in ("conftest.py", "test_user.py")]) + sorted(
        p.name for p in tmp.iterdir()
    )


def test_a_users_tests_run_against_the_fixture_under_trio_and_asyncio(
    users_folder: tuple[Path, Path], pinned_pi: object
) -> None:
    folder, tmp = users_folder
    p = _run_users_pytest(folder, tmp)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("test_a_prompt_under_trio", "test_a_tool_call_under_asyncio", "test_the_factory_starts_servers"):
        assert f"PASSED test_user.py::{name}" in p.stdout, p.stdout
    assert "3 passed" in p.stdout, p.stdout
    assert _left_behind(folder, tmp) == [], "the user's run left files behind"


def test_a_failing_assertion_in_a_users_test_fails_their_run(
    users_folder: tuple[Path, Path], pinned_pi: object
) -> None:
    folder, tmp = users_folder
    test_file = folder / "test_user.py"
    test_file.write_text(USER_TESTS.replace('EXPECTED = "Hello from the script"', 'EXPECTED = "Goodbye"'))
    p = _run_users_pytest(folder, tmp, "-k", "trio")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED test_user.py::test_a_prompt_under_trio" in p.stdout, p.stdout
    assert "AssertionError" in p.stdout and "'Goodbye'" in p.stdout, p.stdout
    assert _left_behind(folder, tmp) == [], "the failed run left files behind"


def test_without_the_plugin_there_is_no_fixture(users_folder: tuple[Path, Path]) -> None:
    """Opt-in: no entry point loads it into everyone's pytest."""
    folder, tmp = users_folder
    (folder / "conftest.py").write_text("")
    p = _run_users_pytest(folder, tmp, "-k", "factory")
    assert p.returncode == 1 and "fixture 'scripted_model_factory' not found" in p.stdout, p.stdout


# -- ScriptedModel in the test's own process ------------------------------------------------


def _models(url: str) -> str:
    with urllib.request.urlopen(url + "/models", timeout=10) as answer:
        return str(json.load(answer)["data"][0]["id"])


def _refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/models", timeout=10).close()
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


def test_the_with_block_starts_the_server_and_its_end_stops_it_and_removes_models_json(private_tmp: Path) -> None:
    with ScriptedModel([{"text": "hi"}], model_id="m1", provider="p1") as model:
        url, path = model.url, Path(model.models_json)
        assert url == f"http://127.0.0.1:{model.port}/v1" and _models(url) == "m1"
        config = json.loads(path.read_text())["providers"]["p1"]
        assert config["baseUrl"] == url and config["models"][0]["id"] == "m1"
        profile = model.profile(cwd=str(private_tmp))
        assert (profile.provider, profile.model, profile.models_json, profile.cwd) == (
            "p1",
            "m1",
            str(path),
            str(private_tmp),
        )
    assert _refused(url) and not path.exists() and private_left(private_tmp) == []
    assert [(r.method, r.path, r.step) for r in model.requests] == [("GET", "/v1/models", None)]
    assert model.completions == []
    model.close()  # a second close changes nothing
    with pytest.raises(RuntimeError, match="not running"):
        model.url  # noqa: B018


def test_a_block_that_raises_still_stops_the_server(private_tmp: Path) -> None:
    with pytest.raises(KeyError), ScriptedModel() as model:
        url = model.url
        raise KeyError("mine")
    assert _refused(url) and private_left(private_tmp) == []


def test_a_step_it_does_not_know_is_refused_before_anything_starts(private_tmp: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown step keys \['txet'\]"):
        ScriptedModel([{"txet": "hi"}])  # type: ignore[typeddict-unknown-key]
    assert private_left(private_tmp) == []


async def test_the_async_with_block_under_trio(private_tmp: Path) -> None:
    async with ScriptedModel() as model:
        url = model.url
    assert _refused(url) and private_left(private_tmp) == []


def test_the_async_with_block_under_asyncio(private_tmp: Path) -> None:
    async def main() -> str:
        async with ScriptedModel() as model:
            return model.url

    assert _refused(asyncio.run(main())) and private_left(private_tmp) == []


def test_importing_bridge_testing_loads_nothing_until_a_name_is_used() -> None:
    code = (
        "import sys, bridge.testing\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'trio', 'attrs')"
        " or m.startswith(('bridge.live', 'bridge.testing.')))\n"
        "print(loaded())\n"
        "bridge.testing.ScriptedModel\n"
        "print([m for m in loaded() if not m.startswith(('attr', 'bridge.testing.scripted'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "[]"], out.stdout
