#!/usr/bin/env node
/**
 * The conformance child of `@wfhost/child` (docs/conformance.md): connects
 * with this package's runtime, sends Ready, and handles each mail item as
 * its JSON payload says, concurrently (`rt.handleMail`), so
 * `wfhost-conformance` can play its scenarios against the runtime:
 *
 *     wfhost-conformance -- node dist/conformance-child.js
 *     wfhost-conformance --protocol 2 -- node dist/conformance-child.js --protocol 2
 *
 * (`--protocol 2` makes it a child of version 2 whatever the supervisor
 * offers, as `connect({ protocol: 2 })` does.)
 *
 * The handler's return value is the item's result (`result_hex`,
 * `result_size`), and `"cancellable": false` declares its handler one that
 * cannot be cancelled, through `handleMail`'s `cancellable` option.
 *
 * A handler's work, in order: the `conformance.took` custom event, the
 * payload's `custom`, its `progress` (`mail.progress(v)` for each value)
 * and `progress_bytes` (progress with a JSON string of exactly N bytes),
 * its `steps`, then (when no step ended cancelled) its `ask`: one
 * `{"key", "prompt"}` or a list of them, each `mail.ask`ed in order; the
 * last answer, as compact JSON, is the result unless `result_hex` or
 * `result_size` says otherwise. An ask that fails as given back is let
 * pass (the item is no longer this child's), one cancelled ends the item
 * `Cancelled`, any other error ends it `Failed(message)`.
 */

import { setTimeout as sleep } from "node:timers/promises";

import {
  Cancelled,
  GivenBackError,
  connect,
  type AckOutcome,
  type Mail,
  type MailResult,
  type Runtime,
  type StepBehavior,
} from "./index.js";

interface PlannedStep {
  name: string;
  drain: StepBehavior;
  ms: number;
  ignoreCancel: boolean;
}

interface PlannedAsk {
  key: string;
  prompt: unknown;
}

interface Plan {
  run: string | null;
  progress: unknown[];
  progressBytes: number | null;
  steps: PlannedStep[];
  asks: PlannedAsk[];
  fail: string | null;
  recycle: string | null;
  custom: { kind: string; bytes: Uint8Array } | null;
  result: Uint8Array | null;
  cancellable: boolean;
}

function say(line: string): void {
  process.stderr.write(`conformance-child: ${line}\n`);
}

/** Reads a payload as the spec's JSON, or says what is wrong with it. */
function parsePlan(mail: Mail): Plan {
  const v = mail.json<Record<string, unknown>>();
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TypeError("the payload is not a JSON object");
  const optString = (key: string): string | null => {
    const x = v[key];
    if (x === undefined) return null;
    if (typeof x !== "string") throw new TypeError(`"${key}" must be a string`);
    return x;
  };
  const rawSteps = v["steps"] ?? [];
  if (!Array.isArray(rawSteps)) throw new TypeError(`"steps" must be an array`);
  const steps = rawSteps.map((s: unknown, i): PlannedStep => {
    if (s === null || typeof s !== "object") throw new TypeError(`steps[${i}] must be an object`);
    const o = s as Record<string, unknown>;
    if (typeof o["name"] !== "string") throw new TypeError(`steps[${i}].name must be a string`);
    if (o["drain"] !== "cancel" && o["drain"] !== "wait") throw new TypeError(`steps[${i}].drain must be "cancel" or "wait"`);
    const ms = o["ms"] ?? 0;
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) throw new TypeError(`steps[${i}].ms must be a number of milliseconds`);
    const ignore = o["ignore_cancel"] ?? false;
    if (typeof ignore !== "boolean") throw new TypeError(`steps[${i}].ignore_cancel must be a boolean`);
    return { name: o["name"], drain: o["drain"], ms, ignoreCancel: ignore };
  });
  let custom: Plan["custom"] = null;
  if (v["custom"] !== undefined) {
    const c = v["custom"] as Record<string, unknown> | null;
    if (c === null || typeof c !== "object" || typeof c["kind"] !== "string" || typeof c["hex"] !== "string") {
      throw new TypeError(`"custom" must be {"kind": string, "hex": string}`);
    }
    if (!/^([0-9a-fA-F]{2})*$/.test(c["hex"])) throw new TypeError(`"custom.hex" must be hex`);
    custom = { kind: c["kind"], bytes: new Uint8Array(Buffer.from(c["hex"], "hex")) };
  }
  let result: Uint8Array | null = null;
  const resultHex = optString("result_hex");
  const resultSize = v["result_size"];
  if (resultHex !== null) {
    if (!/^([0-9a-fA-F]{2})*$/.test(resultHex)) throw new TypeError(`"result_hex" must be hex`);
    result = new Uint8Array(Buffer.from(resultHex, "hex"));
  } else if (resultSize !== undefined) {
    if (typeof resultSize !== "number" || !Number.isSafeInteger(resultSize) || resultSize < 0) {
      throw new TypeError(`"result_size" must be a number of bytes`);
    }
    result = new Uint8Array(resultSize).fill(0x72);
  }
  const cancellable = v["cancellable"] ?? true;
  if (typeof cancellable !== "boolean") throw new TypeError(`"cancellable" must be a boolean`);
  const progress = v["progress"] ?? [];
  if (!Array.isArray(progress)) throw new TypeError(`"progress" must be an array of JSON values`);
  const progressBytes = v["progress_bytes"] ?? null;
  if (progressBytes !== null && (typeof progressBytes !== "number" || !Number.isSafeInteger(progressBytes) || progressBytes < 2)) {
    throw new TypeError(`"progress_bytes" must be a number of bytes, at least 2`);
  }
  const rawAsks = v["ask"] ?? [];
  const asks = (Array.isArray(rawAsks) ? rawAsks : [rawAsks]).map((a: unknown, i): PlannedAsk => {
    if (a === null || typeof a !== "object" || Array.isArray(a)) throw new TypeError(`ask[${i}] must be {"key": string, "prompt": JSON}`);
    const o = a as Record<string, unknown>;
    if (typeof o["key"] !== "string") throw new TypeError(`ask[${i}].key must be a string`);
    return { key: o["key"], prompt: o["prompt"] ?? null };
  });
  return {
    run: optString("run"),
    progress,
    progressBytes,
    steps,
    asks,
    fail: optString("fail"),
    recycle: optString("recycle"),
    custom,
    result,
    cancellable,
  };
}

/** Whether the item's handler can be cancelled: false only when the payload says `"cancellable": false`. */
function cancellable(mail: Mail): boolean {
  try {
    return parsePlan(mail).cancellable;
  } catch {
    return true;
  }
}

async function handle(rt: Runtime, mail: Mail): Promise<MailResult> {
  await rt.custom("conformance.took", JSON.stringify({ id: mail.id.toString(), attempt: mail.attempt }));
  let plan: Plan;
  try {
    plan = parsePlan(mail);
  } catch (e) {
    // Ends the item Failed with this reason.
    throw new Error(`bad payload: ${(e as Error).message}`);
  }
  if (plan.custom) await rt.custom(plan.custom.kind, plan.custom.bytes);
  // A refusal (over 64 KiB, say) ends the item Failed with its message.
  for (const v of plan.progress) mail.progress(v);
  if (plan.progressBytes !== null) mail.progress("p".repeat(plan.progressBytes - 2));
  const run = plan.run ?? `mail-${mail.id}`;
  let cancelled: Cancelled | null = null;
  for (const s of plan.steps) {
    try {
      await rt.step(run, s.name, s.drain, (signal) => (s.ignoreCancel ? sleep(s.ms) : sleep(s.ms, undefined, { signal })));
    } catch (e) {
      if (!(e instanceof Cancelled)) throw e;
      say(`mail ${mail.id}: step ${s.name} ${e.message}`);
      cancelled = e;
      break;
    }
  }
  // The item's own cancel fired (between steps, say).
  if (cancelled === null && mail.signal.aborted) cancelled = mail.signal.reason as Cancelled;
  let answer: Uint8Array | null = null;
  let askFailed: string | null = null;
  if (cancelled === null) {
    for (const a of plan.asks) {
      try {
        answer = new TextEncoder().encode(JSON.stringify(await mail.ask(a.key, a.prompt)));
      } catch (e) {
        // Given back: the item is no longer this child's, and nothing it does now is sent.
        if (e instanceof GivenBackError) throw e;
        if (e instanceof Cancelled || mail.signal.aborted) {
          cancelled = e instanceof Cancelled ? e : (mail.signal.reason as Cancelled);
          say(`mail ${mail.id}: ask ${JSON.stringify(a.key)} ${cancelled.message}`);
        } else {
          askFailed = (e as Error).message;
        }
        break;
      }
    }
  }
  const outcome: AckOutcome = cancelled
    ? "cancelled"
    : askFailed !== null
      ? { failed: askFailed }
      : plan.fail !== null
        ? { failed: plan.fail }
        : "succeeded";
  await rt.runTerminal(run, outcome);
  const result = outcome === "succeeded" ? (plan.result ?? answer) : null;
  if (plan.recycle !== null) {
    // End the item first, so the RecycleRequest follows its MailDone.
    await mail.ack(outcome, result);
    await rt.requestRecycle(plan.recycle);
    return;
  }
  if (cancelled !== null) throw cancelled;
  if (askFailed !== null) throw new Error(askFailed);
  if (plan.fail !== null) throw new Error(plan.fail);
  return result;
}

/** `--protocol 2` or `--protocol 3` from the command line, if given. */
function protocolArg(): 2 | 3 | undefined {
  const args = process.argv.slice(2);
  if (args.length === 0) return undefined;
  if (args.length === 2 && args[0] === "--protocol" && (args[1] === "2" || args[1] === "3")) return Number(args[1]) as 2 | 3;
  say(`usage: conformance-child.js [--protocol 2|3], got ${JSON.stringify(args.join(" "))}`);
  process.exit(2);
}

async function main(): Promise<void> {
  process.on("SIGTERM", () => process.exit(0));
  const protocol = protocolArg();
  let rt: Runtime;
  try {
    rt = await connect(protocol === undefined ? {} : { protocol });
  } catch (e) {
    say(`cannot connect: ${(e as Error).message}`);
    process.exit(1);
  }
  void rt.closed.then(async (reason) => {
    if (reason.kind === "failed") {
      say(`the control channel broke: ${reason.message}`);
      process.exit(1);
    }
    await rt.close().catch(() => undefined);
    process.exit(0);
  });
  try {
    await rt.ready();
  } catch (e) {
    say(`cannot report Ready: ${(e as Error).message}`);
    process.exit(1);
  }
  await rt.handleMail((mail) => handle(rt, mail), { cancellable });
  // Drained (or the lease ran out): stay connected until Shutdown or end of stream.
}

await main();
