/**
 * The runtime against a scripted supervisor over a real Unix stream
 * socket: handshake, Ping while steps run, mail dedupe, drain and Drained,
 * verified and forged cancels, lease expiry, wind-down steps, Shutdown,
 * EOF and broken frames.
 */

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Cancelled, ChannelClosed, ConnectError, InvalidEvent, connect, type Runtime } from "../dist/index.js";
import { FakeSupervisor, childEnv, signCancel, welcome } from "./support/supervisor.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanups.splice(0)) f();
});

/** A connected runtime and its supervisor, Hello and Welcome exchanged, Ready read. */
async function wired(opts: { takesMail?: boolean; deployment?: string; limits?: Parameters<typeof welcome>[1]; grants?: string } = {}) {
  const { sup, child } = await FakeSupervisor.pair();
  const env = childEnv(opts.deployment ?? "billing");
  const lines: string[] = [];
  cleanups.push(() => sup.close());
  const connecting = connect({
    env,
    socket: child,
    log: (l) => lines.push(l),
    ...(opts.takesMail === undefined ? {} : { takesMail: opts.takesMail }),
  });
  const hello = await sup.expect("Hello");
  sup.send(welcome(opts.deployment ?? "billing", opts.limits, opts.grants));
  const rt = await connecting;
  cleanups.push(() => void rt.close().catch(() => undefined));
  await rt.ready();
  await sup.expect("Ready");
  return { sup, rt, env, hello, lines };
}

function mail(id: bigint, payload = "x", attempt = 1) {
  return { type: "Mail" as const, id, attempt, payload: new TextEncoder().encode(payload) };
}

describe("handshake", () => {
  test("Hello carries the protocol, channel id, pid, takes_mail and the implementation", async () => {
    const { hello, env, rt } = await wired({ takesMail: false, grants: '{"token":"abc"}' });
    assert.equal(hello.protocol, 2);
    assert.equal(hello.channel_id, env["WFHOST_CHANNEL_ID"]);
    assert.equal(hello.pid, process.pid);
    assert.equal(hello.takes_mail, false);
    assert.equal(hello.implementation, "@wfhost/child/0.1.0");
    assert.equal(rt.deployment, "billing");
    assert.deepEqual(rt.grants.json(), { token: "abc" });
    assert.equal(rt.grants.digest, "07".repeat(32));
    assert.equal(rt.grants.readAtMs, 1_700_000_000_000);
    assert.deepEqual(rt.limits, { maxFrameBytes: 1 << 20, maxMailBytes: 256 << 10, drainTimeoutMs: 5000, livenessTimeoutMs: 30000 });
  });

  test("a Welcome of another protocol is refused with a message naming both versions", async () => {
    const { sup, child } = await FakeSupervisor.pair();
    cleanups.push(() => sup.close());
    const connecting = connect({ env: childEnv(), socket: child, log: () => undefined });
    await sup.expect("Hello");
    sup.send({ ...(welcome() as Extract<ReturnType<typeof welcome>, { type: "Welcome" }>), protocol: 3 });
    await assert.rejects(connecting, (e: unknown) => e instanceof ConnectError && /protocol 3 but this child speaks 2/.test(e.message));
  });

  test("a Welcome for another deployment, anything but Welcome, and EOF are refused", async () => {
    for (const [answer, pattern] of [
      [welcome("payroll"), /Welcome is for deployment "payroll" but WFHOST_DEPLOYMENT is "billing"/],
      [{ type: "Ping", nonce: 1n }, /expected Welcome, got Ping/],
      [null, /closed the channel instead of answering Hello/],
    ] as const) {
      const { sup, child } = await FakeSupervisor.pair();
      cleanups.push(() => sup.close());
      const connecting = connect({ env: childEnv(), socket: child, log: () => undefined });
      await sup.expect("Hello");
      if (answer === null) sup.socket.end();
      else sup.send(answer);
      await assert.rejects(connecting, (e: unknown) => e instanceof ConnectError && pattern.test(e.message));
    }
  });

  test("events before Ready are refused locally, not sent as a violation", async () => {
    const { sup, child } = await FakeSupervisor.pair();
    cleanups.push(() => sup.close());
    const connecting = connect({ env: childEnv(), socket: child, log: () => undefined });
    await sup.expect("Hello");
    sup.send(welcome());
    const rt = await connecting;
    cleanups.push(() => void rt.close().catch(() => undefined));
    await assert.rejects(rt.custom("early"), /call `await rt.ready\(\)` first/);
    assert.throws(() => rt.startStep("r", "s", "wait"), InvalidEvent);
    await rt.ready();
    assert.equal((await sup.next()).type, "Ready", "Ready is the second frame");
  });

  test("no Welcome in time is a ConnectError, not a hang", async () => {
    const { sup, child } = await FakeSupervisor.pair();
    cleanups.push(() => sup.close());
    const connecting = connect({ env: childEnv(), socket: child, log: () => undefined, handshakeTimeoutMs: 100 });
    await assert.rejects(connecting, /no Welcome within 100 ms/);
  });

  test("the environment is checked variable by variable, naming it", async () => {
    for (const [name, value, pattern] of [
      ["WFHOST_CONTROL_FD", undefined, /WFHOST_CONTROL_FD is not set: this process must be started by the wfhost supervisor/],
      ["WFHOST_CONTROL_FD", "1", /WFHOST_CONTROL_FD="1" is unusable: expected an fd number above 2/],
      ["WFHOST_CHANNEL_ID", "short", /WFHOST_CHANNEL_ID="short" is unusable: expected 32 hex/],
      ["WFHOST_PROTOCOL", "1", /this child speaks protocol 2/],
      ["WFHOST_DEPLOYMENT", " ", /the deployment id is empty/],
      ["WFHOST_SUPERVISOR_KEY", "abcd", /WFHOST_SUPERVISOR_KEY="abcd" is unusable/],
    ] as const) {
      const env: Record<string, string | undefined> = childEnv();
      env[name] = value;
      await assert.rejects(connect({ env }), (e: unknown) => e instanceof ConnectError && pattern.test(e.message));
    }
  });

  test("an fd that is not a socket is refused", async () => {
    const env = { ...childEnv(), WFHOST_CONTROL_FD: "987" };
    await assert.rejects(connect({ env }), /control fd 987 \(WFHOST_CONTROL_FD\) is unusable/);
  });

  test("an implementation name over 128 bytes is refused", async () => {
    await assert.rejects(connect({ env: childEnv(), implementation: "x".repeat(129) }), /1 to 128 bytes, got 129/);
  });
});

describe("liveness", () => {
  test("a Ping is answered with its nonce while a step awaits", async () => {
    const { sup, rt } = await wired();
    const step = rt.step("r1", "slow", "cancel", () => sleep(300));
    await sup.expect("StepStarted");
    const t0 = performance.now();
    sup.send({ type: "Ping", nonce: 18446744073709551615n });
    const pong = await sup.expect("Pong");
    assert.equal(pong.nonce, 18446744073709551615n);
    assert.ok(performance.now() - t0 < 100, "answered within 100 ms");
    await step;
  });
});

describe("mail", () => {
  test("each id is handed out once, acked once, and a redelivery after the ack is re-acked", async () => {
    const { sup, rt, lines } = await wired();
    const seen: bigint[] = [];
    const loop = (async () => {
      for await (const m of rt.mail()) {
        seen.push(m.id);
        assert.equal(m.text(), "hello");
        await sleep(50);
        await m.ack({ failed: "bad input" });
      }
    })();
    sup.send(mail(7n, "hello"));
    sup.send(mail(7n, "hello"));
    const ack = await sup.expect("MailAck");
    assert.deepEqual(ack, { type: "MailAck", id: 7n, outcome: { kind: "Failed", reason: "bad input" } });
    sup.send(mail(7n, "hello", 2));
    assert.deepEqual(await sup.expect("MailAck"), ack, "acknowledged again from memory");
    assert.deepEqual(seen, [7n], "processed once");
    assert.ok(lines.some((l) => l.includes("mail 7 delivered again while still in progress; ignored")), lines.join("\n"));
    assert.ok(lines.some((l) => l.includes("mail 7 redelivered after its ack; acknowledging again")));
    sup.send({ type: "Drain", budget_ms: 1000n });
    await sup.expect("Drained");
    await loop;
  });

  test("attempt, payload bytes, json() and text() errors name the mail", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send({ type: "Mail", id: 3n, attempt: 4, payload: Uint8Array.of(0xff) });
    const m = (await it.next()).value!;
    assert.equal(m.attempt, 4);
    assert.deepEqual(m.payload, Uint8Array.of(0xff));
    assert.throws(() => m.text(), /mail 3: the payload \(1 bytes\) is not valid UTF-8/);
    sup.send(mail(4n, "{nope"));
    const n = (await it.next()).value!;
    assert.throws(() => n.json(), /mail 4: the payload is not JSON/);
    await m.ack();
    await assert.rejects(m.ack(), /mail 3 was already acked/);
    n.release();
    await sup.expect("MailAck");
  });

  test("held mail delays Drained until acked, the ack comes first, and the iterator ends on drain", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    sup.send(mail(2n));
    const m = (await it.next()).value!;
    sup.send({ type: "Drain", budget_ms: 1000n });
    assert.deepEqual(await sup.quiet(150), [], "no Drained while mail 1 is held");
    assert.equal((await it.next()).done, true, "no mail during a drain");
    assert.ok(rt.draining.aborted);
    assert.equal((rt.draining.reason as Cancelled).cause, "drain");
    await m.ack("cancelled");
    assert.deepEqual(await sup.until("Drained"), [{ type: "MailAck", id: 1n, outcome: { kind: "Cancelled" } }, { type: "Drained" }]);
    sup.send(mail(3n));
    sup.send(mail(1n));
    assert.deepEqual(await sup.until("MailAck"), [{ type: "MailAck", id: 1n, outcome: { kind: "Cancelled" } }], "re-acked during the drain, 3 not taken");
  });

  test("releasing held mail ends the drain without an ack", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    sup.send({ type: "Drain", budget_ms: 0n });
    await sleep(50);
    m.release();
    assert.deepEqual(await sup.until("Drained"), [{ type: "Drained" }]);
  });
});

describe("steps and drain", () => {
  test("a drain aborts cancel steps at once, lets wait steps finish, and sends Drained after the last cancel step", async () => {
    const { sup, rt } = await wired();
    const fetch = rt.step("r1", "fetch", "cancel", (signal) => sleep(5000, undefined, { signal }));
    const approve = rt.step("r2", "approve", "wait", async (signal) => {
      await sleep(300);
      return signal.aborted;
    });
    await sup.until("StepStarted");
    await sup.until("StepStarted");
    const t0 = performance.now();
    sup.send({ type: "Drain", budget_ms: 1000n });
    await assert.rejects(fetch, (e: unknown) => e instanceof Cancelled && e.cause === "drain");
    assert.deepEqual(await sup.until("Drained"), [
      { type: "StepFinished", run: "r1", step: "fetch", outcome: { kind: "Cancelled" } },
      { type: "Drained" },
    ]);
    assert.ok(performance.now() - t0 < 200, "the cancel step ended at once");
    assert.equal(await approve, false, "the wait step was not aborted");
    assert.deepEqual(await sup.until("StepFinished"), [
      { type: "StepFinished", run: "r2", step: "approve", outcome: { kind: "Succeeded" } },
    ]);
    await assert.rejects(
      rt.step("r3", "late", "cancel", () => "never"),
      (e: unknown) => e instanceof Cancelled && e.cause === "drain",
      "new cancel work during a drain starts cancelled",
    );
    assert.equal(await rt.step("r3", "late-wait", "wait", () => 5), 5, "new wait work still runs");
  });

  test("a body that throws is Failed with its message; a body that ignores its signal is abandoned", async () => {
    const { sup, rt } = await wired();
    await assert.rejects(
      rt.step("r1", "boom", "wait", () => {
        throw new Error("upstream said 503");
      }),
      /upstream said 503/,
    );
    assert.deepEqual(await sup.until("StepFinished"), [
      { type: "StepStarted", run: "r1", step: "boom", drain: "Wait" },
      { type: "StepFinished", run: "r1", step: "boom", outcome: { kind: "Failed", reason: "upstream said 503" } },
    ]);
    let finished = false;
    const deaf = rt.step("r2", "deaf", "cancel", async () => {
      await sleep(400);
      finished = true;
      throw new Error("too late to matter");
    });
    await sup.until("StepStarted");
    sup.send({ type: "Drain", budget_ms: 1000n });
    await assert.rejects(deaf, Cancelled);
    assert.equal(finished, false, "rt.step settled before the body");
    await sleep(450);
    assert.equal(finished, true, "the abandoned body ran on and its rejection was swallowed");
  });

  test("a wind-down step keeps its signal through a drain; the drain waits for it", async () => {
    const { sup, rt } = await wired();
    const s = rt.step(
      "r1",
      "flush",
      "cancel",
      async (signal) => {
        await new Promise((resolve) => rt.draining.addEventListener("abort", resolve, { once: true }));
        await sleep(200);
        return signal.aborted;
      },
      { onDrain: "wind-down" },
    );
    await sup.until("StepStarted");
    sup.send({ type: "Drain", budget_ms: 1000n });
    assert.equal(await s, false);
    assert.deepEqual(await sup.until("Drained"), [
      { type: "StepFinished", run: "r1", step: "flush", outcome: { kind: "Succeeded" } },
      { type: "Drained" },
    ]);
  });
});

describe("verified cancels", () => {
  const record = (run: string | null, deployment = "billing") => ({
    origin: "SupervisorDrain" as const,
    deployment,
    run,
    reason: "drain budget of 1s spent",
    at_ms: 1n,
  });

  test("a signed cancel aborts every step of its run with the reason, ends the run once, and late steps start cancelled", async () => {
    const { sup, rt, lines } = await wired();
    const a = rt.step("r1", "fetch", "cancel", (signal) => sleep(5000, undefined, { signal }), { onDrain: "wind-down" });
    const b = rt.step("r1", "approve", "wait", (signal) => sleep(5000, undefined, { signal }));
    const other = rt.step("r2", "fetch", "cancel", () => sleep(200));
    for (let i = 0; i < 3; i++) await sup.until("StepStarted");
    sup.send({ type: "Cancel", cancel: signCancel(record("r1")) });
    for (const p of [a, b]) {
      await assert.rejects(p, (e: unknown) => {
        assert.ok(e instanceof Cancelled);
        assert.equal(e.cause, "cancel");
        assert.equal(e.reason, "drain budget of 1s spent");
        assert.equal(e.origin, "supervisor-drain");
        return true;
      });
    }
    await other;
    const events = await sup.until("RunTerminal");
    assert.deepEqual(events.slice(-1), [{ type: "RunTerminal", run: "r1", outcome: { kind: "Cancelled" } }]);
    assert.ok(lines.includes('cancel of run r1 accepted (origin supervisor-drain, reason "drain budget of 1s spent")'), lines.join("\n"));
    await rt.runTerminal("r1", "succeeded");
    await assert.rejects(rt.step("r1", "late", "wait", () => 1), (e: unknown) => e instanceof Cancelled && e.cause === "cancel");
    const rest = await sup.quiet(100);
    assert.ok(!rest.some((e) => e.type === "RunTerminal" && e.run === "r1"), `reported once: ${JSON.stringify(rest.map((e) => e.type))}`);
  });

  test("forged cancels are refused, logged, and change nothing", async () => {
    const { sup, rt, lines } = await wired();
    const s = rt.step("r1", "fetch", "cancel", () => sleep(300).then(() => "done"));
    await sup.until("StepStarted");
    const good = signCancel(record("r1"));
    const flipped = new Uint8Array(good.signature);
    flipped[0] = (flipped[0] as number) ^ 1;
    sup.send({ type: "Cancel", cancel: { ...good, signature: flipped } });
    sup.send({ type: "Cancel", cancel: { ...good, record: { ...good.record, reason: "edited" } } });
    sup.send({ type: "Cancel", cancel: signCancel(record("r1", "payroll")) });
    sup.send({ type: "Cancel", cancel: signCancel(record("r9")) });
    sup.send({ type: "Cancel", cancel: { ...good, key_id: new Uint8Array(8) } });
    assert.equal(await s, "done");
    const refusals = lines.filter((l) => l.startsWith("refused cancel"));
    assert.equal(refusals.length, 5, lines.join("\n"));
    assert.match(refusals[0]!, /signature does not verify/);
    assert.match(refusals[2]!, /cancel is for deployment "payroll", this is "billing"/);
    assert.match(refusals[3]!, /run "r9", which this child does not know/);
    assert.match(refusals[4]!, /signed by unknown key 0000000000000000/);
  });

  test("a cancel of every run ends idle runs at once", async () => {
    const { sup, rt } = await wired();
    await rt.step("idle", "s", "wait", () => 1);
    await sup.until("StepFinished");
    sup.send({ type: "Cancel", cancel: signCancel(record(null)) });
    assert.deepEqual(await sup.until("RunTerminal"), [{ type: "RunTerminal", run: "idle", outcome: { kind: "Cancelled" } }]);
  });
});

describe("lease", () => {
  test("a lease that runs out acts as a drain (cause 'lease', Drained by the same rule); renewals keep it alive", async () => {
    const { sup, rt, lines } = await wired();
    sup.send({ type: "Lease", valid_ms: 150n });
    const s = rt.step("r1", "fetch", "cancel", (signal) => sleep(5000, undefined, { signal }));
    const w = rt.step("r2", "approve", "wait", () => sleep(500).then(() => "approved"));
    for (let i = 0; i < 4; i++) {
      await sleep(100);
      sup.send({ type: "Lease", valid_ms: 150n });
    }
    assert.equal(rt.draining.aborted, false, "renewed in time");
    await assert.rejects(s, (e: unknown) => e instanceof Cancelled && e.cause === "lease");
    assert.ok(rt.draining.aborted);
    assert.equal((rt.draining.reason as Cancelled).cause, "lease");
    assert.equal(await w, "approved", "wait steps go on");
    const it = rt.mail();
    sup.send(mail(1n));
    assert.equal((await it.next()).done, true, "no mail after the lease ran out");
    assert.ok(lines.some((l) => l.startsWith("lease ran out")), lines.join("\n"));
    const events = await sup.until("Drained");
    assert.deepEqual(events.at(-2), { type: "StepFinished", run: "r1", step: "fetch", outcome: { kind: "Cancelled" } });
    sup.send({ type: "Lease", valid_ms: 10_000n });
    assert.equal(rt.draining.aborted, true, "a Lease after expiry undoes nothing");
  });
});

describe("closing", () => {
  test("Shutdown closes the runtime: signals abort as 'shutdown', closed resolves, iterators end", async () => {
    const { sup, rt } = await wired();
    const s = rt.step("r1", "approve", "wait", (signal) => sleep(5000, undefined, { signal }));
    await sup.until("StepStarted");
    const it = rt.mail();
    const pending = it.next();
    sup.send({ type: "Shutdown" });
    assert.equal((await rt.closed).kind, "shutdown");
    await assert.rejects(s, (e: unknown) => e instanceof Cancelled && e.cause === "shutdown");
    assert.equal((await pending).done, true);
    sup.send({ type: "Ping", nonce: 5n });
    let pong;
    do pong = await sup.next();
    while (pong.type !== "Pong");
    assert.equal(pong.nonce, 5n, "Pings still answered until the process exits");
  });

  test("EOF closes the runtime as disconnected and later sends reject with ChannelClosed", async () => {
    const { sup, rt } = await wired();
    sup.socket.end();
    assert.equal((await rt.closed).kind, "disconnected");
    await assert.rejects(rt.custom("k", "x"), ChannelClosed);
    await assert.rejects(rt.step("r", "s", "wait", () => 1), (e: unknown) => e instanceof Cancelled && e.cause === "disconnected");
  });

  test("an oversized or undecodable frame closes the runtime as failed, naming the problem", async () => {
    for (const [bytes, pattern] of [
      [Uint8Array.of(0, 0, 4, 1), /frame of 1025 bytes exceeds max_frame_bytes 1024/],
      [Uint8Array.of(0, 0, 0, 2, 2, 0x63), /undecodable frame body/],
      [Uint8Array.of(0, 0, 0, 2, 9, 5), /sequence gap: expected 2, got 9/],
    ] as const) {
      const { sup, rt, lines } = await wired({ limits: { max_frame_bytes: 1024 } });
      sup.sendRaw(bytes);
      const reason = await rt.closed;
      assert.equal(reason.kind, "failed");
      assert.match(reason.message, pattern);
      assert.ok(lines.some((l) => pattern.test(l)), lines.join("\n"));
    }
  });

  test("rt.close() ends the channel: the supervisor reads end of stream", async () => {
    const { sup, rt } = await wired();
    await rt.custom("last", "words");
    await rt.close();
    assert.equal((await sup.expect("Custom")).kind, "last");
    await assert.rejects(sup.next(1000), /closed the channel/);
    assert.equal((await rt.closed).kind, "closed");
  });

  test("events the wire cannot carry are refused with InvalidEvent and nothing is sent", async () => {
    const { sup, rt } = await wired({ limits: { max_frame_bytes: 1024 } });
    await assert.rejects(rt.custom("big", new Uint8Array(2000)), (e: unknown) => e instanceof InvalidEvent && /Custom event not sent/.test(e.message));
    assert.throws(() => rt.startStep("bad\ud800", "s", "wait"), InvalidEvent);
    await rt.custom("small", "ok");
    assert.deepEqual(await sup.until("Custom"), [{ type: "Custom", kind: "small", bytes: new TextEncoder().encode("ok") }], "the sequence has no gap");
  });
});

describe("custom events", () => {
  const utf8 = (s: string) => new TextEncoder().encode(s);

  test("bytes go as they are, a string as UTF-8, any other JSON value JSON-encoded, no data as no bytes", async () => {
    const { sup, rt } = await wired();
    const cases: [unknown, Uint8Array][] = [
      [Uint8Array.of(0, 1, 255), Uint8Array.of(0, 1, 255)],
      [Buffer.from("buf"), utf8("buf")],
      ["héllo", utf8("héllo")],
      ["", new Uint8Array(0)],
      [{ order: 9, items: ["a", { n: null }], ok: true }, utf8('{"order":9,"items":["a",{"n":null}],"ok":true}')],
      [{ kept: 1, left: undefined }, utf8('{"kept":1}')],
      [[1, "two", false], utf8('[1,"two",false]')],
      [42.5, utf8("42.5")],
      [false, utf8("false")],
      [null, utf8("null")],
      [new Date(0), utf8('"1970-01-01T00:00:00.000Z"')],
    ];
    for (const [data, want] of cases) {
      await rt.custom("k", data as never);
      const got = await sup.expect("Custom");
      assert.equal(got.kind, "k");
      assert.deepEqual([...got.bytes], [...want], `rt.custom("k", ${String(data)})`);
    }
    await rt.custom("empty");
    assert.deepEqual([...(await sup.expect("Custom")).bytes], []);
  });

  test("anything else is a TypeError thrown at the call, naming the accepted types, and nothing is sent", async () => {
    const { sup, rt } = await wired();
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic["self"] = cyclic;
    const cases: [unknown, RegExp][] = [
      [() => 1, /got a function;/],
      [Symbol("s"), /got a symbol;/],
      [10n, /got a BigInt \(10n; send it as a string or a number\)/],
      [undefined, /got undefined;/],
      [NaN, /got the number NaN \(JSON has no NaN\)/],
      [-Infinity, /got the number -Infinity/],
      [cyclic, /got a cyclic object;/],
      [{ order: 1, total: 5n }, /got a BigInt \(5n; .*\) at key "total"/],
      [{ handler() {} }, /got a function at key "handler"/],
      [[1, undefined], /got undefined at index 1/],
      [{ m: new Map([[1, 2]]) }, /got a Map .* at key "m"/],
      [new ArrayBuffer(2), /got an ArrayBuffer \(wrap it: new Uint8Array\(buffer\)\)/],
      [new Uint16Array(2), /got a Uint16Array/],
      ["lone \ud800", /got a string with a lone surrogate/],
      [{ toJSON: () => { throw new Error("boom"); } }, /an object JSON cannot encode \(boom\)/],
    ];
    for (const [data, pattern] of cases) {
      assert.throws(
        () => void rt.custom("k", data as never),
        (e: unknown) => {
          assert.ok(e instanceof TypeError, `${String(e)}`);
          assert.match(e.message, /^rt\.custom\(kind, data\): data must be bytes \(a Uint8Array or Buffer\), a string \(sent as UTF-8\), or a JSON value \(an object, array, finite number, boolean or null, sent JSON-encoded\); got /);
          assert.match(e.message, pattern);
          assert.match(e.message, /nothing was sent$/);
          return true;
        },
        String(typeof data === "symbol" ? "symbol" : typeof data === "bigint" ? `${data}n` : data),
      );
    }
    for (const kind of [undefined, 7, null, { k: 1 }]) {
      assert.throws(() => void rt.custom(kind as never, "x"), (e: unknown) => e instanceof TypeError && /kind must be a string/.test(e.message));
    }
    // The channel is intact and nothing went out: the next event follows with no gap.
    assert.equal(rt.closeReason, null);
    await rt.custom("after", { fine: true });
    assert.deepEqual(await sup.until("Custom"), [{ type: "Custom", kind: "after", bytes: utf8('{"fine":true}') }]);
  });
});
