"""``bridge models``: its parser and what it does (start the engine, ask it for its models,
print them)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from bridge.cli.options import (
    Subcommands,
    add_bridge_options,
    add_engine_options,
    bridge_config,
    engine_profile,
    guard_setup,
)

if TYPE_CHECKING:
    from bridge.profiles.command import EngineProfile


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "models",
        help="list the models the engine offers (provider, id, reasoning, context window)",
        usage="bridge models [OPTIONS] [-- ENGINE ARGV...]",
        description="Start the engine (sealed, as for run and serve), ask it for its models "
        "(get_available_models) and print them. Unlike run and serve, a --model Pi does not offer is not "
        "refused at start: the list is printed, and one line on stderr says the model is not in it. "
        "Exit 0; 1 when the engine cannot answer; 2 for bad usage or an engine that cannot be launched.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per model")
    add_engine_options(p, checks_model=False)
    add_bridge_options(p, journal_by_default=False, budgets=False)
    p.set_defaults(func=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    """``bridge models``: start the engine, ask it what it offers, print it. A ``--model`` that
    the start-up check of ``run`` and ``serve`` would refuse is not checked here (listing the
    ids is how a user finds the right one): one line on stderr says it is not among them."""
    import trio

    from bridge.profiles.pi import PiProfile

    profile = engine_profile(args, args.engine)
    if isinstance(profile, PiProfile):
        profile.check_model = False

    async def ask() -> list[dict[str, Any]] | str:
        """The models, or why the engine could not say. Ends when the engine answers or cannot
        (bounded by ``--ack-timeout``), and the bridge has closed."""
        from bridge.live.api import open_trio_bridge
        from bridge.live.steering import EngineQuestionError
        from bridge.profiles.command import ProfileError

        # A journal only when one is asked for: a question leaves nothing worth keeping.
        async with open_trio_bridge(
            profile, journal=args.journal or None, config=bridge_config(args), start_engine=False
        ) as bridge:
            try:
                return await bridge.models()
            except EngineQuestionError as e:
                if bridge.view().setup_failed:  # a mistake to fix, as in run: exit 2
                    raise ProfileError(f"the engine cannot be set up: {bridge.down_reason or e}") from e
                return str(e)

    models = guard_setup("models", lambda: trio.run(ask))
    if isinstance(models, int):
        return models
    if isinstance(models, str):
        print(f"bridge models: {models}", file=sys.stderr)
        return 1
    if not models:
        # Not an error of ours (exit 0), but an empty table says nothing: Pi offers a provider's
        # models once it has a key for it. The one line (a --model is then none of them).
        print(
            "bridge models: the engine offers no model: Pi lists a provider's models once it has its key "
            "(--api-key-env NAME, or a --models-json provider)",
            file=sys.stderr,
        )
        return 0
    if args.json:
        for m in models:
            print(json.dumps(m))
    elif models:
        print(f"{'provider':16} {'id':32} {'reasoning':9} {'context':>9}  name")
        for m in models:
            reasoning = "yes" if m.get("reasoning") else "no"
            print(
                f"{m['provider']!s:16} {m['id']!s:32} {reasoning:9} {m.get('contextWindow') or ''!s:>9}  "
                f"{m.get('name') or ''}"
            )
    _say_model_not_offered(args, profile, models)
    return 0


def _say_model_not_offered(args: argparse.Namespace, profile: EngineProfile, models: list[dict[str, Any]]) -> None:
    """One line on stderr when the sealed Pi's ``--model`` is none of ``models`` (seal rule 9)."""
    from bridge.profiles.pi import PiProfile
    from bridge.profiles.seal import model_matches

    if not isinstance(profile, PiProfile) or not args.model:
        return
    if any(model_matches(args.provider, args.model, m.get("provider"), m.get("id")) for m in models):
        return
    asked = f"--provider {args.provider} --model {args.model}" if args.provider else f"--model {args.model}"
    print(
        f"bridge models: {asked} is not one of these exact ids: bridge run and serve would refuse it at start",
        file=sys.stderr,
    )
