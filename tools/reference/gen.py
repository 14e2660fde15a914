"""Random transcript generator for differential testing of the tracker.

Produces transcript v1 files (SPEC §6) from a grammar of engine "episodes": a prompt and
its run in many variants (finished, failed, retried, overflow-compacted, aborted with and
without a stop, weird stop reasons, no user message, failure with no run, …), stray runs
and settles, clear_queue / steer commands with their queue_updates, framing hazards
(`recv_raw`, non-object `recv`), releases early and late, reused ids. Episodes are mostly
plausible; a per-transcript chaos level mutates them (drop, duplicate, swap, inject noise)
so that every overlap signal and every settle state turns up often, while clean
transcripts keep settlements frequent (the tracker settles nothing after an overlap or a gap).

Replay the output with ``node tools/reference/replay.mjs --batch`` (the seed tracker) and
with the bridge's own replay, and compare line by line.

    python tools/reference/gen.py --seed S --count N --out DIR [--steps K | --steps-range LO HI] [--coverage]

Stdlib only; deterministic for a given seed (file k uses ``random.Random(f"{seed}:{k}")``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys

DONE_STOPS = ["stop", "length", "toolUse"]
WEIRD_STOPS = ["deferred", "pending", "end_turn", "STOP", "", "max_tokens"]
NON_STRING_STOPS = [None, 7, ["stop"], {"reason": "stop"}]  # the seed reads these as "no stop reason"
ERRORS = [
    "529 overloaded",
    "429 Too Many Requests: rate limit exceeded",
    "Connection error.",
    "400 This model's maximum context length is 131072 tokens.",
    'No API key found for provider "scripted"',
]
RAW_LINES = [
    '{"type":"message_update","assistantMessageEvent":{"type":"text_del',
    "<oversize line: 67108865 bytes, over the 67108864-byte limit>",
    '{"type":"message_update","delta":"caf\ufffd\ufffd"}',
    "[1]",
    "42",
    "null",
    '"agent_settled"',
    "",
    "not json at all",
    '{"type":"agent_settled"}{"type":"agent_start"}',
]
NON_OBJECT_RECV = [[1], 42, None, "agent_start", [{"type": "agent_settled"}], True]
TEXTS = ["Hello!", "Done.", "line\u2028sep para\u2029sep nel\u0085end", "emoji \U0001f600 ok", "multi\nline", ""]
USAGE = {"input": 12, "output": 3, "totalTokens": 15}


class _Gen:
    def __init__(self, rng: random.Random, non_object_recv: bool):
        self.rng = rng
        self.non_object_recv = non_object_recv
        self.serial = 0
        self.used: list = []
        self.ts = 1764400000000
        # chaos: probability that an episode is mutated, and of noise lines.
        level = rng.choices(["clean", "low", "high"], [45, 35, 20])[0]
        self.p_mutate = {"clean": 0.0, "low": 0.08, "high": 0.35}[level]
        self.p_noise = {"clean": 0.0, "low": 0.01, "high": 0.05}[level]
        self.p_raw = {"clean": 0.0, "low": 0.004, "high": 0.03}[level]

    # ------------------------------------------------------------------ small parts
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def new_id(self, prefix: str = "p"):
        rng = self.rng
        if self.used and rng.random() < 0.1:
            return rng.choice(self.used)  # ids reused
        if rng.random() < 0.02:
            return None  # no id at all
        self.serial += 1
        rid = self.serial if rng.random() < 0.03 else f"{prefix}{self.serial}"
        self.used.append(rid)
        return rid

    def text(self) -> str:
        return self.rng.choice(TEXTS)

    def msg(self, role: str, stop=None, error=None, text=None):
        self.ts += 1
        m = {
            "role": role,
            "content": [{"type": "text", "text": self.text() if text is None else text}],
            "timestamp": self.ts,
        }
        if role == "assistant":
            m.update(api="openai-completions", provider="scripted", model="scripted-1", usage=USAGE)
            if stop is not _MISSING:
                m["stopReason"] = stop
            if error is not None:
                m["errorMessage"] = error
        return m

    def error_text(self) -> str:
        if self.chance(0.15):
            return "upstream: " + "x" * self.rng.randint(1990, 2600)
        return self.rng.choice(ERRORS)

    @staticmethod
    def ev(type_: str, **kw):
        return ("recv", {"type": type_, **kw})

    @staticmethod
    def send(obj):
        return ("send", obj)

    def cmd(self, type_: str, cid, **kw):
        o = {"type": type_, **kw}
        if cid is not None:
            o["id"] = cid
        return ("send", o)

    def response(self, rid, command, success=True, **kw):
        o = {"type": "response", "command": command, "success": success, **kw}
        if rid is not None:
            o["id"] = rid
        return ("recv", o)

    def user(self):
        m = self.msg("user")
        return [self.ev("message_start", message=m), self.ev("message_end", message=m)]

    def assistant(self, stop, error=None):
        final = self.msg("assistant", stop, error)
        out = [self.ev("message_start", message=dict(final, content=[], stopReason="pending"))]
        if self.chance(0.5):
            out.append(
                self.ev(
                    "message_update",
                    usage=USAGE,
                    assistantMessageEvent={"type": "text_delta", "contentIndex": 0, "delta": "He"},
                )
            )
        out.append(self.ev("message_end", message=final))
        out.append(self.ev("turn_end", message=final, toolResults=[]))
        return out

    def tool_turn(self):
        final = self.msg("assistant", "toolUse")
        final["content"].append({"type": "toolCall", "id": "call_1", "name": "bash", "arguments": {"command": "ls"}})
        return [
            self.ev("turn_start"),
            self.ev("message_start", message=dict(final, content=[], stopReason="pending")),
            self.ev("message_end", message=final),
            self.ev("tool_execution_start", toolCallId="call_1", toolName="bash", args={"command": "ls"}),
            self.ev("tool_execution_end", toolCallId="call_1", toolName="bash", result={"content": []}, isError=False),
            self.ev("turn_end", message=final, toolResults=[]),
        ]

    def noise(self):
        rng = self.rng
        k = rng.randrange(9)
        if k == 0:
            return ("stderr", "debug: something on stderr")
        if k == 1:
            return ("note", "generated noise")
        if k == 2:
            return self.ev(
                rng.choice(
                    ["turn_start", "message_update", "tool_execution_update", "extension_ui_request", "auto_retry_end"]
                )
            )
        if k == 3:
            return self.response(None, "parse", False, error="Failed to parse command")
        if k == 4:
            return self.ev("message_start", message={"role": rng.choice(["assistant", "toolResult", "custom"])})
        if k == 5:
            return self.ev("message_end", message={"role": "user"})
        if k == 6:
            return self.ev("queue_update", steering=[], followUp=rng.choice([[], ["later"]]))
        if k == 7:
            return self.ev(rng.choice(["agent_start", "agent_end", "agent_settled"]))
        return self.ev("message_end", message=self.msg("assistant", rng.choice(DONE_STOPS + ["error", "aborted"])))

    def hazard(self):
        if self.non_object_recv and self.chance(0.3):
            return ("recv", self.rng.choice(NON_OBJECT_RECV))
        return ("recv_raw", self.rng.choice(RAW_LINES))

    # ------------------------------------------------------------------ the run grammar
    RUN_KINDS = {
        "finished": 30,
        "tools": 8,
        "error": 10,
        "retry": 6,
        "overflow": 4,
        "abort_linked": 8,
        "abort_unlinked_later": 2,
        "abort_in_backoff": 2,
        "abort_without_stop": 4,
        "weird_stop": 4,
        "non_string_stop": 2,
        "no_assistant": 3,
        "no_user": 3,
        "failure_no_run": 4,
        "settle_no_start": 2,
        "open_start_settle": 2,
        "second_user": 2,
        "queue_items": 3,
        "queue_empty": 2,
        "no_run": 2,
        "truncated": 2,
        "start_before_ack": 2,
        "settle_before_ack": 1,
    }

    def run(self, kind: str, r):
        """Events from the ack on (the ack included), for one prompt's run."""
        rng = self.rng
        ack = [self.response(r, "prompt", data={"disposition": "started"})]
        start, settle = [self.ev("agent_start"), self.ev("turn_start")], [self.ev("agent_settled", aborted=False)]
        end = [self.ev("agent_end", messages=[], willRetry=False)]
        if kind == "finished":
            return ack + start + self.user() + self.assistant(rng.choice(DONE_STOPS)) + end + settle
        if kind == "tools":
            body = (
                self.user()
                + self.tool_turn()
                + [self.ev("turn_start")]
                + self.assistant(rng.choice(DONE_STOPS + ["error"]))
            )
            return ack + start + body + end + settle
        if kind == "error":
            return ack + start + self.user() + self.assistant("error", self.error_text()) + end + settle
        if kind == "retry":
            first = (
                self.user()
                + self.assistant("error", "529 overloaded")
                + [self.ev("agent_end", messages=[], willRetry=True)]
            )
            first.append(
                self.ev("auto_retry_start", attempt=1, maxAttempts=3, delayMs=2000, errorMessage="529 overloaded")
            )
            again = start + self.assistant(rng.choice(DONE_STOPS + ["error"])) + end
            return ack + start + first + again + [self.ev("auto_retry_end", success=True, attempt=1)] + settle
        if kind == "overflow":
            first = self.user() + self.assistant("error", ERRORS[3]) + end
            comp = [
                self.ev("compaction_start", reason="overflow"),
                self.ev("compaction_end", reason="overflow", aborted=False, willRetry=True),
            ]
            return ack + start + first + comp + start + self.assistant("stop") + end + settle
        if kind in ("abort_linked", "abort_unlinked_later"):
            s = self.new_id("s")
            body = self.user() + [self.cmd("abort", s)] + self.assistant("aborted", "Request was aborted.") + end
            if kind == "abort_unlinked_later":
                body.append(self.cmd("abort", None))
            return ack + start + body + [self.ev("agent_settled", aborted=True), self.response(s, "abort")]
        if kind == "abort_in_backoff":
            s = self.new_id("s")
            body = (
                self.user()
                + self.assistant("error", "529 overloaded")
                + [self.ev("agent_end", messages=[], willRetry=True)]
            )
            body += [self.cmd("abort", s), self.ev("agent_settled", aborted=True), self.response(s, "abort")]
            return ack + start + body
        if kind == "abort_without_stop":
            return (
                ack
                + start
                + self.user()
                + self.assistant("aborted", "Request was aborted.")
                + end
                + [self.ev("agent_settled", aborted=True)]
            )
        if kind == "weird_stop":
            return ack + start + self.user() + self.assistant(rng.choice(WEIRD_STOPS)) + end + settle
        if kind == "non_string_stop":
            stop = rng.choice(NON_STRING_STOPS + [_MISSING])
            return ack + start + self.user() + self.assistant(stop) + end + settle
        if kind == "no_assistant":
            return ack + start + self.user() + end + settle
        if kind == "no_user":
            return ack + start + self.assistant(rng.choice(DONE_STOPS + ["error"])) + end + settle
        if kind == "failure_no_run":
            m = self.msg("assistant", rng.choice(["error", "error", "aborted"]), self.error_text())
            return ack + [self.ev("message_end", message=m)] + settle
        if kind == "settle_no_start":
            return ack + settle
        if kind == "open_start_settle":
            return ack + start + self.user() + self.assistant("stop") + settle + end + settle
        if kind == "second_user":
            return (
                ack
                + start
                + self.user()
                + self.assistant("stop")
                + [self.ev("turn_start")]
                + self.user()
                + self.assistant("stop")
                + end
                + settle
            )
        if kind == "queue_items":
            q = [self.ev("queue_update", steering=["steer me"] if self.chance(0.5) else [], followUp=["and then"])]
            return ack + start + self.user() + q + self.assistant("stop") + end + settle
        if kind == "queue_empty":
            return (
                ack
                + start
                + self.user()
                + [self.ev("queue_update", steering=[], followUp=[])]
                + self.assistant("stop")
                + end
                + settle
            )
        if kind == "no_run":
            return ack
        if kind == "truncated":
            return ack + start + self.user()[: rng.randint(0, 2)]
        if kind == "start_before_ack":
            return start + self.user() + ack + self.assistant("stop") + end + settle
        if kind == "settle_before_ack":
            return settle + ack + start + self.user() + self.assistant("stop") + end + settle
        raise AssertionError(kind)

    # ------------------------------------------------------------------ episodes
    EPISODES = {"prompt": 70, "stray_run": 4, "stray_settle": 2, "clear": 8, "steer": 3, "hazard": 2, "noise": 3}

    def episode(self):
        rng = self.rng
        kind = rng.choices(list(self.EPISODES), list(self.EPISODES.values()))[0]
        if kind == "prompt":
            r = self.new_id()
            out = [self.cmd("prompt", r, message=self.text())]
            k = rng.random()
            if k < 0.05:  # rejected by the engine
                return out + [self.response(r, "prompt", False, error="Agent is already processing."), ("release", r)]
            if k < 0.08:  # an ack that is not this slot's (wrong id, no id, other command, other disposition)
                bad = rng.choice(
                    [
                        self.response(
                            rng.choice(self.used) if self.used else "zz", "prompt", data={"disposition": "started"}
                        ),
                        self.response(None, "prompt", data={"disposition": "started"}),
                        self.response(r, "steer"),
                        self.response(r, "prompt", data={"disposition": rng.choice(["queued", "handled"])}),
                    ]
                )
                out.append(bad)
            run_kind = rng.choices(list(self.RUN_KINDS), list(self.RUN_KINDS.values()))[0]
            body = self.run(run_kind, r)
            if rng.random() < 0.04:  # duplicate ack
                body.insert(
                    1,
                    body[0]
                    if body and body[0][0] == "recv"
                    else self.response(r, "prompt", data={"disposition": "started"}),
                )
            out += body
            if run_kind == "truncated":
                return out + [("__end__", None)]
            k = rng.random()
            if k < 0.06:  # a run the slot did not ask for, right after its settle
                out += (
                    [self.ev("agent_start")]
                    + self.user()
                    + self.assistant("stop")
                    + [self.ev("agent_end", willRetry=False), self.ev("agent_settled", aborted=False)]
                )
            elif k < 0.10:
                out.append(self.ev("agent_settled", aborted=False))
            elif k < 0.15 and len(out) > 3:  # released mid-run (gave up)
                out.insert(rng.randint(2, len(out) - 1), ("release", r))
                return out
            elif k < 0.19:  # never released: the next prompt re-attaches
                return out
            return out + [("release", r if rng.random() > 0.05 else self.new_id())]
        if kind == "stray_run":
            body = [self.ev("agent_start")] + self.user() + self.assistant(rng.choice(DONE_STOPS))
            return body + [self.ev("agent_end", willRetry=False), self.ev("agent_settled", aborted=False)]
        if kind == "stray_settle":
            return [self.ev("agent_settled", aborted=False)]
        if kind == "clear":
            c = self.new_id("c")
            out = [self.cmd("clear_queue", c)]
            if rng.random() < 0.7:
                out.append(self.ev("queue_update", steering=[], followUp=[]))
            k = rng.random()
            if k < 0.85:
                out.append(self.response(c, "clear_queue", data={"steering": [], "followUp": []}))
            elif k < 0.92:
                out.append(self.response(c, "abort"))  # same id, other command: does not close the window
            # else: never answered; the window stays open
            if rng.random() < 0.3:
                out.append(self.ev("queue_update", steering=[], followUp=[]))
            return out
        if kind == "steer":
            c = self.new_id("st")
            return [
                self.cmd("steer", c, message="change course"),
                self.ev("queue_update", steering=["change course"], followUp=[]),
                self.response(c, "steer"),
            ]
        if kind == "hazard":
            return [self.hazard()]
        return [self.noise()]

    def mutate(self, entries):
        rng = self.rng
        out = list(entries)
        for _ in range(rng.randint(1, 3)):
            if not out:
                break
            j = rng.randrange(len(out))
            op = rng.randrange(4)
            if op == 0:
                del out[j]
            elif op == 1:
                out.insert(j, out[j])
            elif op == 2 and j + 1 < len(out):
                out[j], out[j + 1] = out[j + 1], out[j]
            else:
                out.insert(j, self.noise())
        return out

    def entries(self, n_steps: int):
        out = []
        while len(out) < n_steps:
            ep = self.episode()
            if self.p_mutate and self.chance(self.p_mutate):
                ep = self.mutate(ep)
            for e in ep:
                if e[0] == "__end__":
                    return out[:n_steps]
                if self.p_noise and self.chance(self.p_noise):
                    out.append(self.noise())
                if self.p_raw and self.chance(self.p_raw):
                    out.append(self.hazard())
                out.append(e)
        return out[:n_steps]


_MISSING = object()


def generate(rng: random.Random, n_steps: int, *, non_object_recv: bool = True) -> list[str]:
    """Transcript lines (no trailing newlines), header first, then `n_steps` entries.

    `non_object_recv=False` keeps framing hazards as `recv_raw` only (a `recv` whose value is
    not an object is outside SPEC §6 strictly; the reference runner treats it as a gap).
    """
    g = _Gen(rng, non_object_recv)
    header = {"transcript": "pi-bridge", "version": 1, "engine": "gen.py"}
    clearing = rng.choices([["clear_queue"], None, ["clear_queue", "new_session"]], [80, 10, 10])[0]
    if clearing is not None:
        header["clearing"] = clearing
    with_t, with_i = rng.random() < 0.5, rng.random() < 0.5
    ascii_only = rng.random() < 0.3
    lines = [json.dumps(header)]
    t, idx = 0.0, 0
    for kind, value in g.entries(n_steps):
        e = {kind: value}
        if kind in ("recv", "recv_raw"):
            idx += 1
            if with_i:
                e["i"] = idx
        if with_t:
            t += rng.random() * 0.05
            e["t"] = round(t, 4)
        lines.append(json.dumps(e, ensure_ascii=ascii_only, separators=(",", ":")))
    return lines


def write_many(
    seed: str, count: int, out_dir: str, steps: int | None = None, steps_range: tuple[int, int] = (4, 140)
) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for k in range(count):
        rng = random.Random(f"{seed}:{k}")
        n = steps if steps is not None else rng.randint(*steps_range)
        path = os.path.join(out_dir, f"gen_{seed}_{k:05d}.jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(generate(rng, n)) + "\n")
        paths.append(path)
    return paths


def coverage(paths: list[str]) -> collections.Counter:
    """Replay `paths` through the reference runner (node) and count signals and settle states."""
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay.mjs")
    proc = subprocess.run(
        ["node", runner, "--batch"], input=json.dumps(paths), capture_output=True, text=True, check=True
    )
    counts: collections.Counter = collections.Counter()
    for line in proc.stdout.splitlines():
        o = json.loads(line)
        if "error" in o:
            counts[("error", o["error"])] += 1
            continue
        for ov in o["overlaps"]:
            counts[("overlap", ov["signal"], ov.get("why") or ov.get("cause") or "")] += 1
        for s in o["settled"]:
            counts[("settled", s["state"], s["reason"] or "")] += 1
        counts[("working", "", "")] += len(o["working"])
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", default="0")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=None, help="entries per transcript (default: random 4..140)")
    ap.add_argument(
        "--steps-range",
        type=int,
        nargs=2,
        default=(4, 140),
        metavar=("LO", "HI"),
        help="entries per transcript: random in LO..HI (default 4 140)",
    )
    ap.add_argument(
        "--coverage", action="store_true", help="replay with the reference runner and print a coverage table"
    )
    args = ap.parse_args(argv)
    paths = write_many(args.seed, args.count, args.out, args.steps, tuple(args.steps_range))
    print(f"wrote {len(paths)} transcripts to {args.out}", file=sys.stderr)
    if args.coverage:
        for key, n in sorted(coverage(paths).items()):
            print(f"{n:7d}  {' / '.join(str(k) for k in key if k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
