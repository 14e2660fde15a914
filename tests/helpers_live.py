"""Shared helpers for the live tests (real subprocesses over real pipes).

They live in ``tools/soaklib.py`` so that ``tools/soak`` uses the very same checks; this module
re-exports them for the tests (see that module's docstring for what each does).
"""

from __future__ import annotations

from tools.soaklib import (  # noqa: F401  (re-exported)
    FAKE,
    FAULT_RE,
    ROOT,
    STOP_PLANS,
    TRACKER_SIGNALS,
    SeededFakeProfile,
    SequenceProfile,
    ServeProc,
    check_receipt,
    collect_text,
    compare_journal,
    controller_action,
    fake_engine_argv,
    fast_config,
    faults_in_journal,
    generations_argv,
    kill_same,
    leaves,
    leftovers,
    orphan_engines,
    read_journal,
    same_process,
    sent_after_receipt,
    start_time,
    vm_hwm,
    wait_gone,
    wait_same_gone,
    zombie_children,
)
