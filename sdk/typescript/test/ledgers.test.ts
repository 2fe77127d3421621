/**
 * The work ledger and the mail ledger on their own (the rules of
 * `child/src/work.rs` and `mail.rs`): which events each change implies,
 * in wire order, and which signals it aborts.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { Cancelled, VERSION } from "../dist/index.js";
import { MailLedger, REMEMBERED_ACKS } from "../dist/mail.js";
import { REMEMBERED_CANCELLED_RUNS, Work } from "../dist/work.js";

const names = (events: { type: string }[]) => events.map((e) => e.type);
const drain = new Cancelled("drain");
const cancel = new Cancelled("cancel", { reason: "r", origin: "operator" });
const ok = { kind: "Succeeded" } as const;
const cancelled = { kind: "Cancelled" } as const;
const cause = (s: AbortSignal) => (s.aborted ? (s.reason as Cancelled).cause : null);

describe("work ledger", () => {
  test("a drain aborts cancel steps and waits for them; Drained once", () => {
    const w = new Work();
    const c = w.start("r1", "fetch", "Cancel");
    assert.deepEqual(names(c.events), ["StepStarted"]);
    const a = w.start("r1", "approve", "Wait");
    assert.deepEqual(w.drain(drain), [], "a cancel step is in flight");
    assert.equal(cause(c.signal), "drain");
    assert.equal(a.signal.aborted, false, "wait steps go on");
    assert.deepEqual(names(w.finish(c.id, cancelled)), ["StepFinished", "Drained"]);
    assert.deepEqual(names(w.finish(a.id, ok)), ["StepFinished"]);
    assert.deepEqual(w.drain(drain), [], "once");
  });

  test("only wait steps: Drained at once; new cancel steps start aborted during a drain", () => {
    const w = new Work();
    const a = w.start("r1", "approve", "Wait");
    assert.deepEqual(names(w.drain(drain)), ["Drained"]);
    assert.equal(a.signal.aborted, false);
    assert.equal(cause(w.start("r2", "fetch", "Cancel").signal), "drain");
    assert.equal(w.start("r2", "approve", "Wait").signal.aborted, false);
  });

  test("a wind-down cancel step is not aborted by a drain but still holds Drained", () => {
    const w = new Work();
    const s = w.start("r1", "flush", "Cancel", true);
    assert.deepEqual(w.drain(drain), []);
    assert.equal(s.signal.aborted, false);
    assert.deepEqual(names(w.finish(s.id, ok)), ["StepFinished", "Drained"]);
  });

  test("a cancel cascades over its run, ends it after its last step, once", () => {
    const w = new Work();
    const a = w.start("r1", "approve", "Wait");
    const b = w.start("r1", "fetch", "Cancel");
    const other = w.start("r2", "fetch", "Cancel");
    assert.deepEqual(w.cancel("r1", cancel), []);
    assert.equal(cause(a.signal), "cancel");
    assert.equal(cause(b.signal), "cancel");
    assert.equal(other.signal.aborted, false);
    assert.deepEqual(names(w.finish(a.id, cancelled)), ["StepFinished"]);
    const ev = w.finish(b.id, cancelled);
    assert.deepEqual(ev, [
      { type: "StepFinished", run: "r1", step: "fetch", outcome: cancelled },
      { type: "RunTerminal", run: "r1", outcome: cancelled },
    ]);
    assert.equal(w.knowsRun("r1"), false);
    assert.deepEqual(w.runTerminal("r1", ok), [], "not twice");
    const late = w.start("r1", "late", "Wait");
    assert.equal(cause(late.signal), "cancel");
    assert.deepEqual(names(w.finish(late.id, cancelled)), ["StepFinished"], "a late step does not end the run again");
  });

  test("a cancel of an idle run ends it at once; null means every run", () => {
    const w = new Work();
    const a = w.start("r1", "s", "Wait");
    w.finish(a.id, ok);
    const b = w.start("r2", "s", "Wait");
    assert.deepEqual(w.cancel(null, cancel), [{ type: "RunTerminal", run: "r1", outcome: cancelled }]);
    assert.equal(cause(b.signal), "cancel");
    assert.deepEqual(w.cancel("nope", cancel), []);
  });

  test("a run being cancelled ends cancelled whatever the application says", () => {
    const w = new Work();
    const a = w.start("r1", "s", "Wait");
    w.cancel("r1", cancel);
    assert.deepEqual(w.runTerminal("r1", ok), [{ type: "RunTerminal", run: "r1", outcome: cancelled }]);
    assert.deepEqual(names(w.finish(a.id, cancelled)), ["StepFinished"]);
  });

  test("held mail delays Drained until settled, in either order with cancel steps", () => {
    let w = new Work();
    assert.equal(w.takeMail(), true);
    const a = w.start("mail-1", "approve", "Wait");
    assert.deepEqual(w.drain(drain), []);
    assert.equal(w.takeMail(), false, "no mail is handed out during a drain");
    assert.deepEqual(names(w.finish(a.id, ok, cancelled)), ["StepFinished", "RunTerminal"]);
    assert.deepEqual(names(w.settleMail()), ["Drained"]);
    assert.deepEqual(w.settleMail(), []);

    w = new Work();
    w.takeMail();
    const c = w.start("mail-1", "fetch", "Cancel");
    w.drain(drain);
    assert.deepEqual(w.settleMail(), [], "a cancel step is still in flight");
    assert.deepEqual(names(w.finish(c.id, cancelled)), ["StepFinished", "Drained"]);
  });

  test("lease expiry is a drain that aborts every cancel step, wind-down ones too", () => {
    const w = new Work();
    const s = w.start("r1", "flush", "Cancel", true);
    const a = w.start("r1", "approve", "Wait");
    assert.deepEqual(w.drain(new Cancelled("lease")), []);
    assert.equal(cause(s.signal), "lease");
    assert.equal(a.signal.aborted, false);
    assert.equal(w.takesMail(), false);
    assert.deepEqual(names(w.finish(s.id, cancelled)), ["StepFinished", "Drained"]);
    assert.equal(cause(w.start("r2", "x", "Cancel", true).signal), "lease");
    assert.deepEqual(w.drain(drain), [], "a Drain after the expiry changes nothing");
  });

  test("close aborts every signal and every later one, with the most severe cause", () => {
    const w = new Work();
    const a = w.start("r1", "approve", "Wait");
    w.close(new Cancelled("shutdown"));
    assert.equal(cause(a.signal), "shutdown");
    assert.equal(w.takesMail(), false);
    w.close(new Cancelled("disconnected"));
    assert.equal(cause(w.start("r2", "s", "Wait").signal), "disconnected");
  });

  test("a bounded number of cancelled runs is remembered", () => {
    const w = new Work();
    for (let i = 0; i < REMEMBERED_CANCELLED_RUNS + 10; i++) {
      const s = w.start(`r${i}`, "s", "Wait");
      w.finish(s.id, ok);
      w.cancel(`r${i}`, cancel);
    }
    assert.equal(w.remembersCancelled("r0"), false);
    assert.equal(w.remembersCancelled(`r${REMEMBERED_CANCELLED_RUNS + 9}`), true);
  });
});

describe("mail ledger", () => {
  test("delivers once, ignores duplicates in flight, re-acks redeliveries, takes dropped mail again", () => {
    const l = new MailLedger();
    assert.deepEqual(l.receive(7n, true), { kind: "deliver" });
    assert.deepEqual(l.receive(7n, true), { kind: "duplicate" });
    l.ack(7n, ok);
    assert.deepEqual(l.receive(7n, true), { kind: "reack", outcome: ok });
    assert.deepEqual(l.receive(8n, true), { kind: "deliver" });
    l.abandon(8n);
    assert.deepEqual(l.receive(8n, true), { kind: "deliver" });
  });

  test("declines new mail when not taking, still re-acks", () => {
    const l = new MailLedger();
    l.receive(1n, true);
    l.ack(1n, cancelled);
    l.receive(2n, true);
    assert.deepEqual(l.receive(1n, false), { kind: "reack", outcome: cancelled });
    assert.deepEqual(l.receive(2n, false), { kind: "duplicate" });
    assert.deepEqual(l.receive(3n, false), { kind: "declined" });
    assert.deepEqual(l.inFlightIds(), [2n]);
  });

  test("remembers a bounded number of acks, forgetting the oldest", () => {
    const l = new MailLedger();
    for (let i = 0n; i < BigInt(REMEMBERED_ACKS + 5); i++) {
      l.receive(i, true);
      l.ack(i, ok);
    }
    assert.equal(l.rememberedAcks(), REMEMBERED_ACKS);
    assert.deepEqual(l.receive(0n, true), { kind: "deliver" });
  });
});

test("VERSION matches package.json", () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
  assert.equal(VERSION, pkg.version);
});
