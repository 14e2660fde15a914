"""The ``bridge`` command line (SPEC §7): one module per subcommand, each holding its parser
(``add_parser``) and what it does (``_cmd_NAME``).

- :mod:`bridge.cli.entry`: :func:`main`, the top-level parser and the exit status.
- :mod:`bridge.cli.options`: the options ``serve``, ``acp``, ``run`` and ``models`` share (the
  engine, its confinement, the bridge) and the engine profile, journal and settings they describe.
- :mod:`bridge.cli.replay`, :mod:`bridge.cli.conform`, :mod:`bridge.cli.diagnose`: the readers'
  subcommands.
- :mod:`bridge.cli.serve`, :mod:`bridge.cli.acp`, :mod:`bridge.cli.run`: the controllers'
  subcommands (the controllers themselves are :mod:`bridge.controller.serve`,
  :mod:`bridge.controller.acp` and :mod:`bridge.controller.run`).
- :mod:`bridge.cli.models`: ``bridge models``.

``demo`` brings its own (``add_parser`` in :mod:`bridge.demo.showcase`). Building the parser
imports no command's work: each ``_cmd_NAME`` imports what it runs (trio, the live bridge, the
profiles, a reader), so ``--version``, ``--help`` and the readers never load trio or the live
bridge, and ``bridge acp`` answers ``initialize`` before any session has loaded the live layer
(:mod:`bridge.controller.acp.agent`; ``tools/bench/bench_startup`` measures both).
"""

from __future__ import annotations

from bridge.cli.entry import build_parser, main

__all__ = ["build_parser", "main"]
