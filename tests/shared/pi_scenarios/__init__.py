"""Scenarios against the real, pinned Pi through the live bridge.

Used by ``tools/record`` (re-record ``fixtures/pi-1.6.0``; the tool for moving
the pin; with ``--matrix``, ``tools/pi_matrix.py``, every Pi version of the
table) and ``tests/test_pi_live.py`` / ``tests/test_pi_matrix.py`` (the same
scenarios as integration tests): shared by a tool and the suite, so it lives in
:mod:`tests.shared`. It runs from a checkout (the pinned install in
``tools/pi``, its extensions in ``tools/pi/extensions``). Each scenario is a small
async function that drives a live bridge on the real sealed Pi against the scripted
model server, plus a check that asserts what the pinned Pi is expected to do and
fails loudly (:class:`ScenarioError`) when it does something else.

What its users need is re-exported here, from:

- :mod:`~tests.shared.pi_scenarios.runner`: :class:`Scenario`, the registry
  :data:`SCENARIOS` and its :func:`scenario` decorator, :class:`Ctx` (what a body gets)
  and :func:`run` / :func:`run_sync`, which start a scenario's scripted model server,
  bridge and journal.
- :mod:`~tests.shared.pi_scenarios.outcome`: :class:`Outcome` (what a check gets) and
  :class:`ScenarioError`, :func:`expect`, :func:`known`.
- :mod:`~tests.shared.pi_scenarios.expects`: :func:`check_common` (what every scenario
  must show: one receipt per prompt, every engine stopped, the journal private, its replay
  agreeing with the live bridge) and the helpers the scenarios' checks share.
- :mod:`~tests.shared.pi_scenarios.sealed` and :mod:`~tests.shared.pi_scenarios.unsealed`:
  the scenarios with their checks, on a Pi only the bridge writes to, and on one that raw
  commands or extensions drive too.
- :mod:`~tests.shared.pi_scenarios.recordings`: :func:`sanitise` and
  :func:`expected_json` (a recording as committed), :func:`normal_form` and
  :func:`diff_forms` (as compared).

Importing the package defines every scenario: the sealed ones first, then the unsealed
(the import order below is :data:`SCENARIOS`' order, the order ``tools/record`` records in).
"""

from __future__ import annotations

from tests.shared.pi_scenarios.expects import (
    check_common,
    comparable_receipt,
    count_types,
    expect_overlaps,
    expect_receipt,
    first_index,
    live_vs_replay,
)
from tests.shared.pi_scenarios.outcome import OVERLAP_SIGNALS, Outcome, ScenarioError, expect, known
from tests.shared.pi_scenarios.recordings import diff_forms, expected_json, normal_form, sanitise
from tests.shared.pi_scenarios.runner import (
    BASE_CONFIG,
    EXTENSIONS,
    FIXTURES,
    ROOT,
    SCENARIOS,
    Ctx,
    Scenario,
    ScenarioBody,
    ScenarioCheck,
    load_model_server,
    run,
    run_sync,
    scenario,
)
from tests.shared.pi_scenarios.sealed import (
    EVENTS_COMMAND,
    EVENTS_REPLY,
    PLAIN_REPLY,
    PRICES,
    THINK_TEXT,
    TOOL_COMMAND,
    TOOL_REPLY,
)
from tests.shared.pi_scenarios.unsealed import (
    AUTORUN_TEXT,
    FOLLOW_TEXT,
    RAW_PROMPT,
    SLOW,
    STEER_TEXT,
    make_slow_text,
)

__all__ = [
    "AUTORUN_TEXT",
    "BASE_CONFIG",
    "EVENTS_COMMAND",
    "EVENTS_REPLY",
    "EXTENSIONS",
    "FIXTURES",
    "FOLLOW_TEXT",
    "OVERLAP_SIGNALS",
    "PLAIN_REPLY",
    "PRICES",
    "RAW_PROMPT",
    "ROOT",
    "SCENARIOS",
    "SLOW",
    "STEER_TEXT",
    "THINK_TEXT",
    "TOOL_COMMAND",
    "TOOL_REPLY",
    "Ctx",
    "Outcome",
    "Scenario",
    "ScenarioBody",
    "ScenarioCheck",
    "ScenarioError",
    "check_common",
    "comparable_receipt",
    "count_types",
    "diff_forms",
    "expect",
    "expect_overlaps",
    "expect_receipt",
    "expected_json",
    "first_index",
    "known",
    "live_vs_replay",
    "load_model_server",
    "make_slow_text",
    "normal_form",
    "run",
    "run_sync",
    "sanitise",
    "scenario",
]
