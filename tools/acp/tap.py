"""A wire tap for ACP tests: run an agent, relay stdin to it and its stdout back, and keep every
line both ways in a log, so a test can validate each message the agent wrote against the ACP
schema while a real client drives it.

Usage: python tools/acp/tap.py LOG -- AGENT ARGV...

LOG gets one JSON object per line: ``{"dir": "in" | "out", "line": TEXT}`` ("in": the client
to the agent; "out": the agent to the client), in the order the tap saw them. SIGTERM, SIGINT
and SIGHUP are passed on to the agent; the tap exits with the agent's status (128+N after
signal N). Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: tap.py LOG -- AGENT ARGV...", file=sys.stderr)
        return 2
    log_path, agent = argv[0], argv[2:]
    log = open(log_path, "a", encoding="utf-8")
    lock = threading.Lock()

    def keep(direction: str, line: bytes) -> None:
        with lock:
            log.write(json.dumps({"dir": direction, "line": line.decode("utf-8", "replace").rstrip("\n")}) + "\n")
            log.flush()

    child = subprocess.Popen(agent, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: child.send_signal(n))

    def to_agent() -> None:
        assert child.stdin is not None
        try:
            for line in sys.stdin.buffer:
                keep("in", line)
                child.stdin.write(line)
                child.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            child.stdin.close()
        except OSError:
            pass

    threading.Thread(target=to_agent, daemon=True).start()
    assert child.stdout is not None
    out = sys.stdout.buffer
    for line in child.stdout:
        keep("out", line)
        try:
            out.write(line)
            out.flush()
        except (BrokenPipeError, OSError):
            pass
    code = child.wait()
    log.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    # Not sys.exit: the stdin thread may be blocked in a read, holding stdin's lock, and the
    # interpreter's shutdown would then abort (SIGABRT) on it.
    os._exit(status)
