/**
 * A person in the loop (docs/protocol.md §4.12) against a scripted
 * supervisor: `mail.ask` (Ask, Answer, the answers an item remembers, one
 * question for several waiters), give-back on Drain and on lease expiry
 * (GiveBack, the item forgotten, GivenBackError, nothing of the handler's
 * sent, Drained not held), an ask during a drain, a cancel while asking,
 * `mail.progress`, the local checks of keys, prompts and data, and
 * protocol 2.
 */

import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import {
  Cancelled,
  GivenBackError,
  InvalidEvent,
  MAX_ASK_JSON_BYTES,
  MAX_ASK_KEY_BYTES,
  connect,
  type HandleMailOptions,
  type Mail,
  type MailHandler,
  type Runtime,
} from "../dist/index.js";
import type { Event } from "../dist/protocol/index.js";
import { FakeSupervisor, childEnv, replacer, signMailCancel, welcome } from "./support/supervisor.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanups.splice(0)) f();
});

const utf8 = (s: string) => new TextEncoder().encode(s);
const show = (events: Event[]) => JSON.stringify(events, replacer);
const label = (e: Event) => `${e.type}${"id" in e ? ` ${e.id}` : ""}`;

async function wired(opts: { protocol?: 2 | 3 } = {}) {
  const protocol = opts.protocol ?? 3;
  const { sup, child } = await FakeSupervisor.pair();
  const lines: string[] = [];
  cleanups.push(() => sup.close());
  const connecting = connect({ env: childEnv("billing", protocol === 3 ? "3" : undefined), socket: child, log: (l) => lines.push(l) });
  await sup.expect("Hello");
  sup.send(welcome("billing", {}, "", protocol));
  const rt = await connecting;
  cleanups.push(() => void rt.close().catch(() => undefined));
  await rt.ready();
  await sup.expect("Ready");
  return { sup, rt, lines };
}

function serve(rt: Runtime, handler: MailHandler, options: HandleMailOptions = {}): Promise<void> {
  const p = rt.handleMail(handler, options);
  p.catch(() => undefined);
  return p;
}

const mail = (id: bigint, payload = "x", attempt = 1) => ({ type: "Mail" as const, id, attempt, payload: utf8(payload) });
const answer = (id: bigint, key: string, json: string) => ({ type: "Answer" as const, id, key, value: utf8(json) });

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
const askOf = (id: bigint) => (e: Event) => e.type === "Ask" && e.id === id;

/** How a promise settled, without waiting on it later. */
function settle<T>(p: Promise<T>): { outcome: Promise<{ ok: true; value: T } | { ok: false; error: unknown }> } {
  return { outcome: p.then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error })) };
}

const cancelRecord = (id: bigint) => ({
  origin: "Operator" as const,
  deployment: "billing",
  id,
  reason: "the customer changed their mind",
  at_ms: 1_795_955_792_947n,
});

describe("ask", () => {
  test("Ask carries the key and the prompt's JSON; the Answer resolves it with the parsed value; the handler's value is the result", async () => {
    const { sup, rt } = await wired();
    serve(rt, async (m) => {
      const a = await m.ask<{ approved: boolean; note: string }>("approve", { order: "A-17", total: 12.5, lines: ["x", "y"] });
      return { decided: a.approved, note: a.note };
    });
    sup.send(mail(17n));
    const events = await untilMatch(sup, askOf(17n));
    assert.deepEqual(events, [
      { type: "MailStarted", id: 17n, cancellable: true },
      { type: "Ask", id: 17n, key: "approve", prompt: utf8('{"order":"A-17","total":12.5,"lines":["x","y"]}') },
    ]);
    assert.deepEqual(await sup.quiet(100), [], "it waits for the answer");
    sup.send(answer(17n, "approve", '{"approved": true, "note": "ok by ana"}'));
    assert.deepEqual(await sup.next(), {
      type: "MailDone",
      id: 17n,
      outcome: { kind: "Succeeded" },
      result: utf8('{"decided":true,"note":"ok by ana"}'),
    });
  });

  test("a prompt that is a string goes as a JSON string; null, numbers and arrays as JSON", async () => {
    const { sup, rt } = await wired();
    const prompts: unknown[] = ["approve order 9?", null, 42, [1, "two"], { nested: { ok: false } }];
    serve(rt, async (m) => {
      for (let i = 0; i < prompts.length; i++) await m.ask(`q${i}`, prompts[i]);
      return "asked";
    });
    sup.send(mail(1n));
    await sup.expect("MailStarted");
    const want = ['"approve order 9?"', "null", "42", '[1,"two"]', '{"nested":{"ok":false}}'];
    for (let i = 0; i < prompts.length; i++) {
      assert.deepEqual(await sup.expect("Ask"), { type: "Ask", id: 1n, key: `q${i}`, prompt: utf8(want[i]!) });
      sup.send(answer(1n, `q${i}`, "true"));
    }
    assert.deepEqual((await sup.expect("MailDone")).result, utf8("asked"));
  });

  test("answers are remembered per item: an answered key returns at once without a frame; waiters on one key share one Ask", async () => {
    const { sup, rt } = await wired();
    const seen: unknown[] = [];
    serve(rt, async (m) => {
      // Two asks of one key at once, and one of another key.
      const [a, b, c] = await Promise.all([m.ask("approve", { n: 1 }), m.ask("approve", { n: 2 }), m.ask("size", null)]);
      seen.push(structuredClone(a), b, c);
      assert.notEqual(a, b, "each waiter gets its own copy of the answer");
      // Changing one's copy changes nobody else's, nor what is remembered.
      (a as { approved: boolean }).approved = false;
      const again = await m.ask("approve", { n: 3 });
      seen.push(again);
      return "ok";
    });
    sup.send(mail(5n));
    const events = await untilMatch(sup, (e) => e.type === "Ask" && e.key === "size");
    assert.deepEqual(events.map(label), ["MailStarted 5", "Ask 5", "Ask 5"], show(events));
    assert.deepEqual(events[1], { type: "Ask", id: 5n, key: "approve", prompt: utf8('{"n":1}') }, "one question for both waiters");
    sup.send(answer(5n, "approve", '{"approved":true}'));
    assert.deepEqual(await sup.quiet(100), [], "the other key still waits");
    sup.send(answer(5n, "size", '"XL"'));
    assert.deepEqual(await sup.next(), { type: "MailDone", id: 5n, outcome: { kind: "Succeeded" }, result: utf8("ok") }, "no second Ask");
    assert.deepEqual(seen, [{ approved: true }, { approved: true }, "XL", { approved: true }]);
  });

  test("an Answer nobody waits for is ignored and logged: another item, another key, a key already answered", async () => {
    const { sup, rt, lines } = await wired();
    let resolved: unknown = "not yet";
    serve(rt, async (m) => {
      resolved = await m.ask("approve", null);
      await m.ask("approve", null);
      return JSON.stringify(resolved);
    });
    sup.send(mail(3n));
    await untilMatch(sup, askOf(3n));
    sup.send(answer(4n, "approve", "true"));
    sup.send(answer(3n, "other", "true"));
    sup.send({ type: "Ping", nonce: 1n });
    assert.deepEqual(await sup.expect("Pong"), { type: "Pong", nonce: 1n });
    assert.equal(resolved, "not yet");
    sup.send(answer(3n, "approve", '{"by":"ana"}'));
    assert.deepEqual((await sup.expect("MailDone")).result, utf8('{"by":"ana"}'));
    sup.send(answer(3n, "approve", '{"by":"bo"}'));
    sup.send({ type: "Ping", nonce: 2n });
    assert.deepEqual(await sup.expect("Pong"), { type: "Pong", nonce: 2n });
    assert.equal(rt.closeReason, null);
    assert.ok(lines.some((l) => l === 'Answer for mail 4 (key "approve", 4 bytes) ignored: this child does not hold that item'), lines.join("\n"));
    assert.ok(lines.some((l) => l === 'Answer for mail 3 (key "other", 4 bytes) ignored: no ask of that key waits for it'), lines.join("\n"));
    assert.ok(lines.some((l) => l.startsWith('Answer for mail 3 (key "approve", 11 bytes) ignored: this child does not hold that item')), lines.join("\n"));
  });

  test("an answer that is not JSON fails the ask with a SyntaxError naming the item and key: the item ends Failed", async () => {
    const { sup, rt } = await wired();
    serve(rt, (m) => m.ask("approve", null));
    sup.send(mail(8n));
    await untilMatch(sup, askOf(8n));
    sup.send(answer(8n, "approve", "{nope"));
    const done = await sup.expect("MailDone");
    assert.ok(done.outcome.kind === "Failed", show([done]));
    assert.match(done.outcome.reason, /^mail 8: the answer to "approve" is not JSON \(/);
  });

  test("ask from a rt.mail() loop: the item in hand asks, and acks with the answer", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(2n));
    const m = (await it.next()).value!;
    const asked = m.ask("approve", "ok?");
    assert.deepEqual(await untilMatch(sup, askOf(2n)), [
      { type: "MailStarted", id: 2n, cancellable: true },
      { type: "Ask", id: 2n, key: "approve", prompt: utf8('"ok?"') },
    ]);
    sup.send(answer(2n, "approve", "false"));
    assert.equal(await asked, false);
    await m.ack("succeeded", "no");
    assert.deepEqual(await sup.expect("MailDone"), { type: "MailDone", id: 2n, outcome: { kind: "Succeeded" }, result: utf8("no") });
    await assert.rejects(m.ask("approve", null), (e: unknown) => e instanceof InvalidEvent && /mail 2 was already acked; ask\("approve"\) is for an item in hand/.test(e.message));
  });
});

describe("give-back", () => {
  test("on Drain every asking item is given back: GiveBack, its ask fails GivenBackError, nothing of its handler is sent; the other item ends, then Drained", async () => {
    const { sup, rt, lines } = await wired();
    const errors = new Map<bigint, unknown>();
    let laterReturned = 0;
    const done = serve(rt, async (m) => {
      if (m.id === 3n) {
        await rt.step(`mail-${m.id}`, "short", "wait", () => sleep(150));
        return "step done";
      }
      try {
        await m.ask("approve", { id: Number(m.id) });
      } catch (e) {
        errors.set(m.id, e);
        if (m.id === 2n) {
          // A handler that swallows the error and returns: discarded.
          laterReturned++;
          return "ignored result";
        }
        throw e;
      }
      return "never";
    });
    sup.send(mail(1n));
    sup.send(mail(2n));
    sup.send(mail(3n));
    const before: Event[] = [];
    while (!(["Ask 1", "Ask 2", "StepStarted"] as const).every((l) => before.some((e) => label(e) === l))) before.push(await sup.next());
    sup.send({ type: "Drain", budget_ms: 5000n });
    const events = await sup.until("Drained");
    const order = events.filter((e) => e.type !== "Ask" && e.type !== "MailStarted" && e.type !== "StepFinished").map(label);
    assert.deepEqual(order, ["GiveBack 1", "GiveBack 2", "MailDone 3", "Drained"], show(events));
    assert.deepEqual(events.find((e) => e.type === "GiveBack"), { type: "GiveBack", id: 1n, awaiting_answer: true });
    await done;
    assert.deepEqual(await sup.quiet(150), [], "no MailDone for the given-back items, ever");
    for (const id of [1n, 2n]) {
      const e = errors.get(id);
      assert.ok(e instanceof GivenBackError, String(e));
      assert.equal(e.id, id);
      assert.equal(e.key, "approve");
      assert.match(e.message, new RegExp(`^mail ${id} was given back to the supervisor while it waited for the answer to "approve"`));
    }
    assert.equal(laterReturned, 1);
    assert.ok(lines.some((l) => l.startsWith('mail 1: given back while it waited for the answer to "approve"')), lines.join("\n"));
    // The supervisor now owns the items: a cancel of one is refused, an Answer ignored.
    sup.send({ type: "CancelMail", cancel: signMailCancel(cancelRecord(1n)) });
    assert.deepEqual(await sup.expect("MailCancelVerdict"), {
      type: "MailCancelVerdict",
      id: 1n,
      verdict: { kind: "Refused", reason: "cancel is for mail item 1, which this child does not hold" },
    });
  });

  test("when every item in hand is given back, Drained follows at once; the given-back item's ack, ask and progress refuse with GivenBackError", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(9n));
    const m: Mail = (await it.next()).value!;
    const waiting = settle(m.ask("approve", null));
    await untilMatch(sup, askOf(9n));
    sup.send({ type: "Drain", budget_ms: 5000n });
    assert.deepEqual(await sup.until("Drained"), [{ type: "GiveBack", id: 9n, awaiting_answer: true }, { type: "Drained" }]);
    const r = await waiting.outcome;
    assert.ok(!r.ok && r.error instanceof GivenBackError);
    assert.equal(m.settled, true);
    await assert.rejects(m.ack("succeeded", "x"), (e: unknown) => e instanceof GivenBackError && /its outcome is not sent/.test((e as Error).message));
    await assert.rejects(m.ask("approve", null), (e: unknown) => e instanceof GivenBackError && e.key === "approve");
    assert.throws(() => m.progress({ at: 1 }), GivenBackError);
    m.release();
    sup.send(answer(9n, "approve", "true"));
    assert.deepEqual(await sup.quiet(150), [], "nothing is sent for it any more");
    assert.equal((await it.next()).done, true);
  });

  test("an ask that begins after the drain began gives its item back at once; an answer already held is returned instead", async () => {
    const { sup, rt } = await wired();
    const outcomes = new Map<bigint, unknown>();
    const done = serve(rt, async (m) => {
      if (m.id === 2n) {
        await m.ask("first", null);
      }
      // A wait step the drain waits for, then a question.
      await rt.step(`mail-${m.id}`, "prepare", "wait", () => sleep(200));
      try {
        outcomes.set(m.id, await m.ask(m.id === 2n ? "first" : "approve", null));
      } catch (e) {
        outcomes.set(m.id, e);
        throw e;
      }
      return "finished";
    });
    sup.send(mail(1n));
    sup.send(mail(2n));
    await untilMatch(sup, askOf(2n));
    sup.send(answer(2n, "first", '"yes"'));
    await untilMatch(sup, (e) => e.type === "StepStarted" && e.run === "mail-2");
    sup.send({ type: "Drain", budget_ms: 5000n });
    const events = await sup.until("Drained");
    assert.deepEqual(
      events.filter((e) => e.type === "GiveBack" || e.type === "MailDone" || e.type === "Ask" || e.type === "Drained").map(label),
      ["GiveBack 1", "MailDone 2", "Drained"],
      show(events),
    );
    await done;
    assert.ok(outcomes.get(1n) instanceof GivenBackError, "item 1 asked during the drain: given back, no Ask sent");
    assert.equal(outcomes.get(2n), "yes", "item 2's answer was held: returned without a frame");
  });

  test("a lease that runs out gives asking items back too", async () => {
    const { sup, rt, lines } = await wired();
    const done = serve(rt, (m) => m.ask("approve", null));
    sup.send(mail(4n));
    await untilMatch(sup, askOf(4n));
    sup.send({ type: "Lease", valid_ms: 150n });
    assert.deepEqual(await sup.until("Drained", 3000), [{ type: "GiveBack", id: 4n, awaiting_answer: true }, { type: "Drained" }]);
    await done;
    assert.ok(lines.some((l) => l.startsWith("lease ran out")), lines.join("\n"));
  });

  test("an item whose handler does not ask is not given back by a drain", async () => {
    const { sup, rt } = await wired();
    serve(rt, async (m) => {
      const a = await m.ask("approve", null);
      await sleep(150);
      return JSON.stringify(a);
    });
    sup.send(mail(6n));
    await untilMatch(sup, askOf(6n));
    sup.send(answer(6n, "approve", "1"));
    // The answer and the drain in one burst: the answer came first, so the handler no longer asks.
    sup.send({ type: "Drain", budget_ms: 5000n });
    assert.deepEqual((await sup.until("Drained")).map(label), ["MailDone 6", "Drained"]);
  });
});

describe("cancel while asking, and the runtime closing", () => {
  test("a cancel of the item fails its ask as cancelled: verdict Acknowledged, MailDone Cancelled; a late Answer is ignored", async () => {
    const { sup, rt } = await wired();
    let error: unknown = null;
    serve(rt, async (m) => {
      try {
        return await m.ask("approve", null);
      } catch (e) {
        error = e;
        throw e;
      }
    });
    sup.send(mail(17n));
    await untilMatch(sup, askOf(17n));
    sup.send({ type: "CancelMail", cancel: signMailCancel(cancelRecord(17n)) });
    assert.deepEqual(await sup.next(), { type: "MailCancelVerdict", id: 17n, verdict: { kind: "Acknowledged" } });
    assert.deepEqual(await sup.next(), { type: "MailDone", id: 17n, outcome: { kind: "Cancelled" }, result: new Uint8Array(0) });
    assert.ok(error instanceof Cancelled);
    assert.equal(error.cause, "cancel");
    assert.equal(error.reason, "the customer changed their mind");
    sup.send(answer(17n, "approve", "true"));
    assert.deepEqual(await sup.quiet(100), []);
  });

  test("an ask after the item's cancel rejects at once with the cancel, sending nothing", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    await sup.expect("MailStarted");
    sup.send({ type: "CancelMail", cancel: signMailCancel(cancelRecord(1n)) });
    await sup.expect("MailCancelVerdict");
    await assert.rejects(m.ask("approve", null), (e: unknown) => e instanceof Cancelled && e.cause === "cancel");
    assert.deepEqual(await sup.quiet(100), []);
  });

  test("Shutdown while asking rejects the ask as shutdown, and the handler ends", async () => {
    const { sup, rt } = await wired();
    let error: unknown = null;
    const done = serve(rt, async (m) => {
      try {
        await m.ask("approve", null);
      } catch (e) {
        error = e;
      }
    });
    sup.send(mail(1n));
    await untilMatch(sup, askOf(1n));
    sup.send({ type: "Shutdown" });
    await rt.closed;
    await done;
    assert.ok(error instanceof Cancelled && error.cause === "shutdown", String(error));
  });
});

describe("progress", () => {
  test("Progress frames in order with the data's JSON; it does not wait; the item goes on", async () => {
    const { sup, rt } = await wired();
    serve(rt, (m) => {
      m.progress({ done: 1, of: 3 });
      m.progress("half way");
      m.progress(null);
      m.progress([1.5, true]);
      return "ok";
    });
    sup.send(mail(7n));
    const events = await untilMatch(sup, doneOf(7n));
    assert.deepEqual(events, [
      { type: "MailStarted", id: 7n, cancellable: true },
      { type: "Progress", id: 7n, data: utf8('{"done":1,"of":3}') },
      { type: "Progress", id: 7n, data: utf8('"half way"') },
      { type: "Progress", id: 7n, data: utf8("null") },
      { type: "Progress", id: 7n, data: utf8("[1.5,true]") },
      { type: "MailDone", id: 7n, outcome: { kind: "Succeeded" }, result: utf8("ok") },
    ]);
  });

  test("data over 64 KiB or not JSON is refused at the call, nothing sent; exactly 64 KiB goes", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    await sup.expect("MailStarted");
    const exact = "p".repeat(MAX_ASK_JSON_BYTES - 2);
    assert.throws(
      () => m.progress(`${exact}p`),
      (e: unknown) => e instanceof InvalidEvent && e.message === "mail 1: progress data of 65537 bytes of JSON is over the limit of 65536; nothing was sent",
    );
    for (const bad of [undefined, () => 1, 5n, NaN, { a: new Map() }, Uint8Array.of(1), "\ud800", { k: ["\udc00"] }]) {
      assert.throws(() => m.progress(bad), TypeError, String(bad));
    }
    const cyclic: Record<string, unknown> = {};
    cyclic["self"] = cyclic;
    assert.throws(() => m.progress(cyclic), /a cyclic object/);
    assert.throws(() => m.progress({ "\ud800": 1 }), /a key with a lone surrogate/);
    m.progress(exact);
    const p = await sup.expect("Progress");
    assert.equal(p.data.length, MAX_ASK_JSON_BYTES);
    assert.deepEqual(await sup.quiet(50), [], "only the one that fits was sent");
    await m.ack("succeeded");
  });
});

describe("local checks, and protocol 2", () => {
  test("keys of 1 to 256 bytes and prompts of at most 64 KiB of JSON; anything else rejects, nothing sent", async () => {
    const { sup, rt } = await wired();
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    await sup.expect("MailStarted");
    const bad: [string, unknown, (e: unknown) => boolean][] = [
      ["", null, (e) => e instanceof InvalidEvent && /the key must be 1 to 256 bytes of UTF-8, got 0/.test((e as Error).message)],
      ["k".repeat(300), null, (e) => e instanceof InvalidEvent && /got 300; nothing was sent/.test((e as Error).message)],
      ["é".repeat(129), null, (e) => e instanceof InvalidEvent && /got 258/.test((e as Error).message)],
      ["\ud800", null, (e) => e instanceof InvalidEvent && /lone surrogate/.test((e as Error).message)],
      [5 as unknown as string, null, (e) => e instanceof TypeError && /key must be a string, got number/.test((e as Error).message)],
      ["k", 5n, (e) => e instanceof TypeError && /the prompt of ask\("k"\) must be a JSON value .* got a BigInt/.test((e as Error).message)],
      ["k", undefined, (e) => e instanceof TypeError],
      ["k", "p".repeat(MAX_ASK_JSON_BYTES - 1), (e) => e instanceof InvalidEvent && /is 65537 bytes of JSON, over the limit of 65536/.test((e as Error).message)],
    ];
    for (const [key, prompt, check] of bad) await assert.rejects(m.ask(key, prompt), check, `${key.length} ${String(prompt).slice(0, 10)}`);
    assert.deepEqual(await sup.quiet(50), [], "nothing was sent");
    const longest = "é".repeat(MAX_ASK_KEY_BYTES / 2);
    const asked = m.ask(longest, "p".repeat(MAX_ASK_JSON_BYTES - 2));
    const ask = await sup.expect("Ask");
    assert.equal(ask.key, longest);
    assert.equal(ask.prompt.length, MAX_ASK_JSON_BYTES);
    sup.send(answer(1n, longest, "{}"));
    assert.deepEqual(await asked, {});
    await m.ack("succeeded");
  });

  test("a child of protocol 2: ask and progress fail at once naming protocol 2, and nothing is sent", async () => {
    const { sup, rt } = await wired({ protocol: 2 });
    const it = rt.mail();
    sup.send(mail(1n));
    const m = (await it.next()).value!;
    await assert.rejects(m.ask("approve", null), (e: unknown) => e instanceof InvalidEvent && /mail\.ask needs protocol 3, and this child speaks protocol 2/.test((e as Error).message));
    assert.throws(() => m.progress(1), (e: unknown) => e instanceof InvalidEvent && /mail\.progress needs protocol 3, and this child speaks protocol 2/.test((e as Error).message));
    await m.ack("succeeded");
    assert.deepEqual(await sup.until("MailAck"), [{ type: "MailAck", id: 1n, outcome: { kind: "Succeeded" } }]);
  });
});
