/**
 * Whole processes, started as the supervisor starts them (fd 3, cleared
 * environment): the conformance child's exits on Shutdown, end of stream,
 * broken frames and a wrong-version Welcome, and what a child's own
 * programs inherit.
 */

import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, test } from "node:test";

import { Spawned } from "./support/spawned.js";
import { welcome } from "./support/supervisor.js";

const here = dirname(fileURLToPath(import.meta.url));
const CONFORMANCE_CHILD = join(here, "../dist/conformance-child.js");
const PROBE_CHILD = join(here, "fixtures/probe-child.js");

const started: Spawned[] = [];
afterEach(() => {
  for (const s of started.splice(0)) s.kill();
});

async function ready(args = [CONFORMANCE_CHILD]): Promise<Spawned> {
  const s = new Spawned(args);
  started.push(s);
  const hello = await s.expect("Hello");
  assert.equal(hello.channel_id, s.env["WFHOST_CHANNEL_ID"]);
  assert.equal(hello.pid, s.child.pid);
  s.send(welcome());
  await s.expect("Ready");
  return s;
}

describe("the conformance child as a process", () => {
  test("Shutdown: exit 0 promptly, even with a wait step in flight", async () => {
    const s = await ready();
    s.send({ type: "Mail", id: 1n, attempt: 1, payload: new TextEncoder().encode('{"steps":[{"name":"a","drain":"wait","ms":60000}]}') });
    assert.equal((await s.expect("Custom")).kind, "conformance.took");
    await s.expect("StepStarted");
    const t0 = performance.now();
    s.send({ type: "Shutdown" });
    const exit = await s.exited;
    assert.equal(exit.code, 0, s.stderr);
    assert.ok(exit.atMs - t0 < 1000, `exited ${Math.round(exit.atMs - t0)} ms after Shutdown`);
  });

  test("end of stream on fd 3: exit", async () => {
    const s = await ready();
    s.channel.end();
    const exit = await s.exited;
    assert.notEqual(exit.code, null, "exited by itself");
  });

  test("an oversized header (above 64 MiB): exit non-zero with a message, without a body", async () => {
    const s = await ready();
    s.sendRaw(Uint8Array.of(0xff, 0xff, 0xff, 0xff));
    const exit = await s.exited;
    assert.equal(exit.code, 1);
    assert.match(s.stderr, /frame of 4294967295 bytes exceeds max_frame_bytes 1048576/);
  });

  test("an undecodable frame: exit non-zero with a message", async () => {
    const s = await ready();
    s.sendRaw(Uint8Array.of(0, 0, 0, 2, 2, 99));
    assert.equal((await s.exited).code, 1);
    assert.match(s.stderr, /undecodable frame body: Control: variant 99 names none/);
  });

  test("a Welcome of another protocol: no Ready, exit non-zero naming both versions", async () => {
    const s = new Spawned([CONFORMANCE_CHILD]);
    started.push(s);
    await s.expect("Hello");
    s.send({ ...(welcome() as Extract<ReturnType<typeof welcome>, { type: "Welcome" }>), protocol: 3 });
    const exit = await s.exited;
    assert.equal(exit.code, 1);
    assert.match(s.stderr, /Welcome speaks protocol 3 but this child speaks 2/);
    assert.equal(s.stderr.trim().split("\n").length, 1, `one line: ${s.stderr}`);
  });

  test("started by hand, without WFHOST_*: exit non-zero naming the variable", async () => {
    const { spawnSync } = await import("node:child_process");
    const r = spawnSync(process.execPath, [CONFORMANCE_CHILD], { env: {}, encoding: "utf8" });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /WFHOST_CONTROL_FD is not set: this process must be started by the wfhost supervisor/);
  });
});

test("a child's own programs inherit neither fd 3 nor WFHOST_*", async () => {
  const s = await ready([PROBE_CHILD]);
  const probe = await s.expect("Custom");
  const seen = JSON.parse(Buffer.from(probe.bytes).toString()) as { control: string; fds: string[]; env: string[] };
  assert.match(seen.control, /^socket:\[\d+\]$/);
  assert.ok(!seen.fds.includes(seen.control), `the control socket ${seen.control} leaked into ${JSON.stringify(seen.fds)}`);
  assert.deepEqual(seen.env, []);
});
