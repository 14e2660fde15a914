"""Test support that the suite (``tests/``) and the checking tools (``tools/soak``,
``tools/record``) share.

Not part of the bridge: nothing else in ``bridge/`` imports it, and it imports no pytest, so a
tool can import it as well as a test (``tests/test_layers.py`` checks both). The tests import
nothing from ``tools/``: what a tool and the suite both need lives here, and a tool's own code
stays in ``tools/``. It ships with the package but runs from a checkout: it starts the
checkout's ``tools/fake_engine.py``, its ``python -m bridge`` and its pinned Pi (``tools/pi``).

- :mod:`bridge.testing.checks`: the live checks shared by ``tools/soak`` and the live tests --
  one receipt per prompt, journals replaying to the live receipts (or, when their disk filled
  up, reading back and agreeing with them), no zombies, who stopped a run never guessed; and
  what they drive: ``bridge serve`` as a subprocess, fake-engine generations, a journal on a
  full disk, a controller that stops prompts at random moments.
- :mod:`bridge.testing.pi_scenarios` (a package): the scenarios against the real pinned Pi (the
  scripted model server, the live bridge), each with its check of what Pi does (``sealed.py``,
  ``unsealed.py``), the runner that starts them (``runner.py``) and the normal form of a
  recording (``recordings.py``): ``tools/record`` records them into ``fixtures/pi-1.6.0`` (and, with
  ``--matrix``, across Pi versions), ``tests/test_pi_live.py`` and ``tests/test_pi_matrix.py``
  run them.
"""
