/**
 * Spawn → Ready of a Node workflow child beside the cost of Node itself:
 * starts `node -e 0` and an empty module file (spawn → exit), a node that writes one byte (spawn →
 * that byte: Node's start-up alone) and the children (spawn →
 * `Ready`, this script playing the supervisor's part of the handshake over
 * a socketpair at fd 3), several times each, and prints min, median, max.
 *
 *     npm run bench:spawn            # the conformance child and ../../examples/node-orders/orders.js
 */

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import type { Socket } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { FrameDecoder, encodeControlFrame } from "../protocol/frame.js";

const RUNS = Number(process.env["BENCH_RUNS"] ?? "10");
const here = dirname(fileURLToPath(import.meta.url));
const KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

/** Milliseconds from spawn to exit of `node ARGS`. */
function toExit(args: string[]): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, args, { stdio: "ignore" });
    c.on("error", reject);
    c.on("exit", () => resolve(performance.now() - t0));
  });
}

/** Milliseconds from spawn to the first byte `node ARGS` writes on stdout. */
function toFirstByte(args: string[]): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "ignore"] });
    c.on("error", reject);
    c.stdout!.once("data", () => resolve(performance.now() - t0));
  });
}

/** Milliseconds from spawn to the child's Ready, answering its Hello with a Welcome. */
function toReady(args: string[], cwd: string): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const env = {
      PATH: process.env["PATH"] ?? "/usr/bin:/bin",
      WFHOST_CONTROL_FD: "3",
      WFHOST_CHANNEL_ID: randomBytes(16).toString("hex"),
      WFHOST_PROTOCOL: "2",
      WFHOST_DEPLOYMENT: "bench",
      WFHOST_SUPERVISOR_KEY: KEY,
    };
    const c = spawn(process.execPath, args, { cwd, env, stdio: ["ignore", "ignore", "pipe", "pipe"] });
    let stderr = "";
    c.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const channel = c.stdio[3] as Socket;
    const decoder = FrameDecoder.event();
    channel.on("error", () => undefined);
    channel.on("data", (chunk: Buffer) => {
      decoder.push(chunk);
      for (let f = decoder.next(); f !== null; f = decoder.next()) {
        if (f.body.type === "Hello") {
          channel.write(
            encodeControlFrame({
              seq: 1n,
              body: {
                type: "Welcome",
                protocol: 2,
                deployment: "bench",
                grants_snapshot: { read_at_ms: 0n, digest: new Uint8Array(32), body: new Uint8Array(0) },
                limits: { max_frame_bytes: 1 << 20, max_mail_bytes: 1 << 18, drain_timeout_ms: 1000n, liveness_timeout_ms: 30000n },
              },
            }),
          );
        } else if (f.body.type === "Ready" && readyMs === null) {
          readyMs = performance.now() - t0;
          channel.write(encodeControlFrame({ seq: 2n, body: { type: "Shutdown" } }));
          setTimeout(() => c.kill("SIGKILL"), 2000).unref();
        }
      }
    });
    let readyMs: number | null = null;
    c.on("exit", (code) => {
      if (readyMs !== null) resolve(readyMs);
      else reject(new Error(`${args.join(" ")} exited (${code}) before Ready: ${stderr}`));
    });
  });
}

function summary(name: string, ms: number[]): void {
  const s = [...ms].sort((a, b) => a - b);
  const at = (q: number) => (s[Math.min(s.length - 1, Math.floor(q * s.length))] as number).toFixed(1);
  console.log(`${name.padEnd(44)} min ${at(0).padStart(6)} ms  median ${at(0.5).padStart(6)} ms  max ${at(1).padStart(6)} ms`);
}

const example = resolve(here, "../../../../examples/node-orders");
const children: [string, string[], string][] = [["conformance child (spawn → Ready)", [join(here, "../conformance-child.js")], here]];
if (existsSync(join(example, "node_modules/@wfhost/child"))) {
  children.push(["examples/node-orders (spawn → Ready)", ["orders.js"], example]);
} else {
  console.log(`(skipping examples/node-orders: run \`npm ci\` in ${example} first)`);
}

console.log(`spawn → Ready, ${RUNS} runs each (Node ${process.version})`);
const bare: number[] = [];
for (let i = 0; i < RUNS; i++) bare.push(await toExit(["-e", "0"]));
summary("node -e 0 (spawn → exit)", bare);
const emptyFile = join(mkdtempSync(join(tmpdir(), "wfts-bench-")), "empty.mjs");
writeFileSync(emptyFile, "");
const empty: number[] = [];
for (let i = 0; i < RUNS; i++) empty.push(await toExit([emptyFile]));
summary("node empty.mjs (spawn → exit)", empty);
rmSync(dirname(emptyFile), { recursive: true, force: true });
const first: number[] = [];
for (let i = 0; i < RUNS; i++) first.push(await toFirstByte(["-e", "process.stdout.write('x')"]));
summary("node -e 'write(x)' (spawn → first byte)", first);
for (const [name, args, cwd] of children) {
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) ms.push(await toReady(args, cwd));
  summary(name, ms);
}
