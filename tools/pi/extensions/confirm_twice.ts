// An extension that asks two `confirm` dialogs, one after the other, before each
// bash call the model makes (a command and then a second "are you sure?"), and
// blocks the call unless both answers are yes. When the prompt is stopped while
// the first is asked, the stop's `cancelled` lets the hook go on to the second
// before Pi's abort lands (the abort frees neither). Used by tests/test_acp.py.
// Load with: bridge acp --extension tools/pi/extensions/confirm_twice.ts
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return;
    const command = String((event.input as { command?: unknown }).command ?? "");
    const first = await ctx.ui.confirm("Run this command?", command);
    const second = await ctx.ui.confirm("Are you sure?", command);
    if (!(first && second)) return { block: true, reason: "Blocked by the user" };
  });
}
