#!/usr/bin/env node
// node-orders: a wfhost workflow child in Node. Each mail item is an order
// and one run, `order-<id>`, of two steps:
//
//   fetch    cancel behaviour: on drain it is aborted (the next child fetches again)
//   approve  wait behaviour: a person approving; a drain waits for it (the budget pauses);
//            with --approval ask, a question to a person instead (below)
//
// A payload is JSON `{"order": "A-17"}` (any other payload is an order named
// by its text); `fetch_ms` and `approve_ms` in it override the flags for
// that order (`{"order": "B-2", "approve_ms": 20000}`: a slow approval).
//
// Approval by a person: with `--approval ask` (or `"approval": "ask"` in an
// order's payload) the approve step is not a timer but a question,
// `mail.ask("approve", {order, mail, question, …})`, which a person
// answers with `wfhost answer ID approve '{"approved": true}'` (or
// `{"approved": false, "note": "…"}`). Approved, the order goes on as
// with the timer; not approved, it ends with status `rejected` and the
// note. A drain while the question is open gives the order back to the
// supervisor (the SDK's GivenBackError, let pass): once answered it is
// delivered again, fetch is finalized from its marker, and the ask
// returns the stored answer at once.
//
// The run's outcome decides the mail's fate: succeeded, or cancelled by a
// verified (signed) cancel of the run or of the item (`wfhost mail
// cancel`), is acknowledged; cut short by a drain, shutdown or a lost
// channel, it is released for the next child.
//
// Each acknowledged order ends with a JSON result (protocol 3: stored with
// its outcome, read by `wfhost call`, `wfhost mail result ID`):
//
//   {"order": "A-17", "mail": 7, "status": "approved", "attempt": 1,
//    "steps": [{"step": "fetch", "attempt": 1, "pid": 4242, "at": "…", "ms": 101, "finalized": false},
//              {"step": "approve", …}],
//    "stopped": null}
//
// `status` is approved, rejected (by the person asked: `stopped` then
// names the approve step, and `note` the answer's note), cancelled
// (`stopped` then names the step a verified cancel stopped and why) or
// failed; `steps` lists the steps
// done, each as its marker records it (`finalized`: this delivery found it
// done by an earlier child instead of running it), so an order finalized
// from markers returns a result of the same shape as one run in full.
//
// Every order can be cancelled (`wfhost mail cancel ID`: the SDK aborts
// the step in flight, `approve` too, and the order ends cancelled), since
// each step hands its signal to the work it waits on. A redelivered order
// whose markers already prove every step done has nothing left to stop:
// it is declared not cancellable, so a cancel of it is answered
// `not-supported` and it ends approved, as it is.
//
// Each step that completes leaves a marker file `<id>.<step>` in the
// markers directory (`--markers DIR`, else $ORDERS_MARKERS, else
// `state/markers/<deployment>` in the working directory), written durably
// before the next step starts. Whatever the delivery's `attempt`, a step
// whose marker exists is finalized instead of re-run, and every other step
// runs. `attempt > 1` only says that an earlier child was handed the item
// and ended without acknowledging it: that child may never have started
// it (the supervisor hands a child up to 32 items ahead, and a recycle
// gives back the ones it had not started), so it proves no work done. The
// markers of an order are removed once it is acknowledged.
//
// Orders are handled one at a time (`rt.handleMail`, concurrency 1), or,
// with `--approval ask`, up to 16 at once, so that orders waiting for a
// person never keep the next order waiting (`--concurrency N` sets it).
// Every `--recycle-every N` acknowledged items the child asks to be recycled.
//
// Hosted by `wfhost supervise` (see wfhost.toml beside this file):
//   command = ["node", "orders.js", "--recycle-every", "25"]

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, open, rename, unlink } from "node:fs/promises";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Cancelled, GivenBackError, connect } from "@wfhost/child";

const { values: args } = parseArgs({
  options: {
    "recycle-every": { type: "string", default: "0" },
    "fetch-ms": { type: "string", default: "100" },
    "approve-ms": { type: "string", default: "200" },
    "fetch-ignores-drain": { type: "boolean", default: false },
    approval: { type: "string", default: "timer" },
    concurrency: { type: "string" },
    markers: { type: "string" },
  },
});
const APPROVALS = ["ask", "timer"];
if (!APPROVALS.includes(args.approval)) {
  console.error(`node-orders: --approval is ask (a person answers) or timer (approve-ms), got ${JSON.stringify(args.approval)}`);
  process.exit(2);
}
const number = (name) => {
  const v = Number(args[name]);
  if (!Number.isInteger(v) || v < 0) {
    console.error(`node-orders: --${name} must be a whole number, got ${JSON.stringify(args[name])}`);
    process.exit(2);
  }
  return v;
};
const recycleEvery = number("recycle-every");
const fetchMs = number("fetch-ms");
const approveMs = number("approve-ms");
const fetchIgnoresDrain = args["fetch-ignores-drain"];
const approval = args.approval;

const say = (line) => console.log(`node-orders: ${line}`);

// The supervisor stops a child with Shutdown and SIGTERM together: exit now.
process.on("SIGTERM", () => {
  say("SIGTERM; exiting");
  process.exit(0);
});

// Mail ids are unique within one supervisor's store only: a marker also
// names the supervisor's key (a new state_dir has a new one) and the
// payload's digest, so a marker left by another store is never trusted.
// connect() removes WFHOST_* from the environment, so read it first.
const supervisorKey = process.env.WFHOST_SUPERVISOR_KEY ?? "";

let rt;
try {
  rt = await connect();
} catch (e) {
  console.error(`node-orders: cannot connect to the supervisor: ${e.message}`);
  process.exit(2);
}
rt.closed.then((reason) => {
  say(`runtime closed (${reason.kind}: ${reason.message}); exiting`);
  process.exit(reason.kind === "failed" ? 1 : 0);
});

const markers = resolve(args.markers ?? process.env.ORDERS_MARKERS ?? join("state", "markers", rt.deployment));
try {
  await mkdir(markers, { recursive: true });
  const probe = join(markers, `.probe-${process.pid}`);
  await (await open(probe, "w")).close();
  await unlink(probe);
} catch (e) {
  console.error(
    `node-orders: cannot use the markers directory ${markers}: ${e.message}; pass --markers DIR (or set ORDERS_MARKERS) naming a writable directory`,
  );
  process.exit(2);
}

await rt.ready();
say(
  `ready for deployment ${rt.deployment} (pid ${process.pid}, fetch ${fetchMs} ms, ` +
    `approval ${approval === "ask" ? "asked of a person" : `${approveMs} ms`}, ` +
    `recycle ${recycleEvery > 0 ? `every ${recycleEvery} items` : "never"}${fetchIgnoresDrain ? ", fetch ignores drain" : ""}, ` +
    `markers in ${markers})`,
);

/** What an order says: JSON `{"order": …}`, or any text. */
function describeOrder(mail) {
  try {
    const v = mail.json();
    return typeof v === "object" && v !== null && "order" in v ? `order ${JSON.stringify(v.order)}` : mail.text();
  } catch {
    return `${mail.payload.length} bytes`;
  }
}

/** The order, for its result: the payload's `order`, else its text (null when it is not UTF-8). */
function orderOf(mail) {
  try {
    const v = mail.json();
    if (typeof v === "object" && v !== null && !Array.isArray(v) && "order" in v) return v.order;
  } catch {
    // not JSON: the text names the order
  }
  try {
    return mail.text();
  } catch {
    return null;
  }
}

// --- markers: what this deployment's children have durably done ----------

const markerPath = (id, name) => join(markers, `${id}.${name}`);

/** What a marker of `mail` holds, and what must match for it to be trusted. */
function markerOf(mail, name) {
  return {
    mail: mail.id.toString(),
    step: name,
    supervisor_key: supervisorKey,
    payload_sha256: createHash("sha256").update(mail.payload).digest("hex"),
  };
}

/**
 * What the marker of `name` says about that step of `mail`: `{ record }`,
 * the marker's record, when it proves the step done; `{ record: null }`
 * when there is none; `{ record: null, foreign: true }` when the marker is
 * another mail's. (A small file read at once: it runs before a step, never
 * in one.)
 */
function markerRecord(mail, name) {
  let text;
  try {
    text = readFileSync(markerPath(mail.id, name), "utf8");
  } catch (e) {
    if (e.code === "ENOENT") return { record: null };
    throw e;
  }
  const want = markerOf(mail, name);
  let got = null;
  try {
    got = JSON.parse(text);
  } catch {
    // Written atomically, so never torn; anything else is not ours.
  }
  const ok = got !== null && typeof got === "object" && Object.keys(want).every((k) => got[k] === want[k]);
  return ok ? { record: got } : { record: null, foreign: true };
}

/** The marker's record when it proves step `name` of `mail` done, else null (saying so when the marker is another mail's). */
function provenDone(mail, name) {
  const { record, foreign } = markerRecord(mail, name);
  if (foreign) say(`mail ${mail.id}: ignoring marker ${markerPath(mail.id, name)}: it is another mail's (another store, or another payload)`);
  return record;
}

/**
 * Records that step `name` of `mail` is done, having taken `ms`: whole or
 * not at all, and on disk before this resolves. Resolves with the record.
 */
async function mark(mail, name, ms) {
  const path = markerPath(mail.id, name);
  const tmp = `${path}.tmp-${process.pid}`;
  const record = { ...markerOf(mail, name), attempt: mail.attempt, pid: process.pid, at: new Date().toISOString(), ms };
  const f = await open(tmp, "w");
  try {
    await f.writeFile(`${JSON.stringify(record)}\n`);
    await f.sync();
  } finally {
    await f.close();
  }
  await rename(tmp, path);
  const dir = await open(markers, "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return record;
}

/** Forgets an acknowledged order's markers (its mail is never delivered again). */
async function unmark(id) {
  for (const name of ["fetch", "approve"]) await unlink(markerPath(id, name)).catch(() => undefined);
}

// --- the work ----------------------------------------------------------------

/** One step, logged; resolves true when it succeeded, or the Cancelled that stopped it. */
async function step(run, name, behavior, body, options) {
  try {
    await rt.step(run, name, behavior, body, options);
    return true;
  } catch (e) {
    if (e instanceof Cancelled) return e;
    throw e;
  }
}

const STEPS = [
  {
    name: "fetch",
    behavior: "cancel",
    // With --fetch-ignores-drain the fetch winds down on its own terms (it
    // ignores the drain and keeps going): the drain budget runs out and the
    // supervisor's signed cancel aborts the signal.
    ms: fetchMs,
    options: fetchIgnoresDrain ? { onDrain: "wind-down" } : {},
  },
  { name: "approve", behavior: "wait", ms: approveMs, options: {} },
];

/**
 * How long step `s` takes for `mail`: the order's own `fetch_ms` or
 * `approve_ms` (`{"order": "B-2", "approve_ms": 20000}`: a slow approval),
 * else the flag's.
 */
function stepMs(mail, s) {
  try {
    const v = mail.json()?.[`${s.name}_ms`];
    if (Number.isSafeInteger(v) && v >= 0) return v;
  } catch {
    // not JSON: the flags decide
  }
  return s.ms;
}

/** How `mail` is approved: the order's own `"approval"` (`ask` or `timer`), else the flag's. */
function approvalOf(mail) {
  try {
    const v = mail.json()?.approval;
    if (APPROVALS.includes(v)) return v;
  } catch {
    // not JSON: the flag decides
  }
  return approval;
}

/** The rest of an order's payload, shown to the person asked when it is short. */
function detailsOf(mail) {
  try {
    const v = mail.json();
    if (typeof v !== "object" || v === null || Array.isArray(v)) return null;
    const { order: _order, fetch_ms: _f, approve_ms: _a, approval: _k, ...rest } = v;
    if (Object.keys(rest).length === 0 || JSON.stringify(rest).length > 4096) return null;
    return rest;
  } catch {
    return null;
  }
}

/** What the person is asked: the order, and a short summary of it (the same on every attempt). */
function approvalPrompt(mail) {
  const order = orderOf(mail);
  const details = detailsOf(mail);
  return {
    order,
    mail: Number(mail.id),
    question: `approve order ${JSON.stringify(order)}? answer {"approved": true} or {"approved": false, "note": "why"}`,
    ...(details === null ? {} : { details }),
  };
}

/** A person's answer as a decision; throws naming the expected shape when it is not one. */
function decisionOf(answer) {
  const ok =
    typeof answer === "object" &&
    answer !== null &&
    typeof answer.approved === "boolean" &&
    (answer.note === undefined || answer.note === null || typeof answer.note === "string");
  if (!ok) throw new Error(`the answer to "approve" must be {"approved": true|false, "note"?: string}, got ${JSON.stringify(answer)}`);
  return { approved: answer.approved, note: answer.note ?? null };
}

/**
 * The approve step asked of a person: resolves `true` when approved, the
 * Cancelled when a cancel of the order stopped the question, or
 * `{ rejected: note }`. A GivenBackError (a drain while it waited) passes:
 * the order is no longer this child's.
 */
async function askApproval(mail) {
  say(`mail ${mail.id}: asking for approval (wfhost answer ${mail.id} approve '{"approved": true}')`);
  let answer;
  try {
    answer = await mail.ask("approve", approvalPrompt(mail));
  } catch (e) {
    if (e instanceof Cancelled) return e;
    throw e;
  }
  const { approved, note } = decisionOf(answer);
  say(`mail ${mail.id}: ${approved ? "approved" : "rejected"} by the person asked${note === null ? "" : `: ${note}`}`);
  return approved ? true : { rejected: note };
}

// --- results ------------------------------------------------------------------

/** A step done, as the result lists it: from its marker's record, whether this delivery ran it or found it done. */
function stepDone(name, record, finalized) {
  const v = (k) => record[k] ?? null; // a marker of an older version may lack one
  return { step: name, attempt: v("attempt"), pid: v("pid"), at: v("at"), ms: v("ms"), finalized };
}

/** An order's result: the same shape whatever ended it, and however its steps were done. */
function resultOf(mail, status, steps, stopped) {
  return { order: orderOf(mail), mail: Number(mail.id), status, attempt: mail.attempt, steps, stopped };
}

/** Whether markers prove every step of `mail` done: its handler then has nothing left to stop. */
function nothingLeftToRun(mail) {
  try {
    return STEPS.every((s) => markerRecord(mail, s.name).record !== null);
  } catch {
    return false; // an unreadable marker: the order may run a step
  }
}

/**
 * Runs one order, pushing each step done onto `order.steps`; resolves with
 * `{ outcome, result }`, outcome null to leave the order for the next child.
 */
async function processOrder(mail, order) {
  const id = mail.id;
  const run = `order-${id}`;
  say(`mail ${id}: received ${describeOrder(mail)} (attempt ${mail.attempt})`);
  const proven = new Map();
  for (const s of STEPS) {
    const record = provenDone(mail, s.name);
    if (record !== null) proven.set(s.name, record);
  }
  if (mail.attempt > 1) {
    // Not a sign of work done: the earlier child may never have started it.
    say(
      `mail ${id}: attempt ${mail.attempt}: an earlier child was handed it and did not acknowledge it; ` +
        (proven.size > 0 ? `markers prove ${[...proven.keys()].join(" and ")} done` : "no marker: no step of it is known done, running it in full"),
    );
  }
  for (const s of STEPS) {
    order.current = s.name;
    if (proven.has(s.name)) {
      say(`mail ${id}: ${s.name} already done (marker ${markerPath(id, s.name)}): finalizing instead of re-running it`);
      order.steps.push(stepDone(s.name, proven.get(s.name), true));
      continue;
    }
    const began = performance.now();
    const asked = s.name === "approve" && approvalOf(mail) === "ask";
    const ms = stepMs(mail, s);
    const done = asked ? await askApproval(mail) : await step(run, s.name, s.behavior, (signal) => sleep(ms, undefined, { signal }), s.options);
    if (done instanceof Cancelled) return settleStopped(mail, run, s.name, done, order);
    if (done !== true) {
      // Not approved: a decision, the order's end.
      order.current = null;
      await rt.runTerminal(run, "succeeded");
      const reason = done.rejected === null ? "rejected by the person asked" : `rejected by the person asked: ${done.rejected}`;
      return { outcome: "succeeded", result: resultOf(mail, "rejected", order.steps, { step: s.name, reason, note: done.rejected }) };
    }
    const record = await mark(mail, s.name, Math.round(performance.now() - began));
    order.steps.push(stepDone(s.name, record, false));
    say(`mail ${id}: ${s.name} done`);
  }
  order.current = null;
  await rt.runTerminal(run, "succeeded");
  return { outcome: "succeeded", result: resultOf(mail, "approved", order.steps, null) };
}

/** A step was stopped: a verified cancel is a decision (ack cancelled); anything else loses the work (release). */
async function settleStopped(mail, run, name, why, order) {
  say(`mail ${mail.id}: ${name} stopped: ${why.message}`);
  await rt.runTerminal(run, "cancelled").catch(() => undefined);
  if (why.cause !== "cancel") return { outcome: null };
  return { outcome: "cancelled", result: resultOf(mail, "cancelled", order.steps, { step: name, reason: why.message }) };
}

let acked = 0;

/** One order, start to end: it settles its item itself (ack with the result, or release). */
async function handle(mail) {
  const order = { steps: [], current: null };
  let end;
  try {
    end = await processOrder(mail, order);
  } catch (e) {
    if (e instanceof GivenBackError) {
      // A drain while the order waited for its approval: the supervisor has it back, and nothing this child does with it counts.
      say(`mail ${mail.id}: given back while waiting for its approval: once answered it comes again, and the answer with it`);
      throw e;
    }
    end = { outcome: { failed: e.message }, result: resultOf(mail, "failed", order.steps, { step: order.current, reason: e.message }) };
  }
  if (end.outcome === null) {
    mail.release();
    say(`mail ${mail.id}: not acknowledged: it goes back to the inbox for the next child`);
    return;
  }
  try {
    await mail.ack(end.outcome, end.result);
  } catch (e) {
    say(`mail ${mail.id}: cannot acknowledge: ${e.message}`);
    throw e; // unsettled (the result could not be sent): the item ends failed, naming why
  }
  await unmark(mail.id);
  acked++;
  say(`mail ${mail.id}: acknowledged (${typeof end.outcome === "string" ? end.outcome : `failed: ${end.outcome.failed}`})`);
  if (recycleEvery > 0 && acked % recycleEvery === 0 && !rt.draining.aborted) {
    say(`processed ${acked} items: asking to be recycled`);
    await rt.requestRecycle(`processed ${acked} items`).catch((e) => say(`cannot ask for a recycle: ${e.message}`));
  }
}

// One order at a time (asking people: 16); resolves once a drain starts
// and the orders in hand are settled or given back.
const concurrency = args.concurrency === undefined ? (args.approval === "ask" ? 16 : 1) : number("concurrency");
await rt.handleMail(handle, { concurrency: Math.max(1, concurrency), cancellable: (mail) => !nothingLeftToRun(mail) });
say("draining: taking no more mail; waiting for the supervisor to stop this child");
