#!/usr/bin/env python3
"""The scripted OpenAI-compatible model server, as a script in the checkout.

The server itself ships in the package, ``bridge/demo/model_server/`` (``bridge demo``
runs it; ``script.py`` has the step schema, ``cli.py`` the command line). This file runs
it, so ``python tools/model_server.py ARGS`` is ``python -m bridge.demo.model_server ARGS``
with any Python ≥ 3.11, installed package or not: the server is stdlib only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The checkout first: this file means the checkout's bridge, even beside another install.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.demo.model_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
