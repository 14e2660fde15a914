"""Issue 35, "lines not built unless needed": a line whose contents nothing reads is checked,
not built, at any size under the line limit (framing's module comment, ``JsonCheck``).

Each case runs in a fresh interpreter: a 60 MB line of small objects is fed in 64 KiB reads
through a :class:`~bridge.core.framing.LineSplitter` and a default
:class:`~bridge.core.session.Session` (what the live bridge does, no process), and the
interpreter's peak RSS (``VmHWM``) is read. Memory, not time: simdjson's buffers are C++
allocations ``tracemalloc`` cannot see, so RSS is measured. Built by orjson, such a line peaks
at ~1.9 GB.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PEAK_MAX_MB = 400

_SCRIPT = r"""
import sys
from bridge.core.framing import LineSplitter
from bridge.core.session import Session

head, want = sys.argv[1].encode(), sys.argv[2]
s = Session(("clear_queue",))
s.send({"type": "prompt", "id": "p", "message": "x"})
splitter = LineSplitter()
seen = []
chunk = b"{}," * 21845  # 64 KiB of small objects
for data in [head + b'"x":[', *[chunk] * (60_000_000 // len(chunk)), b'{}],"n":7}\n']:
    for item in s.observe_batch(splitter.feed(data)):
        seen.append((item.idx, getattr(item, "parsed", None)))
del splitter
assert s.observations == 1 and s.tracker.gap is None, (s.observations, s.tracker.gap)
(idx, parsed), = seen
if want != "-":
    assert parsed == {"type": want, "n": 7}, sorted(parsed)  # (keys: never a built line's repr)
for row in open("/proc/self/status"):
    if row.startswith("VmHWM:"):
        print(int(row.split()[1]) // 1024)
"""


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        ('{"type":"some_event",', "some_event"),  # a type nothing reads
        ('{"type":"agent_end",', "agent_end"),  # read for its type and top-level scalars only
        ('{"type":"message_update",', "-"),  # nobody streams it: checked, never parsed
    ],
)
def test_a_60_mb_line_nothing_reads_costs_under_400_mb(head: str, parsed: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, head, parsed], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split()[-1])
    assert peak < PEAK_MAX_MB, f"peak RSS {peak} MB"
