"""``python -m bridge.demo.model_server``: see :mod:`bridge.demo.model_server.cli`."""

from __future__ import annotations

import sys

from bridge.demo.model_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
