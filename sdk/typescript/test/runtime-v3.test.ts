/**
 * Protocol 3 against a scripted supervisor: the version negotiated from
 * WFHOST_PROTOCOL and WFHOST_PROTOCOL_MAX, MailStarted before an item's
 * other events, MailDone with the handler's result (and a result too large
 * for a frame), redeliveries of a done item, the signed cancel of one item
 * and its one verdict, an Answer nobody asked for ignored, and a child of version 2 sending no
 * version-3 message.
 */

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Cancelled, ConnectError, ENV_VARS, InvalidEvent, connect, readChildEnv, type HandleMailOptions, type MailHandler, type Runtime } from "../dist/index.js";
import type { Event } from "../dist/protocol/index.js";
import { FakeSupervisor, childEnv, replacer, signMailCancel, welcome } from "./support/supervisor.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanups.splice(0)) f();
});

const utf8 = (s: string) => new TextEncoder().encode(s);
const show = (events: Event[]) => JSON.stringify(events, replacer);

/** A connected runtime of protocol `protocol` (3 unless told) and its supervisor, Ready read. */
async function wired(opts: { protocol?: 2 | 3; limits?: Parameters<typeof welcome>[1] } = {}) {
  const protocol = opts.protocol ?? 3;
  const { sup, child } = await FakeSupervisor.pair();
  const env = childEnv("billing", protocol === 3 ? "3" : undefined);
  const lines: string[] = [];
  cleanups.push(() => sup.close());
  const connecting = connect({ env, socket: child, log: (l) => lines.push(l) });
  const hello = await sup.expect("Hello");
  sup.send(welcome("billing", opts.limits, "", protocol));
  const rt = await connecting;
  cleanups.push(() => void rt.close().catch(() => undefined));
  await rt.ready();
  await sup.expect("Ready");
  return { sup, rt, hello, lines };
}

/** Starts `rt.handleMail(handler, options)`, its promise kept for the end of the test. */
function serve(rt: Runtime, handler: MailHandler, options: HandleMailOptions = {}): Promise<void> {
  const p = rt.handleMail(handler, options);
  p.catch(() => undefined);
  return p;
}

function mail(id: bigint, payload = "x", attempt = 1) {
  return { type: "Mail" as const, id, attempt, payload: utf8(payload) };
}

const record = (id: bigint, deployment = "billing") => ({
  origin: "Operator" as const,
  deployment,
  id,
  reason: "operator cancel: wrong address",
  at_ms: 1_795_955_792_947n,
});

/** Events until one matching `pred`, skipping Pongs. */
async function untilMatch(sup: FakeSupervisor, pred: (e: Event) => boolean, ms = 5000): Promise<Event[]> {
  const seen: Event[] = [];
  for (;;) {
    const e = await sup.next(ms);
    if (e.type === "Pong") continue;
    seen.push(e);
    if (pred(e)) return seen;
  }
}

const doneOf = (id: bigint) => (e: Event) => e.type === "MailDone" && e.id === id;

describe("negotiation", () => {
  test("the newest version both speak: 3 within [2, 3], 2 without WFHOST_PROTOCOL_MAX", () => {
    const base = childEnv();
    const cases: [string, string | undefined, number][] = [
      ["2", undefined, 2],
      ["2", "3", 3],
      ["2", "4", 3],
      ["3", "3", 3],
      ["3", undefined, 3],
      ["2", "2", 2],
    ];
    for (const [oldest, newest, want] of cases) {
      const env: Record<string, string | undefined> = { ...base, WFHOST_PROTOCOL: oldest, WFHOST_PROTOCOL_MAX: newest };
      assert.equal(readChildEnv(env).protocol, want, `WFHOST_PROTOCOL=${oldest} WFHOST_PROTOCOL_MAX=${newest}`);
    }
  });

  test("no version in common: refused, naming both variables", () => {
    const base = childEnv();
    for (const [oldest, newest] of [
      ["1", undefined],
      ["4", "5"],
      ["3", "2"],
      ["1", "1"],
    ] as const) {
      const env: Record<string, string | undefined> = { ...base, WFHOST_PROTOCOL: oldest, WFHOST_PROTOCOL_MAX: newest };
      assert.throws(
        () => readChildEnv(env),
        (e: unknown) => {
          assert.ok(e instanceof ConnectError);
          assert.match(e.message, /WFHOST_PROTOCOL=/);
          assert.match(e.message, /WFHOST_PROTOCOL_MAX/);
          assert.match(e.message, /this child speaks protocol 2 to 3: no version in common/);
          return true;
        },
        `${oldest} ${newest}`,
      );
    }
    assert.throws(() => readChildEnv({ ...base, WFHOST_PROTOCOL_MAX: "three" }), /WFHOST_PROTOCOL_MAX="three" is unusable: not a version number/);
  });

  test("Hello says 3 under a supervisor of 2 to 3, and the Welcome must say it too", async () => {
    const { hello, rt } = await wired();
    assert.equal(hello.protocol, 3);
    assert.equal(rt.protocol, 3);
    const { sup, child } = await FakeSupervisor.pair();
    cleanups.push(() => sup.close());
    const connecting = connect({ env: childEnv("billing", "3"), socket: child, log: () => undefined });
    assert.equal((await sup.expect("Hello")).protocol, 3);
    sup.send(welcome("billing", {}, "", 2));
    await assert.rejects(connecting, (e: unknown) => e instanceof ConnectError && /Welcome speaks protocol 2 but this child speaks 3/.test(e.message));
  });

  test("readChildEnv and connect({ protocol: 2 }) hold the child to version 2 although 3 is offered", async () => {
    assert.equal(readChildEnv(childEnv("billing", "3"), 2).protocol, 2);
    assert.throws(() => readChildEnv({ ...childEnv("billing", "3"), WFHOST_PROTOCOL: "3" }, 2), /this child speaks protocol 2: no version in common/);
    const { sup, child } = await FakeSupervisor.pair();
    cleanups.push(() => sup.close());
    const connecting = connect({ env: childEnv("billing", "3"), socket: child, log: () => undefined, protocol: 2 });
    assert.equal((await sup.expect("Hello")).protocol, 2);
    sup.send(welcome("billing", {}, "", 2));
    const rt = await connecting;
    cleanups.push(() => void rt.close().catch(() => undefined));
    assert.equal(rt.protocol, 2);
    await assert.rejects(connect({ env: childEnv(), socket: child, protocol: 4 as never }), /connect\(\{ protocol \}\) is 2 or 3, got 4/);
  });

  test("WFHOST_PROTOCOL_MAX is one of the variables removed from what the child's programs inherit", () => {
    assert.ok((ENV_VARS as readonly string[]).includes("WFHOST_PROTOCOL_MAX"));
    assert.equal(ENV_VARS.length, 6);
  });
});

describe("mail in protocol 3", () => {
  test("MailStarted comes before the item's other events, MailDone carries the result, and no MailAck is sent", async () => {
    const { sup, rt } = await wired();
    serve(rt, async (m) => {
      await rt.custom("took", m.id.toString());
      await rt.step(`mail-${m.id}`, "work", "cancel", () => sleep(20));
      await rt.runTerminal(`mail-${m.id}`, "succeeded");
      return Uint8Array.of(0x00, 0xff, 0x80, 0x0a);
    });
    sup.send(mail(17n));
    const events = await untilMatch(sup, doneOf(17n));
    assert.deepEqual(
      events.map((e) => e.type),
      ["MailStarted", "Custom", "StepStarted", "StepFinished", "RunTerminal", "MailDone"],
      show(events),
    );
    assert.deepEqual(events[0], { type: "MailStarted", id: 17n, cancellable: true });
    assert.deepEqual(events.at(-1), { type: "MailDone", id: 17n, outcome: { kind: "Succeeded" }, result: Uint8Array.of(0x00, 0xff, 0x80, 0x0a) });
    assert.deepEqual(await sup.quiet(100), [], "nothing more, no MailAck");
  });

  test("the handler's value is the result: bytes as they are, a string as UTF-8, nothing for undefined and null, JSON for the rest", async () => {
    const { sup, rt } = await wired();
    const values: unknown[] = [
      Uint8Array.of(1, 2),
      Buffer.from("buf"),
      "héllo",
      undefined,
      null,
      { total: 9, items: ["a"] },
      [1, 2],
      42,
      false,
    ];
    const want: Uint8Array[] = [
      Uint8Array.of(1, 2),
      utf8("buf"),
      utf8("héllo"),
      new Uint8Array(0),
      new Uint8Array(0),
      utf8('{"total":9,"items":["a"]}'),
      utf8("[1,2]"),
      utf8("42"),
      utf8("false"),
    ];
    serve(rt, (m) => values[Number(m.id)] as never);
    for (let i = 0; i < values.length; i++) {
      sup.send(mail(BigInt(i)));
      const done = (await untilMatch(sup, doneOf(BigInt(i)))).at(-1)!;
      assert.ok(done.type === "MailDone");
      assert.deepEqual(done.outcome, { kind: "Succeeded" });
      assert.deepEqual([...done.result], [...want[i]!], `value ${String(values[i])}`);
    }
  });

  test("a throwing handler ends its item Failed(message); a Cancelled ends it Cancelled; a result JSON cannot carry ends it Failed, logged", async () => {
    const { sup, rt, lines } = await wired();
    serve(rt, (m) => {
      if (m.id === 1n) throw new Error("card declined");
      if (m.id === 2n) throw new Cancelled("drain");
      return { total: 5n };
    });
    sup.send(mail(1n));
    assert.deepEqual((await untilMatch(sup, doneOf(1n))).at(-1), {
      type: "MailDone",
      id: 1n,
      outcome: { kind: "Failed", reason: "card declined" },
      result: new Uint8Array(0),
    });
    sup.send(mail(2n));
    assert.deepEqual((await untilMatch(sup, doneOf(2n))).at(-1), { type: "MailDone", id: 2n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) });
    sup.send(mail(3n));
    const done = (await untilMatch(sup, doneOf(3n))).at(-1)!;
    assert.ok(done.type === "MailDone" && done.outcome.kind === "Failed");
    assert.match(done.outcome.reason, /^the result of mail 3 must be bytes .* got a BigInt \(5n; .*\) at key "total"/);
    assert.ok(lines.some((l) => l.startsWith("mail 3: the result of mail 3 must be")), lines.join("\n"));
  });

  test("a result too large for a frame ends the item Failed naming max_frame_bytes, is logged, and the next item goes on", async () => {
    const { sup, rt, lines } = await wired({ limits: { max_frame_bytes: 65_536 } });
    serve(rt, (m) => (m.id === 1n ? new Uint8Array(100_000).fill(0x72) : "next"));
    sup.send(mail(1n));
    const done = (await untilMatch(sup, doneOf(1n))).at(-1);
    const reason = "result of 100000 bytes does not fit in a frame of max_frame_bytes 65536";
    assert.deepEqual(done, { type: "MailDone", id: 1n, outcome: { kind: "Failed", reason }, result: new Uint8Array(0) });
    assert.ok(lines.some((l) => l.includes(reason)), lines.join("\n"));
    sup.send(mail(2n));
    assert.deepEqual((await untilMatch(sup, doneOf(2n))).at(-1), { type: "MailDone", id: 2n, outcome: { kind: "Succeeded" }, result: utf8("next") });
  });

  test("mail.ack with a result too large for a frame rejects with InvalidEvent, the item ended Failed; a result that fits goes", async () => {
    const { sup, rt } = await wired({ limits: { max_frame_bytes: 65_536 } });
    const it = rt.mail();
    sup.send(mail(3n));
    const m = (await it.next()).value!;
    await assert.rejects(m.ack("succeeded", new Uint8Array(70_000)), (e: unknown) => e instanceof InvalidEvent && e.tooLarge && /ended Failed/.test(e.message));
    const done3 = (await untilMatch(sup, doneOf(3n))).at(-1);
    assert.ok(done3?.type === "MailDone" && done3.outcome.kind === "Failed" && /result of 70000 bytes/.test(done3.outcome.reason));
    // A result just under the limit goes.
    sup.send(mail(4n));
    const n = (await it.next()).value!;
    await n.ack("succeeded", new Uint8Array(65_000));
    const done4 = (await untilMatch(sup, doneOf(4n))).at(-1);
    assert.ok(done4?.type === "MailDone" && done4.result.length === 65_000);
  });

  test("a redelivered done item gets its MailDone again with the same outcome, without running again; a duplicate in progress is ignored", async () => {
    const { sup, rt, lines } = await wired();
    let runs = 0;
    serve(rt, async () => {
      runs++;
      await sleep(50);
      throw new Error("bad input");
    });
    sup.send(mail(7n));
    sup.send(mail(7n));
    const first = (await untilMatch(sup, doneOf(7n))).at(-1);
    assert.deepEqual(first, { type: "MailDone", id: 7n, outcome: { kind: "Failed", reason: "bad input" }, result: new Uint8Array(0) });
    sup.send(mail(7n, "x", 2));
    assert.deepEqual((await untilMatch(sup, doneOf(7n))).at(-1), first);
    assert.equal(runs, 1);
    assert.ok(lines.some((l) => l.includes("mail 7 redelivered after it was done; sending its MailDone again")), lines.join("\n"));
    assert.ok(lines.some((l) => l.includes("mail 7 delivered again while still in progress; ignored")));
  });

  test("the iterator starts an item as it hands it out; ack(outcome, result) ends it with MailDone", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail({ cancellable: false });
    sup.send(mail(5n));
    const m = (await it.next()).value!;
    assert.deepEqual(await sup.expect("MailStarted"), { type: "MailStarted", id: 5n, cancellable: false });
    await m.ack("succeeded", { ok: true });
    assert.deepEqual(await sup.expect("MailDone"), { type: "MailDone", id: 5n, outcome: { kind: "Succeeded" }, result: utf8('{"ok":true}') });
    await assert.rejects(m.ack("succeeded"), /already acked/);
    sup.send(mail(6n));
    const n = (await it.next()).value!;
    await sup.expect("MailStarted");
    await assert.rejects(n.ack("succeeded", () => 1), TypeError, "a result JSON cannot carry changes nothing");
    assert.equal(n.settled, false);
    await n.ack({ failed: "no" });
    assert.equal((await sup.expect("MailDone")).outcome.kind, "Failed");
  });

  test("items received but not started are not acknowledged when a drain comes", async () => {
    const { sup, rt } = await wired();
    const handled: bigint[] = [];
    const done = serve(
      rt,
      async (m) => {
        handled.push(m.id);
        await sleep(200);
        return "one";
      },
      { concurrency: 1 },
    );
    sup.send(mail(1n));
    sup.send(mail(2n));
    await sup.expect("MailStarted");
    sup.send({ type: "Drain", budget_ms: 1000n });
    const events = await sup.until("Drained");
    assert.deepEqual(
      events.map((e) => `${e.type}${"id" in e ? ` ${e.id}` : ""}`),
      ["MailDone 1", "Drained"],
      "item 2 was never started, nor acknowledged",
    );
    await done;
    assert.deepEqual(handled, [1n]);
    assert.deepEqual(await sup.quiet(100), []);
  });
});

describe("cancel of one item", () => {
  test("Acknowledged within 1 s: that item's signal fires and its run is cancelled; MailDone Cancelled; the other item goes on", async () => {
    const { sup, rt, lines } = await wired();
    const signals = new Map<bigint, AbortSignal>();
    serve(rt, async (m) => {
      signals.set(m.id, m.signal);
      const run = `mail-${m.id}`;
      try {
        await rt.step(run, "fetch", "cancel", (signal) => sleep(m.id === 17n ? 5000 : 400, undefined, { signal }));
      } catch (e) {
        await rt.runTerminal(run, "cancelled");
        throw e;
      }
      await rt.runTerminal(run, "succeeded");
      return "done";
    });
    sup.send(mail(17n));
    sup.send(mail(18n));
    await untilMatch(sup, (e) => e.type === "StepStarted" && e.run === "mail-18");
    const t0 = performance.now();
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(17n)) });
    const events = await untilMatch(sup, doneOf(17n));
    assert.deepEqual(events[0], { type: "MailCancelVerdict", id: 17n, verdict: { kind: "Acknowledged" } }, show(events));
    assert.ok(performance.now() - t0 < 1000);
    assert.deepEqual(events.slice(1), [
      { type: "StepFinished", run: "mail-17", step: "fetch", outcome: { kind: "Cancelled" } },
      { type: "RunTerminal", run: "mail-17", outcome: { kind: "Cancelled" } },
      { type: "MailDone", id: 17n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) },
    ]);
    const reason = signals.get(17n)!.reason as Cancelled;
    assert.ok(reason instanceof Cancelled);
    assert.equal(reason.cause, "cancel");
    assert.equal(reason.origin, "operator");
    assert.equal(reason.reason, "operator cancel: wrong address");
    assert.equal(signals.get(18n)!.aborted, false, "only that item's signal");
    const rest = await untilMatch(sup, doneOf(18n));
    assert.deepEqual(rest.at(-1), { type: "MailDone", id: 18n, outcome: { kind: "Succeeded" }, result: utf8("done") });
    assert.ok(!rest.some((e) => e.type === "RunTerminal" && e.run === "mail-17"), "the run ended once");
    assert.ok(lines.some((l) => l.startsWith("cancel of mail 17 acknowledged (origin operator")), lines.join("\n"));
  });

  test("an item received but not started: Acknowledged, then MailDone Cancelled at once, and it is never started", async () => {
    const { sup, rt } = await wired();
    const handled: bigint[] = [];
    serve(
      rt,
      async (m) => {
        handled.push(m.id);
        await sleep(300);
      },
      { concurrency: 1 },
    );
    sup.send(mail(1n));
    sup.send(mail(2n));
    assert.deepEqual(await sup.expect("MailStarted"), { type: "MailStarted", id: 1n, cancellable: true });
    sup.send({ type: "CancelMail", cancel: signMailCancel({ ...record(2n), origin: "Deadline" }) });
    assert.deepEqual(await sup.next(), { type: "MailCancelVerdict", id: 2n, verdict: { kind: "Acknowledged" } });
    assert.deepEqual(await sup.next(), { type: "MailDone", id: 2n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) });
    assert.deepEqual((await untilMatch(sup, doneOf(1n))).map((e) => e.type), ["MailDone"]);
    assert.deepEqual(await sup.quiet(150), [], "item 2 is never started");
    assert.deepEqual(handled, [1n]);
    sup.send(mail(2n, "x", 2));
    assert.deepEqual(await sup.next(), { type: "MailDone", id: 2n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) }, "remembered as done");
  });

  test("a handler that cannot be cancelled: MailStarted cancellable false, NotSupported, it succeeds; a drain still cancels its cancel steps", async () => {
    const { sup, rt } = await wired();
    serve(
      rt,
      async (m) => {
        if (m.id === 2n) {
          try {
            await rt.step("r2", "fetch", "cancel", (signal) => sleep(5000, undefined, { signal }));
          } catch (e) {
            return `drained: ${(e as Cancelled).cause}`;
          }
        }
        await sleep(200);
        return m.signal.aborted ? "aborted" : "finished";
      },
      { cancellable: (m) => m.text() !== "stubborn" },
    );
    sup.send(mail(1n, "stubborn"));
    assert.deepEqual(await sup.expect("MailStarted"), { type: "MailStarted", id: 1n, cancellable: false });
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(1n)) });
    assert.deepEqual(await sup.expect("MailCancelVerdict"), { type: "MailCancelVerdict", id: 1n, verdict: { kind: "NotSupported" } });
    assert.deepEqual(await sup.expect("MailDone"), { type: "MailDone", id: 1n, outcome: { kind: "Succeeded" }, result: utf8("finished") });
    sup.send(mail(2n, "stubborn"));
    await untilMatch(sup, (e) => e.type === "StepStarted");
    sup.send({ type: "Drain", budget_ms: 1000n });
    const events = await sup.until("Drained");
    assert.deepEqual(events.slice(-2), [
      { type: "MailDone", id: 2n, outcome: { kind: "Succeeded" }, result: utf8("drained: drain") },
      { type: "Drained" },
    ]);
  });

  test("refused with one verdict naming why: an item not held, a forged signature, another deployment; the item goes on", async () => {
    const { sup, rt, lines } = await wired();
    serve(rt, async () => {
      await sleep(300);
      return "ok";
    });
    sup.send(mail(17n));
    await sup.expect("MailStarted");
    const good = signMailCancel(record(17n));
    const flipped = new Uint8Array(good.signature);
    flipped[0] = (flipped[0] as number) ^ 1;
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(9n)) });
    sup.send({ type: "CancelMail", cancel: { ...good, signature: flipped } });
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(17n, "payroll")) });
    sup.send({ type: "CancelMail", cancel: { ...good, key_id: new Uint8Array(8) } });
    const verdicts = [];
    for (let i = 0; i < 4; i++) verdicts.push(await sup.expect("MailCancelVerdict"));
    assert.deepEqual(
      verdicts.map((v) => [v.id, v.verdict]),
      [
        [9n, { kind: "Refused", reason: "cancel is for mail item 9, which this child does not hold" }],
        [17n, { kind: "Refused", reason: "signature does not verify" }],
        [17n, { kind: "Refused", reason: 'cancel is for deployment "payroll", this is "billing"' }],
        [17n, { kind: "Refused", reason: "signed by unknown key 0000000000000000 (trusted key is 21fe31dfa154a261)" }],
      ],
    );
    assert.deepEqual(await sup.expect("MailDone"), { type: "MailDone", id: 17n, outcome: { kind: "Succeeded" }, result: utf8("ok") });
    assert.equal(lines.filter((l) => l.startsWith("refused cancel of mail")).length, 4, lines.join("\n"));
    sup.send({ type: "CancelMail", cancel: good });
    assert.deepEqual(await sup.expect("MailCancelVerdict"), {
      type: "MailCancelVerdict",
      id: 17n,
      verdict: { kind: "Refused", reason: "cancel is for mail item 17, which this child does not hold" },
    }, "a done item is no longer held");
  });

  test("a cancel between steps: the handler finishing anyway succeeds; a later step starts cancelled and ends its run", async () => {
    const { sup, rt } = await wired();
    let open: () => void = () => undefined;
    const gate = { promise: new Promise<void>((resolve) => (open = resolve)), resolve: () => open() };
    serve(rt, async (m) => {
      await rt.step(`mail-${m.id}`, "first", "wait", () => 1);
      await gate.promise;
      if (m.id === 1n) return "finished anyway";
      await rt.step(`mail-${m.id}`, "second", "wait", () => 2);
      return "never";
    });
    sup.send(mail(1n));
    await untilMatch(sup, (e) => e.type === "StepFinished");
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(1n)) });
    const events = await untilMatch(sup, (e) => e.type === "RunTerminal");
    assert.deepEqual(events, [
      { type: "MailCancelVerdict", id: 1n, verdict: { kind: "Acknowledged" } },
      { type: "RunTerminal", run: "mail-1", outcome: { kind: "Cancelled" } },
    ]);
    gate.resolve();
    assert.deepEqual(await sup.expect("MailDone"), { type: "MailDone", id: 1n, outcome: { kind: "Succeeded" }, result: utf8("finished anyway") });
  });

  test("a cancel before the handler's first step: its steps start cancelled; steps linked by the mail option too", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(3n));
    const m = (await it.next()).value!;
    await sup.expect("MailStarted");
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(3n)) });
    assert.equal((await sup.expect("MailCancelVerdict")).verdict.kind, "Acknowledged");
    assert.ok(m.signal.aborted);
    await assert.rejects(
      rt.step("r3", "late", "wait", () => 1, { mail: m }),
      (e: unknown) => e instanceof Cancelled && e.cause === "cancel",
    );
    assert.deepEqual(await sup.until("RunTerminal"), [
      { type: "StepStarted", run: "r3", step: "late", drain: "Wait" },
      { type: "StepFinished", run: "r3", step: "late", outcome: { kind: "Cancelled" } },
      { type: "RunTerminal", run: "r3", outcome: { kind: "Cancelled" } },
    ]);
    assert.equal(await rt.step("free", "s", "wait", () => 5), 5, "a step of no item is not touched");
    await m.ack("cancelled");
    assert.equal((await sup.until("MailDone")).at(-1)?.type, "MailDone");
  });

  test("Shutdown aborts a held item's signal as shutdown", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    sup.send({ type: "Shutdown" });
    await rt.closed;
    assert.equal((m.signal.reason as Cancelled).cause, "shutdown");
  });
});

describe("Answer, and protocol 2", () => {
  test("an Answer for an item this child does not hold is logged and ignored; the runtime goes on", async () => {
    const { sup, rt, lines } = await wired();
    sup.send({ type: "Answer", id: 17n, key: "approve", value: utf8('{"approved":true}') });
    sup.send({ type: "Ping", nonce: 3n });
    assert.deepEqual(await sup.expect("Pong"), { type: "Pong", nonce: 3n });
    assert.equal(rt.closeReason, null);
    assert.ok(lines.includes('Answer for mail 17 (key "approve", 17 bytes) ignored: this child does not hold that item'), lines.join("\n"));
  });

  test("a child of version 2 acknowledges with MailAck, sends no version-3 message, and drops the result", async () => {
    const { sup, rt, hello } = await wired({ protocol: 2 });
    assert.equal(hello.protocol, 2);
    assert.equal(rt.protocol, 2);
    serve(rt, async (m) => {
      await rt.step(`mail-${m.id}`, "s", "wait", () => 1);
      return "result";
    });
    sup.send(mail(1n));
    const events = await sup.until("MailAck");
    assert.deepEqual(events.map((e) => e.type), ["StepStarted", "StepFinished", "MailAck"]);
    assert.deepEqual(events.at(-1), { type: "MailAck", id: 1n, outcome: { kind: "Succeeded" } });
    sup.send(mail(1n));
    assert.deepEqual(await sup.until("MailAck"), [{ type: "MailAck", id: 1n, outcome: { kind: "Succeeded" } }]);
  });

  test("a version-3 message to a child of version 2 breaks the channel, as an unknown discriminant would", async () => {
    const { sup, rt, lines } = await wired({ protocol: 2 });
    sup.send({ type: "CancelMail", cancel: signMailCancel(record(1n)) });
    const reason = await rt.closed;
    assert.equal(reason.kind, "failed");
    assert.equal(reason.message, "protocol violation: CancelMail is a protocol-3 message, and this child speaks protocol 2");
    assert.ok(lines.some((l) => l.includes("CancelMail is a protocol-3 message")), lines.join("\n"));
  });
});
