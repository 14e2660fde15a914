"""Engine profiles: what the bridge launches and how it checks the seal.

A profile turns options into a :class:`Launch`: the argv, environment and
working folder of the engine process, the engine's ``clearing`` command list
(SPEC §4), metadata for the journal header (what was enforced), the commands
the bridge sends once at start-up to verify the seal through the protocol, and
a check of their responses. :meth:`Launch.cleanup` removes whatever the profile
created (an isolated config folder, copied credentials); the bridge calls it
when the engine is gone, also after a crash.

Two profiles exist: :class:`CommandProfile` (any engine speaking Pi's JSONL,
given as argv after ``--``) and :class:`bridge.profiles.pi.PiProfile` (the sealed,
pinned Pi, the default).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from bridge.core.receipts import Receipt, Usage


class ProfileError(Exception):
    """The engine cannot be launched as asked; the message says how to fix it."""


class ModelGate(Protocol):
    """The key endpoint a launch's engine calls its provider through
    (:class:`bridge.profiles.keyhold.KeyEndpoint`), as the I/O layer drives it: it sets the
    gate from the supervision's ``model_gate()`` and hears each forwarded call."""

    #: The prompt calls are forwarded for; None: they are refused.
    gate: str | None
    #: ``report(request, usage)`` for each call forwarded (set when the engine starts).
    report: Callable[[str | None, Usage | None], None] | None


@attrs.define
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    clearing: tuple[str, ...] = ()
    #: Metadata for the journal header: engine name, pin, what the seal enforced.
    header: dict[str, Any] = attrs.field(factory=dict)
    #: Commands sent once after spawn, before the first prompt (ids set here).
    startup: list[dict[str, Any]] = attrs.field(factory=list)
    #: ``check(responses)`` -> problems; ``responses`` maps startup id -> response.
    check: Callable[[dict[str, dict[str, Any]]], list[str]] | None = None
    #: After ``check``: what the engine's confinement enforced and what was verified from
    #: inside it (the journal's ``confinement`` note); None when not confined.
    confinement: Callable[[], dict[str, Any]] | None = None
    cleanup: Callable[[], None] | None = None
    #: The engine runs extensions the user allowed: their dialogs go to the controller
    #: (:mod:`bridge.core.dialogs`), not answered ``cancelled`` as a seal diagnostic.
    dialogs: bool = False
    #: ``refusal(stderr)`` -> the words of a refusal when the engine exited during its
    #: start-up check saying so (a configuration a restart repeats: down at once, as when
    #: ``check`` refuses), else None (a crash, retried).
    refusal: Callable[[list[str]], str | None] | None = None
    #: Descriptors the engine process inherits besides its stdio (the sandbox's watch on
    #: the bridge: :data:`bridge.profiles.sandbox.WATCH`); ``cleanup`` closes them.
    pass_fds: tuple[int, ...] = ()
    #: ``settled(receipt)`` for each receipt of this launch's engine, as it is delivered: a
    #: named conversation takes its session back (:mod:`bridge.profiles.conversation`). It
    #: returns the blocking rest of that work (for a worker thread; it returns the journal
    #: note), or None.
    settled: Callable[[Receipt], Callable[[], dict[str, Any]] | None] | None = None
    #: Whatever the engine starts ends with it by the launch's own means (the confined Pi's PID
    #: namespace): it does not run under :mod:`bridge.live.reaper`. By default, whether the
    #: launch is confined (has a :attr:`confinement`).
    contained: bool = attrs.field(default=attrs.Factory(lambda self: self.confinement is not None, takes_self=True))
    #: The key endpoint the engine's model calls go through (:mod:`bridge.profiles.keyhold`), or None.
    endpoint: ModelGate | None = None
    #: A pool's clean-up between tenants (R13 of :mod:`bridge.core.pool`): puts the engine's
    #: private config folder back as it was at the start-up check (:mod:`bridge.live.tenants`, step 5).
    tenant_clean: Callable[[], None] | None = None

    def run_cleanup(self) -> None:
        if self.cleanup is not None:
            fn, self.cleanup = self.cleanup, None
            fn()


class EngineProfile(Protocol):
    name: str

    def prepare(self) -> Launch:
        """Create what one engine process needs; raise :class:`ProfileError` if it can't."""
        ...


#: Pi's ``clear_queue`` emits an empty ``queue_update`` before its response.
PI_CLEARING: tuple[str, ...] = ("clear_queue",)


@attrs.define
class CommandProfile:
    """Any engine speaking Pi's RPC JSONL, spawned from an argv (``-- ENGINE ARGV``).

    The environment is the bridge's own (or only the names in ``env_allowlist``),
    plus ``extra_env``. No start-up check: the engine is ready when spawned (the sealed
    Pi profile, :class:`bridge.profiles.pi.PiProfile`, asks ``get_state`` first).
    """

    argv: Sequence[str]
    clearing: tuple[str, ...] = PI_CLEARING
    cwd: str | None = None
    extra_env: dict[str, str] = attrs.field(factory=dict)
    env_allowlist: Sequence[str] | None = None
    #: Its extension dialogs go to the controller (:attr:`Launch.dialogs`).
    dialogs: bool = False
    name: str = "command"

    def prepare(self) -> Launch:
        if not self.argv:
            raise ProfileError("no engine command given after --")
        env = filtered_env(self.env_allowlist)
        env.update(self.extra_env)
        return Launch(
            argv=list(self.argv),
            env=env,
            cwd=self.cwd,
            clearing=self.clearing,
            header={"engine": "command", "argv": list(self.argv), **({"dialogs": True} if self.dialogs else {})},
            dialogs=self.dialogs,
        )


#: Environment names every engine gets even under an allowlist.
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")


def filtered_env(allowlist: Sequence[str] | None) -> dict[str, str]:
    """The bridge's environment, or only the allowlisted names (plus :data:`BASE_ENV`)."""
    if allowlist is None:
        return dict(os.environ)
    keep = set(allowlist) | set(BASE_ENV)
    return {k: v for k, v in os.environ.items() if k in keep}
