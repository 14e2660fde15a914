// An ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk, pinned in
// package.json + package-lock.json here), as its README names the client side of 2.x:
// client({name}) with onNotification / onRequest handlers, connectWith(ndJsonStream(...)),
// ctx.request(methods.agent...) and ctx.notify(methods.agent.session.cancel).
//
// Usage: node ts_client.mjs PLAN_JSON
//   PLAN_JSON: {"agent": [argv...], "cwd": DIR, "prompts": [{"text": T, "cancelAfterChunks"?: N}, ...]}
// It starts the agent, initializes, tries a session with an MCP server (expecting a refusal),
// opens a session, sends each prompt in turn (cancelling one after N message chunks when asked),
// and prints one JSON object: what every request answered and the updates each prompt got.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream, RequestError, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const plan = JSON.parse(process.argv[2]);
const agent = spawn(plan.agent[0], plan.agent.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

let updates = [];
let onUpdate = () => {};
const app = client({ name: "pi-bridge-ts-test" }).onNotification(methods.client.session.update, (cx) => {
  updates.push(cx.params.update);
  onUpdate();
});

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
  const session = await ctx.request(methods.agent.session.new, { cwd: plan.cwd, mcpServers: [] });
  out.session = session;
  out.prompts = [];
  for (const p of plan.prompts) {
    updates = [];
    let cancelled = false;
    if (p.cancelAfterChunks) {
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
    const entry = {};
    try {
      entry.response = await ctx.request(methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: p.text }],
      });
    } catch (e) {
      entry.error = failure(e);
    }
    entry.cancelSent = cancelled;
    entry.updates = updates;
    out.prompts.push(entry);
  }
});
agent.stdin.end();
const code = await new Promise((resolve) => agent.on("exit", (c, s) => resolve(c ?? 128)));
out.agentExit = code;
process.stdout.write(JSON.stringify(out) + "\n");
