#!/usr/bin/env node
// node-orders: a wfhost workflow child in Node. Each mail item is an order
// and one run, `order-<id>`, of two steps:
//
//   fetch    cancel behaviour: on drain it is aborted (the next child fetches again)
//   approve  wait behaviour: a person approving; a drain waits for it (the budget pauses)
//
// The run's outcome decides the mail's fate: succeeded, or cancelled by a
// verified (signed) cancel, is acknowledged; cut short by a drain,
// shutdown or a lost channel, it is released for the next child. An item
// delivered again (`attempt` > 1: the child that held it died or was
// recycled) is finalized instead of re-run. Every `--recycle-every N`
// acknowledged items the child asks to be recycled.
//
// Hosted by `wfhost supervise` (see wfhost.toml beside this file):
//   command = ["node", "orders.js", "--recycle-every", "25"]

import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Cancelled, connect } from "@wfhost/child";

const { values: args } = parseArgs({
  options: {
    "recycle-every": { type: "string", default: "0" },
    "fetch-ms": { type: "string", default: "100" },
    "approve-ms": { type: "string", default: "200" },
    "fetch-ignores-drain": { type: "boolean", default: false },
  },
});
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

const say = (line) => console.log(`node-orders: ${line}`);

// The supervisor stops a child with Shutdown and SIGTERM together: exit now.
process.on("SIGTERM", () => {
  say("SIGTERM; exiting");
  process.exit(0);
});

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
await rt.ready();
say(
  `ready for deployment ${rt.deployment} (pid ${process.pid}, fetch ${fetchMs} ms, approval ${approveMs} ms, ` +
    `recycle ${recycleEvery > 0 ? `every ${recycleEvery} items` : "never"}${fetchIgnoresDrain ? ", fetch ignores drain" : ""})`,
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

/** Runs one order; returns its ack outcome, or null to leave it for the next child. */
async function processOrder(mail) {
  const id = mail.id;
  const run = `order-${id}`;
  if (mail.attempt > 1) {
    // An earlier child may have fetched and had it approved already:
    // finalize from what it left instead of doing it all again.
    say(`mail ${id}: redelivery (attempt ${mail.attempt}) of ${describeOrder(mail)}: finalizing instead of re-running`);
    const done = await step(run, "finalize", "cancel", (signal) => sleep(10, undefined, { signal }));
    if (done !== true) return settleStopped(id, run, "finalize", done);
    await rt.runTerminal(run, "succeeded");
    say(`mail ${id}: finalized`);
    return "succeeded";
  }
  say(`mail ${id}: received ${describeOrder(mail)} (attempt 1)`);
  const fetched = await step(
    run,
    "fetch",
    "cancel",
    // With --fetch-ignores-drain the fetch winds down on its own terms (it
    // ignores the drain and keeps going): the drain budget runs out and the
    // supervisor's signed cancel aborts the signal.
    (signal) => sleep(fetchMs, undefined, { signal }),
    fetchIgnoresDrain ? { onDrain: "wind-down" } : {},
  );
  if (fetched !== true) return settleStopped(id, run, "fetch", fetched);
  say(`mail ${id}: fetch done`);
  const approved = await step(run, "approve", "wait", (signal) => sleep(approveMs, undefined, { signal }));
  if (approved !== true) return settleStopped(id, run, "approve", approved);
  say(`mail ${id}: approve done`);
  await rt.runTerminal(run, "succeeded");
  return "succeeded";
}

/** A step was stopped: a verified cancel is a decision (ack cancelled); anything else loses the work (release). */
async function settleStopped(id, run, name, why) {
  say(`mail ${id}: ${name} stopped: ${why.message}`);
  await rt.runTerminal(run, "cancelled").catch(() => undefined);
  return why.cause === "cancel" ? "cancelled" : null;
}

let acked = 0;
for await (const mail of rt.mail()) {
  let outcome;
  try {
    outcome = await processOrder(mail);
  } catch (e) {
    outcome = { failed: e.message };
  }
  if (outcome === null) {
    mail.release();
    say(`mail ${mail.id}: not acknowledged: it goes back to the inbox for the next child`);
    continue;
  }
  try {
    await mail.ack(outcome);
  } catch (e) {
    say(`mail ${mail.id}: cannot acknowledge: ${e.message}`);
    continue;
  }
  acked++;
  say(`mail ${mail.id}: acknowledged (${typeof outcome === "string" ? outcome : `failed: ${outcome.failed}`})`);
  if (recycleEvery > 0 && acked % recycleEvery === 0 && !rt.draining.aborted) {
    say(`processed ${acked} items: asking to be recycled`);
    await rt.requestRecycle(`processed ${acked} items`).catch((e) => say(`cannot ask for a recycle: ${e.message}`));
  }
}
say("draining: taking no more mail; waiting for the supervisor to stop this child");
