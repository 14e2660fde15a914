// An extension that asks before every bash call the model makes (a `confirm`
// dialog, from Pi's `tool_call` hook) and blocks the call unless the answer is
// yes; it reports the decision as a fire-and-forget notification. Used by the
// extension-dialog tests (tests/test_dialogs.py) and the docs' example (docs: guide/extension-dialogs.md).
// Load with: bridge serve --extension tools/pi/extensions/confirm_bash.ts
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash") return;
    const command = String((event.input as { command?: unknown }).command ?? "");
    const ok = await ctx.ui.confirm("Run this command?", command);
    ctx.ui.notify(ok ? `approved: ${command}` : `blocked: ${command}`, ok ? "info" : "warning");
    if (!ok) return { block: true, reason: "Blocked by the user" };
  });
}
