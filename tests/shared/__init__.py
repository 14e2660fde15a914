"""What the suite shares with the checking tools (``tools/soak/soak``, ``tools/record``,
``tools/pi_matrix.py``): checkout-only, never in the wheel, and the one part of ``tests/`` a
tool may import (``tests/test_layers.py`` checks both ways).

- :mod:`tests.shared.checks`: the live checks shared by ``tools/soak/soak`` and the live tests --
  one receipt per prompt, journals replaying to the live receipts (or, when their disk filled
  up, reading back and agreeing with them), no zombies, who stopped a run never guessed; and
  what they drive: ``bridge serve`` as a subprocess, fake-engine generations, a journal on a
  full disk, a controller that stops prompts at random moments.
- :mod:`tests.shared.pi_scenarios` (a package): the scenarios against the real pinned Pi (the
  scripted model server, the live bridge), each with its check of what Pi does (``sealed.py``,
  ``unsealed.py``), the runner that starts them (``runner.py``) and the normal form of a
  recording (``recordings.py``): ``tools/record`` records them into ``fixtures/pi-1.6.0`` (and,
  with ``--matrix``, across Pi versions), ``tests/test_pi_live.py`` and
  ``tests/test_pi_matrix.py`` run them.

They run from a checkout: they start its ``tools/fake_engine.py``, its ``python -m bridge``
and its pinned Pi (``tools/pi``). Nothing here imports pytest when imported, nor anything of
``tools/``, nor the rest of ``tests/`` (the tools run without pytest); they may use any layer
of the bridge but the controllers, the CLI and the showcase (a controller is run as a
subprocess). ``mypy --strict`` covers them as it covers ``bridge/`` (pyproject.toml).
"""
