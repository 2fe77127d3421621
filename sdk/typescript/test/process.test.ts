/**
 * Whole processes, started as the supervisor starts them (fd 3, cleared
 * environment): the conformance child's exits on Shutdown, end of stream,
 * broken frames and a wrong-version Welcome, its questions, give-backs and
 * progress, and what a child's own programs inherit.
 */

import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, test } from "node:test";

import type { Event } from "../dist/protocol/index.js";
import { Spawned } from "./support/spawned.js";
import { signMailCancel, welcome } from "./support/supervisor.js";

const here = dirname(fileURLToPath(import.meta.url));
const CONFORMANCE_CHILD = join(here, "../dist/conformance-child.js");
const PROBE_CHILD = join(here, "fixtures/probe-child.js");

const started: Spawned[] = [];
afterEach(() => {
  for (const s of started.splice(0)) s.kill();
});

/** A child started as the supervisor starts one (of protocol 2, or 2 to 3 with `v3`), Hello and Welcome exchanged, Ready read. */
async function ready(
  args = [CONFORMANCE_CHILD],
  v3 = false,
  limits: Parameters<typeof welcome>[1] = {},
  offered: string | undefined = v3 ? "3" : undefined,
): Promise<Spawned> {
  const s = new Spawned(args, "billing", offered);
  started.push(s);
  const hello = await s.expect("Hello");
  assert.equal(hello.channel_id, s.env["WFHOST_CHANNEL_ID"]);
  assert.equal(hello.pid, s.child.pid);
  assert.equal(hello.protocol, v3 ? 3 : 2);
  s.send(welcome("billing", limits, "", v3 ? 3 : 2));
  await s.expect("Ready");
  return s;
}

const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

/** Events until the MailDone (or MailAck) of `id`. */
async function untilDone(s: Spawned, id: bigint): Promise<Event[]> {
  const seen: Event[] = [];
  for (;;) {
    const e = await s.next();
    seen.push(e);
    if ((e.type === "MailDone" || e.type === "MailAck") && e.id === id) return seen;
  }
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

describe("the conformance child in protocol 3", () => {
  test("MailStarted first, then took; the result is the payload's result_hex; no MailAck", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send({ type: "Mail", id: 17n, attempt: 1, payload: json({ steps: [{ name: "a", drain: "cancel", ms: 10 }], result_hex: "00ff800a" }) });
    const events = await untilDone(s, 17n);
    assert.deepEqual(
      events.map((e) => e.type),
      ["MailStarted", "Custom", "StepStarted", "StepFinished", "RunTerminal", "MailDone"],
    );
    assert.deepEqual(events[0], { type: "MailStarted", id: 17n, cancellable: true });
    assert.deepEqual(events.at(-1), { type: "MailDone", id: 17n, outcome: { kind: "Succeeded" }, result: Uint8Array.of(0, 0xff, 0x80, 0x0a) });
  });

  test("result_size beyond max_frame_bytes: MailDone Failed naming it; cancellable false: NotSupported; a cancel of a running item: Cancelled", async () => {
    const s = await ready([CONFORMANCE_CHILD], true, { max_frame_bytes: 65_536 });
    s.send({ type: "Mail", id: 1n, attempt: 1, payload: json({ result_size: 100_000 }) });
    const big = (await untilDone(s, 1n)).at(-1);
    assert.ok(big?.type === "MailDone" && big.outcome.kind === "Failed" && /max_frame_bytes 65536/.test(big.outcome.reason), JSON.stringify(big?.type));
    // The application is told: the runtime logs it on stderr (once the MailDone is written).
    const told = /result of 100000 bytes does not fit in a frame of max_frame_bytes 65536/;
    for (const deadline = Date.now() + 2000; !told.test(s.stderr) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 10));
    assert.match(s.stderr, told);

    s.send({ type: "Mail", id: 2n, attempt: 1, payload: json({ steps: [{ name: "a", drain: "cancel", ms: 300 }], cancellable: false, result_size: 3 }) });
    assert.deepEqual(await s.next(), { type: "MailStarted", id: 2n, cancellable: false });
    const record = { origin: "Operator" as const, deployment: "billing", reason: "stop", at_ms: 1n };
    s.send({ type: "CancelMail", cancel: signMailCancel({ ...record, id: 2n }) });
    const two = await untilDone(s, 2n);
    assert.ok(two.some((e) => e.type === "MailCancelVerdict" && e.verdict.kind === "NotSupported"));
    assert.deepEqual(two.at(-1), { type: "MailDone", id: 2n, outcome: { kind: "Succeeded" }, result: new TextEncoder().encode("rrr") });

    s.send({ type: "Mail", id: 3n, attempt: 1, payload: json({ steps: [{ name: "a", drain: "wait", ms: 5000 }] }) });
    for (let e = await s.next(); e.type !== "StepStarted"; e = await s.next());
    s.send({ type: "CancelMail", cancel: signMailCancel({ ...record, id: 3n }) });
    const three = await untilDone(s, 3n);
    assert.deepEqual(three.map((e) => e.type), ["MailCancelVerdict", "StepFinished", "RunTerminal", "MailDone"]);
    assert.deepEqual(three.at(-1), { type: "MailDone", id: 3n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) });
  });

  test("under a supervisor of version 2, or told --protocol 2: MailAck, and no version-3 message", async () => {
    for (const s of [await ready([CONFORMANCE_CHILD], false), await ready([CONFORMANCE_CHILD, "--protocol", "2"], false, {}, "3")]) {
      s.send({ type: "Mail", id: 4n, attempt: 1, payload: json({ result_hex: "00" }) });
      const events = await untilDone(s, 4n);
      assert.deepEqual(events.map((e) => e.type), ["Custom", "RunTerminal", "MailAck"]);
    }
  });
});

describe("the conformance child's questions and progress (the kit's scenarios, played by hand)", () => {
  const utf8 = (t: string) => new TextEncoder().encode(t);
  const mail = (id: bigint, payload: unknown, attempt = 1) => ({ type: "Mail" as const, id, attempt, payload: json(payload) });
  const answer = (id: bigint, key: string, value: string) => ({ type: "Answer" as const, id, key, value: utf8(value) });
  const untilAsk = async (s: Spawned, id: bigint) => {
    for (;;) {
      const e = await s.next();
      if (e.type === "Ask" && e.id === id) return e;
    }
  };

  test("asking: Ask with the payload's key and prompt after the steps; the answer, compact, is the result", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(1n, { steps: [{ name: "a", drain: "wait", ms: 10 }], ask: { key: "approve", prompt: { order: "A-17", total: 3 } } }));
    const before: Event[] = [];
    for (let e = await s.next(); ; e = await s.next()) {
      before.push(e);
      if (e.type === "Ask") break;
    }
    assert.deepEqual(before.map((e) => e.type), ["MailStarted", "Custom", "StepStarted", "StepFinished", "Ask"]);
    assert.deepEqual(before.at(-1), { type: "Ask", id: 1n, key: "approve", prompt: utf8('{"order":"A-17","total":3}') });
    s.send(answer(1n, "approve", '{ "approved" : true, "note": "ok" }'));
    const rest = await untilDone(s, 1n);
    assert.deepEqual(rest.map((e) => e.type), ["RunTerminal", "MailDone"]);
    assert.deepEqual(rest.at(-1), { type: "MailDone", id: 1n, outcome: { kind: "Succeeded" }, result: utf8('{"approved":true,"note":"ok"}') });
  });

  test("a list of asks, each in order; the last answer is the result unless result_hex says otherwise; an answer at once to attempt 2", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(2n, { ask: [{ key: "one", prompt: 1 }, { key: "two", prompt: "2" }] }, 2));
    assert.deepEqual(await untilAsk(s, 2n), { type: "Ask", id: 2n, key: "one", prompt: utf8("1") });
    s.send(answer(2n, "one", "[1]"));
    assert.deepEqual(await untilAsk(s, 2n), { type: "Ask", id: 2n, key: "two", prompt: utf8('"2"') });
    s.send(answer(2n, "two", '"second"'));
    assert.deepEqual((await untilDone(s, 2n)).at(-1), { type: "MailDone", id: 2n, outcome: { kind: "Succeeded" }, result: utf8('"second"') });
    s.send(mail(3n, { ask: { key: "k", prompt: null }, result_hex: "0a0b" }));
    await untilAsk(s, 3n);
    s.send(answer(3n, "k", "true"));
    assert.deepEqual((await untilDone(s, 3n)).at(-1), { type: "MailDone", id: 3n, outcome: { kind: "Succeeded" }, result: Uint8Array.of(10, 11) });
  });

  test("give-back on drain: two askers given back, the step item's MailDone, then Drained; no MailDone for the askers", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(1n, { ask: { key: "approve", prompt: 1 } }));
    s.send(mail(2n, { ask: { key: "approve", prompt: 2 } }));
    s.send(mail(3n, { steps: [{ name: "short", drain: "wait", ms: 200 }] }));
    const seen = new Set<string>();
    while (!(seen.has("Ask 1") && seen.has("Ask 2") && seen.has("StepStarted 3"))) {
      const e = await s.next();
      if (e.type === "Ask") seen.add(`Ask ${e.id}`);
      if (e.type === "StepStarted" && e.run === "mail-3") seen.add("StepStarted 3");
    }
    s.send({ type: "Drain", budget_ms: 5000n });
    const after: string[] = [];
    for (let e = await s.next(); ; e = await s.next()) {
      if (e.type === "GiveBack") assert.equal(e.awaiting_answer, true);
      if (e.type === "GiveBack" || e.type === "MailDone" || e.type === "Drained") after.push(`${e.type}${"id" in e ? ` ${e.id}` : ""}`);
      if (e.type === "Drained") break;
    }
    assert.deepEqual(after, ["GiveBack 1", "GiveBack 2", "MailDone 3", "Drained"]);
    await assert.rejects(s.next(300), /no event within 300 ms/, "no MailDone for the given-back items");
    assert.match(s.stderr, /mail 1: given back while it waited for the answer to "approve"/);
  });

  test("progress: Progress frames in order with the exact data; progress_bytes 65536 goes, 70000 is refused: no frame, MailDone Failed", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(1n, { progress: [{ done: 1 }, "two", 3, null], progress_bytes: 65_536 }));
    const events = await untilDone(s, 1n);
    const progress = events.filter((e) => e.type === "Progress");
    assert.deepEqual(
      progress.slice(0, 4).map((e) => e.type === "Progress" && Buffer.from(e.data).toString()),
      ['{"done":1}', '"two"', "3", "null"],
    );
    assert.equal(progress.length, 5);
    const last = progress[4]!;
    assert.ok(last.type === "Progress" && last.data.length === 65_536 && last.data[0] === 0x22 && last.data[1] === 0x70);
    assert.deepEqual(events.at(-1), { type: "MailDone", id: 1n, outcome: { kind: "Succeeded" }, result: new Uint8Array(0) });
    s.send(mail(2n, { progress: ["first"], progress_bytes: 70_000, ask: { key: "never", prompt: null } }));
    const two = await untilDone(s, 2n);
    assert.deepEqual(two.map((e) => e.type), ["MailStarted", "Custom", "Progress", "MailDone"]);
    const done = two.at(-1)!;
    assert.ok(done.type === "MailDone" && done.outcome.kind === "Failed", JSON.stringify(done.type));
    assert.equal(done.outcome.reason, "mail 2: progress data of 70000 bytes of JSON is over the limit of 65536; nothing was sent");
  });

  test("ask validation: a key of 300 bytes sends no Ask and ends the item Failed naming it", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(1n, { ask: { key: "k".repeat(300), prompt: null } }));
    const events = await untilDone(s, 1n);
    assert.ok(!events.some((e) => e.type === "Ask"));
    const done = events.at(-1)!;
    assert.ok(done.type === "MailDone" && done.outcome.kind === "Failed");
    assert.match(done.outcome.reason, /the key must be 1 to 256 bytes of UTF-8, got 300/);
  });

  test("cancel while asking: verdict Acknowledged, MailDone Cancelled", async () => {
    const s = await ready([CONFORMANCE_CHILD], true);
    s.send(mail(5n, { steps: [{ name: "a", drain: "wait", ms: 1 }], ask: { key: "approve", prompt: null } }));
    await untilAsk(s, 5n);
    const record = { origin: "Operator" as const, deployment: "billing", id: 5n, reason: "no", at_ms: 1n };
    s.send({ type: "CancelMail", cancel: signMailCancel(record) });
    const events = await untilDone(s, 5n);
    assert.deepEqual(events[0], { type: "MailCancelVerdict", id: 5n, verdict: { kind: "Acknowledged" } });
    assert.deepEqual(events.at(-1), { type: "MailDone", id: 5n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) });
  });

  test("held to protocol 2: ask and progress fail naming protocol 2, the item Failed, no version-3 message", async () => {
    const s = await ready([CONFORMANCE_CHILD, "--protocol", "2"], false, {}, "3");
    s.send(mail(1n, { ask: { key: "approve", prompt: null } }));
    const one = await untilDone(s, 1n);
    assert.deepEqual(one.map((e) => e.type), ["Custom", "RunTerminal", "MailAck"]);
    const ack = one.at(-1)!;
    assert.ok(ack.type === "MailAck" && ack.id === 1n && ack.outcome.kind === "Failed", JSON.stringify(ack.type));
    assert.match(ack.outcome.reason, /mail\.ask needs protocol 3, and this child speaks protocol 2/);
    s.send(mail(2n, { progress: [1] }));
    const two = (await untilDone(s, 2n)).at(-1) as { outcome: { kind: string; reason: string } };
    assert.equal(two.outcome.kind, "Failed");
    assert.match(two.outcome.reason, /mail\.progress needs protocol 3/);
  });
});

test("a child's own programs inherit neither fd 3 nor WFHOST_*, WFHOST_PROTOCOL_MAX included (protocol 3)", async () => {
  const s = await ready([PROBE_CHILD], true);
  assert.equal(s.env["WFHOST_PROTOCOL_MAX"], "3");
  const probe = await s.expect("Custom");
  const seen = JSON.parse(Buffer.from(probe.bytes).toString()) as { control: string; fds: string[]; env: string[] };
  assert.ok(!seen.fds.includes(seen.control), `the control socket ${seen.control} leaked into ${JSON.stringify(seen.fds)}`);
  assert.deepEqual(seen.env, []);
});

test("a child's own programs inherit neither fd 3 nor WFHOST_*", async () => {
  const s = await ready([PROBE_CHILD]);
  const probe = await s.expect("Custom");
  const seen = JSON.parse(Buffer.from(probe.bytes).toString()) as { control: string; fds: string[]; env: string[] };
  assert.match(seen.control, /^socket:\[\d+\]$/);
  assert.ok(!seen.fds.includes(seen.control), `the control socket ${seen.control} leaked into ${JSON.stringify(seen.fds)}`);
  assert.deepEqual(seen.env, []);
});
