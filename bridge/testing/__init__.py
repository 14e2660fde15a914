"""Test support that the suite (``tests/``) and the checking tools (``tools/soak``) share.

Not part of the bridge: nothing else in ``bridge/`` imports it, and it imports no pytest, so a
tool can import it as well as a test (``tests/test_layers.py`` checks both). The tests import
nothing from ``tools/``: what a tool and the suite both need lives here, and a tool's own code
stays in ``tools/``. It ships with the package but runs from a checkout: it starts the
checkout's ``tools/fake_engine.py`` and its ``python -m bridge``.

- :mod:`bridge.testing.checks`: the live checks shared by ``tools/soak`` and the live tests --
  one receipt per prompt, journals replaying to the live receipts (or, when their disk filled
  up, reading back and agreeing with them), no zombies, who stopped a run never guessed; and
  what they drive: ``bridge serve`` as a subprocess, fake-engine generations, a journal on a
  full disk, a controller that stops prompts at random moments.
"""
