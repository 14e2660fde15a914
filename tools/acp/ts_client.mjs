// An ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk, pinned in
// package.json + package-lock.json here), as its README names the client side of 2.x:
// client({name}) with onNotification / onRequest handlers, connectWith(ndJsonStream(...)),
// ctx.request(methods.agent...) and ctx.notify(methods.agent.session.cancel).
//
// Usage: node ts_client.mjs PLAN_JSON
//   PLAN_JSON: {"agent": [argv...], "env"?: {...}, "cwd": DIR,
//               "prompts": [{"text": T, "cancelAfterChunks"?: N, "timeoutMs"?: MS,
//                            "killEngineAfterChunks"?: N, "killEngineBefore"?: true}, ...]}
//   "close"?: true -- then session/close, and one more prompt to the closed session.
//   "load"?: SESSION_ID -- instead of session/new: session/list (cwd), then session/load of that
//   session (the updates it replays kept as loadUpdates), and the prompts go to it.
//   (timeoutMs: stop waiting for that answer after MS and record "timedOut"; killEngine...: SIGKILL
//   the Pi process under the agent -- a descendant running cli.js --mode rpc, or titled "pi" -- after N
//   message chunks of that prompt, or before sending it, and wait a second.)
// It starts the agent, initializes, tries a session with an MCP server (expecting a refusal),
// opens a session, sends each prompt in turn (cancelling one after N message chunks when asked),
// and prints one JSON object: what every request answered and the updates each prompt got.
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream, RequestError, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const plan = JSON.parse(process.argv[2]);
const agent = spawn(plan.agent[0], plan.agent.slice(1), {
  stdio: ["pipe", "pipe", "inherit"],
  env: { ...process.env, ...(plan.env ?? {}) },
});
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

let updates = [];
let onUpdate = () => {};
const app = client({ name: "pi-bridge-ts-test" }).onNotification(methods.client.session.update, (cx) => {
  updates.push(cx.params.update);
  onUpdate();
});

function killEngine() {
  const parent = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {}
  }
  const under = (pid) => {
    for (let p = pid; p > 1; p = parent.get(p) ?? 0) if (p === agent.pid) return true;
    return false;
  };
  const killed = [];
  for (const pid of parent.keys()) {
    if (pid === agent.pid || !under(pid)) continue;
    let argv = [];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {}
    // Pi sets its process title to "pi" (the argv then reads "pi" and blanks).
    if ((argv.some((a) => a.endsWith("cli.js")) && argv.includes("rpc")) || argv[0] === "pi") {
      process.kill(pid, "SIGKILL");
      killed.push(pid);
    }
  }
  return killed;
}

function failure(e) {
  if (e instanceof RequestError) return { code: e.code, message: e.message, data: e.data ?? null };
  return { code: null, message: String(e), data: null };
}

const out = { protocolVersion: PROTOCOL_VERSION };
await app.connectWith(stream, async (ctx) => {
  out.initialize = await ctx.request(methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "pi-bridge-ts-test", version: "1" },
  });
  try {
    await ctx.request(methods.agent.session.new, {
      cwd: plan.cwd,
      mcpServers: [{ name: "files", command: "/bin/true", args: [], env: [] }],
    });
    out.mcp = { refused: false };
  } catch (e) {
    out.mcp = { refused: true, ...failure(e) };
  }
  let session;
  if (plan.load) {
    out.list = await ctx.request(methods.agent.session.list, { cwd: plan.cwd });
    updates = [];
    out.load = await ctx.request(methods.agent.session.load, { sessionId: plan.load, cwd: plan.cwd, mcpServers: [] });
    out.loadUpdates = updates;
    session = { sessionId: plan.load };
  } else {
    session = await ctx.request(methods.agent.session.new, { cwd: plan.cwd, mcpServers: [] });
  }
  out.session = session;
  out.prompts = [];
  for (const p of plan.prompts) {
    updates = [];
    let cancelled = false;
    const entry = {};
    if (p.killEngineBefore) {
      entry.killed = killEngine();
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    if (p.killEngineAfterChunks) {
      onUpdate = () => {
        const chunks = updates.filter((u) => u.sessionUpdate === "agent_message_chunk").length;
        if (!entry.killed && chunks >= p.killEngineAfterChunks) entry.killed = killEngine();
      };
    } else if (p.cancelAfterChunks) {
      onUpdate = () => {
        const chunks = updates.filter((u) => u.sessionUpdate === "agent_message_chunk").length;
        if (!cancelled && chunks >= p.cancelAfterChunks) {
          cancelled = true;
          ctx.notify(methods.agent.session.cancel, { sessionId: session.sessionId });
        }
      };
    } else {
      onUpdate = () => {};
    }
    const started = Date.now();
    const answer = ctx
      .request(methods.agent.session.prompt, { sessionId: session.sessionId, prompt: [{ type: "text", text: p.text }] })
      .then(
        (response) => ({ response }),
        (e) => ({ error: failure(e) }),
      );
    const timer = new Promise((resolve) => {
      if (p.timeoutMs) setTimeout(() => resolve({ timedOut: true }), p.timeoutMs).unref();
    });
    Object.assign(entry, await Promise.race([answer, timer]));
    entry.seconds = (Date.now() - started) / 1000;
    entry.cancelSent = cancelled;
    entry.updates = updates;
    out.prompts.push(entry);
  }
  if (plan.close) {
    out.close = await ctx.request(methods.agent.session.close, { sessionId: session.sessionId });
    try {
      await ctx.request(methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: "Anyone?" }],
      });
      out.afterClose = { refused: false };
    } catch (e) {
      out.afterClose = { refused: true, ...failure(e) };
    }
  }
});
agent.stdin.end();
const exited = new Promise((resolve) => agent.on("exit", (c, sig) => resolve(c ?? sig)));
const late = new Promise((resolve) => setTimeout(() => resolve("no exit within 10 s after stdin EOF"), 10000).unref());
out.agentExit = await Promise.race([exited, late]);
if (typeof out.agentExit === "string") agent.kill("SIGKILL");
process.stdout.write(JSON.stringify(out) + "\n");
