#!/usr/bin/env node
// node-orders: a wfhost workflow child in Node. Each mail item is an order
// and one run, `order-<id>`, of two steps:
//
//   fetch    cancel behaviour: on drain it is aborted (the next child fetches again)
//   approve  wait behaviour: a person approving; a drain waits for it (the budget pauses)
//
// The run's outcome decides the mail's fate: succeeded, or cancelled by a
// verified (signed) cancel, is acknowledged; cut short by a drain,
// shutdown or a lost channel, it is released for the next child.
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
// Every `--recycle-every N` acknowledged items the child asks to be recycled.
//
// Hosted by `wfhost supervise` (see wfhost.toml beside this file):
//   command = ["node", "orders.js", "--recycle-every", "25"]

import { createHash } from "node:crypto";
import { mkdir, open, readFile, rename, unlink } from "node:fs/promises";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Cancelled, connect } from "@wfhost/child";

const { values: args } = parseArgs({
  options: {
    "recycle-every": { type: "string", default: "0" },
    "fetch-ms": { type: "string", default: "100" },
    "approve-ms": { type: "string", default: "200" },
    "fetch-ignores-drain": { type: "boolean", default: false },
    markers: { type: "string" },
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
  `ready for deployment ${rt.deployment} (pid ${process.pid}, fetch ${fetchMs} ms, approval ${approveMs} ms, ` +
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

/** Whether the marker of `name` proves that step of `mail` done. */
async function provenDone(mail, name) {
  let text;
  try {
    text = await readFile(markerPath(mail.id, name), "utf8");
  } catch (e) {
    if (e.code === "ENOENT") return false;
    throw e;
  }
  const want = markerOf(mail, name);
  let got = null;
  try {
    got = JSON.parse(text);
  } catch {
    // Written atomically, so never torn; anything else is not ours.
  }
  const ok = got !== null && Object.keys(want).every((k) => got[k] === want[k]);
  if (!ok) say(`mail ${mail.id}: ignoring marker ${markerPath(mail.id, name)}: it is another mail's (another store, or another payload)`);
  return ok;
}

/** Records that step `name` of `mail` is done: whole or not at all, and on disk before this resolves. */
async function mark(mail, name) {
  const path = markerPath(mail.id, name);
  const tmp = `${path}.tmp-${process.pid}`;
  const body = JSON.stringify({ ...markerOf(mail, name), attempt: mail.attempt, pid: process.pid, at: new Date().toISOString() });
  const f = await open(tmp, "w");
  try {
    await f.writeFile(`${body}\n`);
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
    body: (signal) => sleep(fetchMs, undefined, { signal }),
    options: fetchIgnoresDrain ? { onDrain: "wind-down" } : {},
  },
  { name: "approve", behavior: "wait", body: (signal) => sleep(approveMs, undefined, { signal }), options: {} },
];

/** Runs one order; returns its ack outcome, or null to leave it for the next child. */
async function processOrder(mail) {
  const id = mail.id;
  const run = `order-${id}`;
  say(`mail ${id}: received ${describeOrder(mail)} (attempt ${mail.attempt})`);
  const proven = [];
  for (const s of STEPS) if (await provenDone(mail, s.name)) proven.push(s.name);
  if (mail.attempt > 1) {
    // Not a sign of work done: the earlier child may never have started it.
    say(
      `mail ${id}: attempt ${mail.attempt}: an earlier child was handed it and did not acknowledge it; ` +
        (proven.length > 0 ? `markers prove ${proven.join(" and ")} done` : "no marker: no step of it is known done, running it in full"),
    );
  }
  for (const s of STEPS) {
    if (proven.includes(s.name)) {
      say(`mail ${id}: ${s.name} already done (marker ${markerPath(id, s.name)}): finalizing instead of re-running it`);
      continue;
    }
    const done = await step(run, s.name, s.behavior, s.body, s.options);
    if (done !== true) return settleStopped(id, run, s.name, done);
    await mark(mail, s.name);
    say(`mail ${id}: ${s.name} done`);
  }
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
  await unmark(mail.id);
  acked++;
  say(`mail ${mail.id}: acknowledged (${typeof outcome === "string" ? outcome : `failed: ${outcome.failed}`})`);
  if (recycleEvery > 0 && acked % recycleEvery === 0 && !rt.draining.aborted) {
    say(`processed ${acked} items: asking to be recycled`);
    await rt.requestRecycle(`processed ${acked} items`).catch((e) => say(`cannot ask for a recycle: ${e.message}`));
  }
}
say("draining: taking no more mail; waiting for the supervisor to stop this child");
