"""What each published Pi can do, as far as the bridge cares (issue 16).

The bridge is pinned to one Pi (:data:`bridge.profiles.pi.PI_PIN`); this module is what it
knows of the others, so that a team moving its pin is told what changes, and so that a Pi
that cannot support the tracker is refused *by name* instead of hanging a host.

Two sources, each checked against the other:

- **The first version with each feature** (:data:`FEATURES`), from Pi's own CHANGELOG
  (shipped in the package) and confirmed by the matrix (``tools/record --matrix``, data in
  ``fixtures/matrix/matrix.json``): every version of the matrix showed exactly the features
  this table gives it (``tests/test_pi_matrix.py``). "First" is the first version
  *published* on npm: the CHANGELOG names unpublished ones (0.80.4, 0.99.0, 1.1.0).
- **A probe of ``--help``** (:func:`probe_flags`): which seal flags the installed CLI
  accepts. Pi refuses an unknown option at start (``Error: Unknown option: --no-mcp`` on
  0.74.0), so the seal passes only the flags the version has, and the journal header says
  which were absent. The pinned version is not probed (its flags are the seal's own).

What the tracker *needs* (:data:`NEEDED`): ``agent_settled`` (the only event that closes a
prompt's run; without it no run ever settles) and the ack's ``disposition`` (without it
every ack is a failed seal, SPEC §2). A Pi lacking either is refused at start-up with the
first version that has it, unless the user passes ``--allow-other-pi-version``: then every
receipt says what is unknown (``outcome-unknown``/``disposition``: the ack did not say
``started``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import attrs

__all__ = [
    "FEATURES",
    "NEEDED",
    "OPTIONAL_FLAGS",
    "Feature",
    "HelpProbeFailed",
    "features_of",
    "lacking",
    "needs_message",
    "parse_version",
    "probe_flags",
]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"1.6.0"`` → ``(1, 6, 0)``; None for anything else."""
    m = _VERSION.match(text.strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


@attrs.frozen
class Feature:
    """One thing a Pi version does or not."""

    name: str
    #: The first version published on npm that has it.
    first: str
    #: The CHANGELOG entry that added it (may name an unpublished version).
    changelog: str
    #: What the bridge loses without it.
    without: str


#: Features of the protocol the bridge uses, oldest first.
FEATURES: Final[tuple[Feature, ...]] = (
    Feature(
        "agent_settled",
        "0.80.6",
        "0.80.4: Added extension and RPC agent_settled events",
        "no run ever settles: every receipt waits for a grace or a timeout",
    ),
    Feature(
        "clear_queue",
        "0.85.0",
        "0.85.0: Added RPC clear_queue",
        "a stop sends abort alone (no clear_queue before it)",
    ),
    Feature(
        "disposition",
        "0.99.1",
        "0.99.0: Added per-input disposition to successful RPC prompt, steer and follow_up responses",
        "every ack is a failed seal: each receipt is outcome-unknown/disposition and the engine is recycled",
    ),
    Feature(
        "agent_settled.aborted",
        "1.3.0",
        "1.1.0: Added aborted to agent_settled",
        "a stop during a retry backoff cannot be told from a failure (receipt row 12)",
    ),
)
_BY_NAME: Final = {f.name: f for f in FEATURES}
#: What the tracker cannot do without (refused unless ``--allow-other-pi-version``).
NEEDED: Final = ("agent_settled", "disposition")


def features_of(version: str) -> frozenset[str]:
    """The names of :data:`FEATURES` that ``version`` has (by the first version of each)."""
    v = parse_version(version)
    if v is None:
        return frozenset()
    return frozenset(f.name for f in FEATURES if v >= _required(f.first))


def _required(text: str) -> tuple[int, int, int]:
    v = parse_version(text)
    assert v is not None, text
    return v


def lacking(version: str, names: Iterable[str] = NEEDED) -> list[Feature]:
    """The features among ``names`` that ``version`` lacks."""
    have = features_of(version)
    return [_BY_NAME[n] for n in names if n not in have]


def needs_message(version: str, where: str) -> str | None:
    """One line refusing a Pi that lacks what the tracker needs (None when it has it all)."""
    missing = lacking(version)
    if not missing:
        return None
    what = ", ".join(f"{f.name} (first in Pi {f.first})" for f in missing)
    newest = max((f.first for f in missing), key=_required)
    return (
        f"Pi at {where} is version {version}, which lacks what the overlap tracker needs: {what}; "
        f"use Pi {newest} or later (the pin: tools/setup/setup_pi), or pass --allow-other-pi-version to run it "
        f"anyway (its receipts then say outcome-unknown)"
    )


#: Seal flags a version may lack, and why the seal holds without them; every other seal
#: flag is required (a Pi whose ``--help`` lacks one is refused).
OPTIONAL_FLAGS: Final[Mapping[str, str]] = {
    "--no-mcp": (
        "first published in 1.3.0 (CHANGELOG 1.0.4); the built-in MCP extension of 0.99.1-1.0.3 is off "
        "under --no-extensions (their docs/settings.md), and older versions have no MCP"
    ),
    "--no-approve": (
        "first in 0.79.0 with project trust; before it project-local .pi/ settings load without asking, "
        "and the engine's working folder is a fresh private folder holding none (unless --engine-cwd)"
    ),
}

_HELP_TIMEOUT = 20.0


class HelpProbeFailed(Exception):
    """The install's ``--help`` could not be run or did not answer in time (the words say which)."""


_probed: dict[tuple[str, str, float], frozenset[str]] = {}


def probe_flags(
    node: str,
    cli: str,
    flags: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> frozenset[str]:
    """The ``flags`` that ``node cli --help`` lists (cached per CLI file); ``wrap`` puts the
    argv in a sandbox (the install's code must not run unconfined when the engine would not).

    An option is listed when ``--help`` holds it followed by a non-word character
    (``--no-mcp`` but not ``--no-mcp-servers``). A CLI that cannot be run, or does not answer
    within 20 s, raises :class:`HelpProbeFailed` saying which (not cached: a loaded machine may
    answer the next time) -- it lists nothing, and "does not list the seal's flags" would be
    the wrong words for it (issue 42: a flake under load said so).
    """
    try:
        key = (node, cli, os.stat(cli).st_mtime)
    except OSError:
        return frozenset()
    if key in _probed:
        return _probed[key]
    try:
        out = subprocess.run(
            wrap([node, cli, "--help"]) if wrap is not None else [node, cli, "--help"],
            capture_output=True,
            text=True,
            timeout=_HELP_TIMEOUT,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired:
        raise HelpProbeFailed(f"its --help did not answer within {_HELP_TIMEOUT:g} s") from None
    except OSError as e:
        raise HelpProbeFailed(f"its --help could not be run ({e})") from None
    found = frozenset(f for f in flags if re.search(re.escape(f) + r"(?![\w-])", text))
    _probed[key] = found
    return found
