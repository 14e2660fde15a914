// Seal-failure fixture: an extension that starts a run on its own.
// After the first prompt's run settles, it sends one user message of its own
// (pi.sendUserMessage), which starts a second run no bridge prompt asked for.
// Load with: pi ... --extension tools/pi/extensions/autorun.ts
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
  let fired = false;
  pi.on("agent_settled", async (_event, _ctx) => {
    if (fired) return;
    fired = true;
    // Work requested from agent_settled starts after all settled handlers finish.
    pi.sendUserMessage("autorun: a message the extension sent by itself");
  });
}
