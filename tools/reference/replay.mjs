#!/usr/bin/env node
// Reference replay: the seed tracker (`turns.mjs`, seed 003) driven by SPEC §4
// over transcript v1 files (SPEC §6). A differential oracle for bridge/tracker:
// its output is the tracker's own `overlaps` / `working` / `settled`, nothing
// bridge-level (no receipts).
//
//   node tools/reference/replay.mjs [--seed SEED] [SEED] TRANSCRIPT...
//   node tools/reference/replay.mjs [--seed SEED] [SEED] --batch  < paths.json
//   node tools/reference/replay.mjs [--seed SEED] --check TRANSCRIPT.jsonl...
//
// --check compares the tracker keys of each NAME.expected.json (written by
// `bridge replay --json`) with the seed's own output and prints one line per
// file (exit status 1 if any differs).
//
// The seed defaults to $PI_BRIDGE_SEED, else ../shared/seeds/003_759e674e4a12ce5b.txt
// relative to the repo root. A first positional argument whose first line is not
// a transcript header is taken as the seed (the seed's first line is a path).
// The seed file is loaded at run time: line 1 stripped, the rest written to a
// temporary .mjs and imported. Nothing of it is copied into the repository.
//
// Output, one line per transcript:
//   {"observations":N,"overlaps":[...],"working":[...],"settled":[...]}
// With --batch, stdin is a JSON array of paths and a transcript that fails to
// read gives {"path":P,"error":MSG} on its line instead; without --batch the
// same line is printed, the error also goes to stderr and the exit status is 2.
//
// Driving rules (SPEC §4), with `stop` held by the driver:
//   send prompt id R          -> tracker.attach({request: R})
//   send abort id S           -> stop = S ?? null   (stopLink() returns stop)
//   send type in `clearing`   -> clearWindow += 1, (type, id) pending; the
//                                recv response with that id (and command, if
//                                present, equal to the type) -> clearWindow -= 1
//   release R                 -> tracker.release() if a slot is held; stop = null
//   recv / recv_raw           -> idx = tracker.read() first ("i" must equal idx)
//   recv_raw, or recv of a non-object
//                             -> tracker.gap = tracker.gap ?? idx
//   recv prompt response id R success:true while the held slot's request is R
//                             -> tracker.acked(idx)
//   any other recv object     -> tracker.event(obj, idx)

import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = resolve(HERE, "..", "..");
export const DEFAULT_SEED = resolve(REPO_ROOT, "..", "shared", "seeds", "003_759e674e4a12ce5b.txt");
const KINDS = new Set(["send", "recv", "recv_raw", "release", "stderr", "exit", "note", "receipt", "signal"]);
const OPTIONAL = new Set(["t", "i"]);

export class TranscriptError extends Error {}

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

// Load the seed module: strip its first line (a path, not code), import it.
export async function loadSeed(seedPath = process.env.PI_BRIDGE_SEED || DEFAULT_SEED) {
  const text = readFileSync(seedPath, "utf8");
  const nl = text.indexOf("\n");
  const code = nl < 0 ? "" : text.slice(nl + 1);
  const dir = mkdtempSync(join(tmpdir(), "pi-bridge-seed-"));
  const file = join(dir, "turns.mjs");
  writeFileSync(file, code);
  try {
    return await import(pathToFileURL(file).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// Split on LF only, strip one trailing CR; U+2028/U+2029/U+0085 are not breaks.
function splitLines(text) {
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines.map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
}

function parseEntry(line, lineNo) {
  let entry;
  try {
    entry = JSON.parse(line);
  } catch (e) {
    throw new TranscriptError(`line ${lineNo}: not JSON (${e.message})`);
  }
  if (!isPlainObject(entry)) throw new TranscriptError(`line ${lineNo}: not a JSON object`);
  const kinds = [];
  for (const k of Object.keys(entry)) {
    if (KINDS.has(k)) kinds.push(k);
    else if (!OPTIONAL.has(k)) throw new TranscriptError(`line ${lineNo}: unknown key ${JSON.stringify(k)}`);
  }
  if (kinds.length !== 1) throw new TranscriptError(`line ${lineNo}: expected exactly one kind, got ${kinds.length ? kinds.join(", ") : "none"}`);
  return [kinds[0], entry];
}

function parseHeader(line) {
  let h;
  try {
    h = JSON.parse(line);
  } catch (e) {
    throw new TranscriptError(`line 1: header is not JSON (${e.message})`);
  }
  if (!isPlainObject(h) || h.transcript !== "pi-bridge") throw new TranscriptError(`line 1: not a pi-bridge transcript header`);
  if (h.version !== 1) throw new TranscriptError(`line 1: unsupported transcript version ${JSON.stringify(h.version)} (this reader knows 1)`);
  const clearing = h.clearing ?? [];
  if (!Array.isArray(clearing) || !clearing.every((c) => typeof c === "string")) throw new TranscriptError(`line 1: "clearing" must be a list of command types`);
  return { header: h, clearing };
}

// Replay one transcript's text through a fresh Tracker; returns the output object.
export function replayText(seed, text) {
  const lines = splitLines(text);
  let first = 0;
  while (first < lines.length && lines[first].trim() === "") first += 1;
  if (first >= lines.length) throw new TranscriptError("empty transcript (no header)");
  const { clearing } = parseHeader(lines[first]);
  const clearingSet = new Set(clearing);

  const overlaps = [];
  const working = [];
  const settled = [];
  let stop = null;
  let observations = 0;
  let idx = 0;
  const pendingClears = []; // [{type, id}]

  const tracker = new seed.Tracker({
    onOverlap: (signal, entry) => overlaps.push(entry),
    onWorking: (slot) => working.push({ request: slot.request ?? null, idx }),
    onSlotSettled: (slot, result) => {
      if (result && "outcomeUnknown" in result) {
        settled.push({ request: slot.request ?? null, idx, state: "outcome-unknown", reason: result.outcomeUnknown ?? null, stop: null, nativeError: null });
      } else {
        settled.push({ request: slot.request ?? null, idx, state: result?.state ?? null, reason: result?.reason ?? null, stop: result?.stop ?? null, nativeError: result?.nativeError ?? null });
      }
    },
    stopLink: () => stop,
  });

  for (let n = first + 1; n < lines.length; n++) {
    const line = lines[n];
    if (line.trim() === "") continue;
    const lineNo = n + 1;
    const [kind, entry] = parseEntry(line, lineNo);
    const value = entry[kind];
    switch (kind) {
      case "send": {
        if (!isPlainObject(value)) throw new TranscriptError(`line ${lineNo}: "send" must hold a command object`);
        const id = value.id ?? null;
        if (value.type === "prompt") tracker.attach({ request: id });
        else if (value.type === "abort") stop = id;
        if (typeof value.type === "string" && clearingSet.has(value.type)) {
          tracker.clearWindow += 1;
          pendingClears.push({ type: value.type, id });
        }
        break;
      }
      case "release":
        if (tracker.slot) tracker.release();
        stop = null;
        break;
      case "recv":
      case "recv_raw": {
        idx = tracker.read();
        observations += 1;
        if ("i" in entry && entry.i !== idx) throw new TranscriptError(`line ${lineNo}: "i" is ${JSON.stringify(entry.i)} but the observation index is ${idx}`);
        if (kind === "recv_raw" || !isPlainObject(value)) {
          tracker.gap = tracker.gap ?? idx;
          break;
        }
        if (value.type === "response" && pendingClears.length) {
          const rid = value.id ?? null;
          const k = pendingClears.findIndex((p) => p.id === rid && (!("command" in value) || value.command === p.type));
          if (k >= 0) {
            pendingClears.splice(k, 1);
            tracker.clearWindow -= 1;
          }
        }
        if (value.type === "response" && value.command === "prompt" && value.success === true && tracker.slot && "id" in value && tracker.slot.request === value.id) {
          tracker.acked(idx);
        } else {
          tracker.event(value, idx);
        }
        break;
      }
      default:
        break; // stderr, exit, note, receipt, signal: for people and tools
    }
  }
  return { observations, overlaps, working, settled };
}

export function replayFile(seed, path) {
  return replayText(seed, readFileSync(path, "utf8"));
}

// First line of a file parses as a pi-bridge transcript header?
function looksLikeTranscript(path) {
  try {
    const text = readFileSync(path, "utf8");
    const line = text.split("\n").find((l) => l.trim() !== "") ?? "";
    const h = JSON.parse(line);
    return isPlainObject(h) && h.transcript === "pi-bridge";
  } catch {
    return false;
  }
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

export function expectedPath(transcriptPath) {
  return transcriptPath.replace(/\.jsonl$/, "") + ".expected.json";
}

// The tracker's share of a fixture's expected replay output (the rest,
// `receipts`, is the bridge's own and not the seed's business).
const TRACKER_KEYS = ["observations", "overlaps", "working", "settled"];

function expectedFiles(seed, paths) {
  let status = 0;
  for (const p of paths) {
    const got = JSON.stringify(replayFile(seed, p));
    let want = null;
    try {
      const full = JSON.parse(readFileSync(expectedPath(p), "utf8"));
      want = JSON.stringify(Object.fromEntries(TRACKER_KEYS.map((k) => [k, full[k]])));
    } catch (e) {
      want = `unreadable: ${e.message}`;
    }
    const ok = want === got;
    if (!ok) status = 1;
    process.stdout.write(`${ok ? "ok  " : "DIFF"} ${p}\n`);
  }
  return status;
}

async function main(argv) {
  let seedPath = null;
  let batch = false;
  let mode = "print";
  const rest = [];
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k];
    if (a === "--batch") batch = true;
    else if (a === "--check") mode = "check";
    else if (a === "--seed") seedPath = argv[++k];
    else if (a.startsWith("--seed=")) seedPath = a.slice(7);
    else if (a === "-h" || a === "--help") {
      process.stdout.write("usage: replay.mjs [--seed SEED] [SEED] [--check] (TRANSCRIPT... | --batch < paths.json)\n");
      return 0;
    } else rest.push(a);
  }
  if (seedPath === null && rest.length && !looksLikeTranscript(rest[0])) seedPath = rest.shift();
  const seed = await loadSeed(seedPath ?? undefined);
  const out = [];
  if (batch) {
    const paths = JSON.parse(await readStdin());
    if (!Array.isArray(paths)) throw new Error("--batch expects a JSON array of paths on stdin");
    for (const p of paths) {
      try {
        out.push(JSON.stringify(replayFile(seed, p)));
      } catch (e) {
        if (!(e instanceof TranscriptError) && e.code !== "ENOENT") throw e;
        out.push(JSON.stringify({ path: p, error: e.message }));
      }
    }
    process.stdout.write(out.length ? out.join("\n") + "\n" : "");
    return 0;
  }
  if (!rest.length) {
    process.stderr.write("replay.mjs: no transcript given\n");
    return 2;
  }
  if (mode !== "print") return expectedFiles(seed, rest);
  let status = 0;
  for (const p of rest) {
    try {
      out.push(JSON.stringify(replayFile(seed, p)));
    } catch (e) {
      if (!(e instanceof TranscriptError) && e.code !== "ENOENT") throw e;
      process.stderr.write(`replay.mjs: ${p}: ${e.message}\n`);
      out.push(JSON.stringify({ path: p, error: e.message }));
      status = 2;
    }
  }
  if (out.length) process.stdout.write(out.join("\n") + "\n");
  return status;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (e) => {
      process.stderr.write(`replay.mjs: ${e.stack ?? e}\n`);
      process.exitCode = 1;
    },
  );
}
