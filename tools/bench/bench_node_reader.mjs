// Pi's own JSONL reader, for tools/bench/bench: the same bytes through the logic Pi 1.6.0 uses.
//
// attachJsonlLineReader is copied verbatim from the pinned package,
// tools/pi/node_modules/@earendil-works/pi-coding-agent/dist/modes/rpc/jsonl.js (LF-only split on a
// StringDecoder'd string buffer, CR stripped), and handleLine from RpcClient.handleLine in
// dist/modes/rpc/rpc-client.js (JSON.parse per line; a response with a pending id resolves that
// request, anything else goes to a snapshot of the event listeners; non-JSON lines ignored).
// The one listener here counts events and, on an agent_settled line carrying `benchM` (the
// engine's CLOCK_MONOTONIC when it wrote the line), records the settle latency.
//
// Modes (the result is one JSON object on stdout):
//   node bench_node_reader.mjs stdin
//       read the engine's stdout piped into our stdin; prints "ready" first, then reads to EOF.
//   node bench_node_reader.mjs spawn N [PROMPTS] -- ENGINE ARGV...
//       like N RpcClients in one process: spawn N engines, wait for each one's get_state answer,
//       then send every engine a prompt at once and read all streams; each engine gets its next
//       prompt when its run settles, PROMPTS (default 1) in all.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";

// ---- verbatim from dist/modes/rpc/jsonl.js -----------------------------------------------------
function attachJsonlLineReader(stream, onLine) {
    const decoder = new StringDecoder("utf8");
    let buffer = "";
    const emitLine = (line) => {
        onLine(line.endsWith("\r") ? line.slice(0, -1) : line);
    };
    const onData = (chunk) => {
        buffer += typeof chunk === "string" ? chunk : decoder.write(chunk);
        while (true) {
            const newlineIndex = buffer.indexOf("\n");
            if (newlineIndex === -1) {
                return;
            }
            emitLine(buffer.slice(0, newlineIndex));
            buffer = buffer.slice(newlineIndex + 1);
        }
    };
    const onEnd = () => {
        buffer += decoder.end();
        if (buffer.length > 0) {
            emitLine(buffer);
            buffer = "";
        }
    };
    stream.on("data", onData);
    stream.on("end", onEnd);
    return () => {
        stream.off("data", onData);
        stream.off("end", onEnd);
    };
}
// -------------------------------------------------------------------------------------------------

const nowSec = () => (performance.timeOrigin + performance.now()) / 1000;
// CLOCK_MONOTONIC (libuv's hrtime), the clock the engine's benchM is on: settle latency.
const monoSec = () => Number(process.hrtime.bigint()) / 1e9;

class Client {
    // The parts of RpcClient the reading path touches.
    constructor() {
        this.eventListeners = [];
        this.pendingRequests = new Map();
        this.lines = 0;
        this.bytes = 0;
        this.settled = [];
    }
    // ---- verbatim logic of RpcClient.handleLine ----
    handleLine(line) {
        try {
            const data = JSON.parse(line);
            // Check if it's a response to a pending request
            if (data.type === "response" && data.id && this.pendingRequests.has(data.id)) {
                const pending = this.pendingRequests.get(data.id);
                this.pendingRequests.delete(data.id);
                pending.resolve(data);
                return;
            }
            // Otherwise it's an event. Iterate a snapshot so listeners that unsubscribe during dispatch
            // do not cause later listeners to miss this event.
            for (const listener of [...this.eventListeners]) {
                listener(data);
            }
        }
        catch {
            // Ignore non-JSON lines
        }
    }
    attach(stream) {
        stream.on("data", (chunk) => { this.bytes += chunk.length; });
        attachJsonlLineReader(stream, (line) => { this.lines += 1; this.handleLine(line); });
    }
    request(write, cmd) {
        return new Promise((resolve) => {
            this.pendingRequests.set(cmd.id, { resolve });
            write(JSON.stringify(cmd) + "\n");
        });
    }
}

function onSettled(client, fn) {
    client.eventListeners.push((event) => {
        if (event.type === "agent_settled") {
            const t = nowSec();
            const m = monoSec();
            client.settled.push({ t, latency: typeof event.benchM === "number" ? m - event.benchM : null });
            fn(t);
        }
    });
}

// Peak RSS of this process image: VmHWM, not getrusage's maxRSS (Linux carries that one
// across fork + exec, so it would report the spawning controller's peak).
function peakRssKb() {
    try {
        const m = /VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"));
        if (m) return Number(m[1]);
    } catch {}
    return process.resourceUsage().maxRSS;
}

function usage(cpu0) {
    const cpu = process.cpuUsage(cpu0);
    return { cpu: (cpu.user + cpu.system) / 1e6, maxrss_kb: peakRssKb() };
}

async function modeStdin() {
    const client = new Client();
    onSettled(client, () => {});
    const cpu0 = process.cpuUsage();
    process.stdin.on("end", () => {
        const tEnd = nowSec();
        const u = usage(cpu0);
        process.stdout.write(JSON.stringify({
            t_end: tEnd, bytes: client.bytes, lines: client.lines, ...u,
            latency: client.settled.length ? client.settled[client.settled.length - 1].latency : null,
            node: process.version,
        }) + "\n");
    });
    client.attach(process.stdin);
    process.stdout.write("ready\n");
}

async function modeSpawn(n, prompts, argv) {
    const engines = [];
    for (let k = 0; k < n; k++) {
        const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "ignore"] });
        const client = new Client();
        client.attach(child.stdout);
        engines.push({ child, client, write: (s) => child.stdin.write(s) });
    }
    // The engine answers get_state once its stream is loaded.
    await Promise.all(engines.map((e, k) => e.client.request(e.write, { id: `g${k}`, type: "get_state" })));
    let left = n;
    let finish;
    const allDone = new Promise((resolve) => { finish = resolve; });
    const b0 = engines.map((e) => e.client.bytes);
    const l0 = engines.map((e) => e.client.lines);
    const tEnds = engines.map(() => []);
    const send = (e, k, j) => e.write(JSON.stringify({ id: `go${k}-${j}`, type: "prompt", message: "go" }) + "\n");
    engines.forEach((e, k) => onSettled(e.client, (t) => {
        tEnds[k].push(t);
        if (tEnds[k].length < prompts) send(e, k, tEnds[k].length);
        else if (--left === 0) finish();
    }));
    const cpu0 = process.cpuUsage();
    const t0 = nowSec();
    engines.forEach((e, k) => send(e, k, 0));
    await allDone;
    const u = usage(cpu0);
    const per = engines.map((e, k) => ({
        t_ends: tEnds[k], t_end: tEnds[k][tEnds[k].length - 1], bytes: e.client.bytes - b0[k],
        lines: e.client.lines - l0[k], latencies: e.client.settled.map((s) => s.latency),
    }));
    process.stdout.write(JSON.stringify({ t0, ...u, engines: per, node: process.version }) + "\n");
    for (const e of engines) e.child.stdin.end();
    await Promise.all(engines.map((e) => new Promise((resolve) => {
        if (e.child.exitCode !== null || e.child.signalCode !== null) resolve();
        else e.child.on("exit", resolve);
    })));
}

const args = process.argv.slice(2);
if (args[0] === "stdin") {
    await modeStdin();
} else if (args[0] === "spawn") {
    const sep = args.indexOf("--");
    await modeSpawn(Number(args[1]), Number(args[2] ?? 1), args.slice(sep + 1));
} else {
    process.stderr.write("usage: bench_node_reader.mjs stdin | spawn N [PROMPTS] -- ENGINE ARGV...\n");
    process.exit(2);
}
