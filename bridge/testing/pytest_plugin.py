"""A pytest plugin for testing against Pi offline: the scripted model server as a fixture.

Opt in, in a ``conftest.py``::

    pytest_plugins = ["bridge.testing.pytest_plugin"]

or on the command line, ``pytest -p bridge.testing.pytest_plugin``. It is not registered as a
``pytest11`` entry point: that would load it into the pytest of every project in an environment
where pi-bridge is installed, adding its fixture names, its marker and its imports to test runs
that never asked for them (and a fixture named ``scripted_model`` of their own would clash).

Fixtures (synchronous, so they serve trio tests under pytest-trio, asyncio tests under
``asyncio.run`` or pytest-asyncio, and plain tests alike):

- ``scripted_model``: a running :class:`~bridge.testing.ScriptedModel` with the script of the
  test's ``@pytest.mark.scripted_model(steps, default=..., model_id=..., provider=..., cost=...)``
  (no marker: no steps, every request answered ``{"text": "ok"}``); stopped after the test.
- ``scripted_model_factory``: a callable taking :class:`~bridge.testing.ScriptedModel`'s
  parameters and returning a running one, for a script made in the test or several servers;
  each stopped after the test.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest

from bridge.demo.model_server.server import DEFAULT_MODEL_ID, DEFAULT_PROVIDER
from bridge.testing.scripted import ScriptedModel, Step

__all__ = ["ScriptedModelFactory", "scripted_model", "scripted_model_factory"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "scripted_model(steps, *, default=None, model_id=..., provider=..., cost=None): "
        "the script of the scripted_model fixture's server (bridge.testing.pytest_plugin)",
    )


@pytest.fixture
def scripted_model(request: pytest.FixtureRequest) -> Iterator[ScriptedModel]:
    """The scripted model server, running for the test, with the script of its
    ``@pytest.mark.scripted_model(...)`` (the closest one: the test's, its class's or its module's)."""
    marker = request.node.get_closest_marker("scripted_model")
    args, kwargs = (marker.args, marker.kwargs) if marker is not None else ((), {})
    with ScriptedModel(*args, **kwargs) as model:
        yield model


class ScriptedModelFactory:
    """What the ``scripted_model_factory`` fixture gives: call it to start a server; each is
    stopped after the test."""

    def __init__(self) -> None:
        self._started: list[ScriptedModel] = []

    def __call__(
        self,
        steps: Iterable[Step] = (),
        *,
        default: Step | None = None,
        model_id: str = DEFAULT_MODEL_ID,
        provider: str = DEFAULT_PROVIDER,
        cost: dict[str, float] | None = None,
    ) -> ScriptedModel:
        """A running :class:`~bridge.testing.ScriptedModel` with these parameters."""
        model = ScriptedModel(steps, default=default, model_id=model_id, provider=provider, cost=cost).start()
        self._started.append(model)
        return model

    def close(self) -> None:
        """Stop every server it started, the last first."""
        while self._started:
            self._started.pop().close()


@pytest.fixture
def scripted_model_factory() -> Iterator[ScriptedModelFactory]:
    """Start scripted model servers in the test: ``scripted_model_factory([{"text": "hi"}])``."""
    factory = ScriptedModelFactory()
    try:
        yield factory
    finally:
        factory.close()
