// Seal-failure fixture: an extension that opens a `select` dialog before each
// run starts (before_agent_start), sends a notification, and registers a
// command (so get_commands is not empty).
// Load with: pi ... --extension tools/pi/extensions/select_dialog.ts
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
  pi.on("before_agent_start", async (_event, ctx) => {
    const choice = await ctx.ui.select("Pick a colour", ["red", "green"]);
    ctx.ui.notify(`picked ${choice ?? "nothing"}`, "info");
  });

  pi.registerCommand("pick", {
    description: "Open a select dialog",
    handler: async (_args, ctx) => {
      const choice = await ctx.ui.select("Pick via command", ["one", "two"]);
      ctx.ui.notify(`command picked ${choice ?? "nothing"}`, "info");
    },
  });
}
