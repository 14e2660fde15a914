"""``bridge demo``: the showcase and the scripted model server it runs, both shipped in the package.

- :mod:`bridge.demo.showcase`: the ``demo`` subcommand (four prompts through the real, sealed,
  pinned Pi, each receipt checked against what was expected).
- :mod:`bridge.demo.model_server`: the scripted OpenAI-compatible model server the showcase
  starts in-process on 127.0.0.1 (stdlib only; also ``python -m bridge.demo.model_server``, and
  ``tools/model_server.py`` in a checkout, for the tests and tools).

Importing this package loads neither trio nor the live bridge: the showcase imports them when it runs.
"""

from __future__ import annotations

from bridge.demo.showcase import add_parser, run

__all__ = ["add_parser", "run"]
