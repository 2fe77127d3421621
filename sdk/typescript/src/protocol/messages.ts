/**
 * The messages of the control protocol (versions 2 and 3), field by field
 * in wire order, as `ipc/src/message.rs` defines them: `Control` flows down
 * from the supervisor to a child, `Event` up from a child. Variant and
 * field names are the Rust ones, so a message reads the same in both
 * languages and in `docs/protocol-vectors.json`. Version 3 only adds
 * variants (after version 2's) and the origin `Deadline`: the codec reads
 * and writes both, and `controlSince`/`eventSince` say which version a
 * message needs.
 */

import { type Reader, type Writer } from "./bincode.js";

/** The newest protocol version this package speaks. */
export const PROTOCOL_VERSION = 3;

/** The oldest protocol version this package still speaks. */
export const OLDEST_PROTOCOL = 2;

/** Whether this package speaks protocol `version`. */
export function speaks(version: number): boolean {
  return version >= OLDEST_PROTOCOL && version <= PROTOCOL_VERSION;
}

/** Longest `implementation` a Hello may carry, in bytes. */
export const MAX_IMPLEMENTATION_BYTES = 128;

/** What a step does when its run is drained. */
export type DrainBehavior = "Cancel" | "Wait";
const DRAIN_BEHAVIORS: readonly DrainBehavior[] = ["Cancel", "Wait"];

/** How a step, a run or a piece of mail ended. */
export type Outcome = { kind: "Succeeded" } | { kind: "Failed"; reason: string } | { kind: "Cancelled" };

/** Who asked for a cancel (`Deadline`: version 3, only in `CancelMail`). */
export type CancelOrigin = "SupervisorDrain" | "Operator" | "Deadline";
const ORIGINS: readonly CancelOrigin[] = ["SupervisorDrain", "Operator", "Deadline"];

/** A child's answer to `CancelMail` (version 3). */
export type CancelVerdict = { kind: "Acknowledged" } | { kind: "NotSupported" } | { kind: "Refused"; reason: string };

/** The grants file as the supervisor read it for this child. */
export interface Grants {
  /** Unix time in milliseconds when the file was read. */
  read_at_ms: bigint;
  /** SHA-256 of `body` (32 bytes). */
  digest: Uint8Array;
  /** The file's contents (JSON), empty when the deployment has none. */
  body: Uint8Array;
}

/** The bounds the child must respect. */
export interface Limits {
  max_frame_bytes: number;
  max_mail_bytes: number;
  drain_timeout_ms: bigint;
  liveness_timeout_ms: bigint;
}

/** The supervisor's answer to Hello. */
export interface Welcome {
  protocol: number;
  deployment: string;
  grants_snapshot: Grants;
  limits: Limits;
}

/** A request to cancel one run (or every run, `run: null`) of one deployment. */
export interface CancelRequested {
  origin: CancelOrigin;
  deployment: string;
  run: string | null;
  reason: string;
  at_ms: bigint;
}

/** A cancel request as it travels: signed by the supervisor. */
export interface SignedCancel {
  record: CancelRequested;
  /** First 8 bytes of the SHA-256 of the signing public key. */
  key_id: Uint8Array;
  /** 64-byte ed25519 signature over the canonical signing bytes. */
  signature: Uint8Array;
}

/** Version 3: a request to cancel one mail item of one deployment. */
export interface MailCancelRequested {
  origin: CancelOrigin;
  deployment: string;
  /** The item to cancel. */
  id: bigint;
  reason: string;
  at_ms: bigint;
}

/** Version 3: a cancel of one mail item as it travels, signed by the supervisor. */
export interface SignedMailCancel {
  record: MailCancelRequested;
  /** First 8 bytes of the SHA-256 of the signing public key. */
  key_id: Uint8Array;
  /** 64-byte ed25519 signature over the canonical signing bytes (domain `wfhost/cancel-mail/v1`). */
  signature: Uint8Array;
}

/** The child's first frame. */
export interface Hello {
  protocol: number;
  channel_id: string;
  pid: number;
  takes_mail: boolean;
  implementation: string;
}

/** Supervisor → child. */
export type Control =
  | ({ type: "Welcome" } & Welcome)
  | { type: "Drain"; budget_ms: bigint }
  | { type: "Cancel"; cancel: SignedCancel }
  | { type: "Mail"; id: bigint; attempt: number; payload: Uint8Array }
  | { type: "Ping"; nonce: bigint }
  | { type: "Shutdown" }
  | { type: "Lease"; valid_ms: bigint }
  | { type: "CancelMail"; cancel: SignedMailCancel }
  | { type: "Answer"; id: bigint; key: string; value: Uint8Array };

/** Child → supervisor. */
export type Event =
  | ({ type: "Hello" } & Hello)
  | { type: "Ready" }
  | { type: "StepStarted"; run: string; step: string; drain: DrainBehavior }
  | { type: "StepFinished"; run: string; step: string; outcome: Outcome }
  | { type: "MailAck"; id: bigint; outcome: Outcome }
  | { type: "Pong"; nonce: bigint }
  | { type: "RunTerminal"; run: string; outcome: Outcome }
  | { type: "Drained" }
  | { type: "RecycleRequest"; reason: string }
  | { type: "Custom"; kind: string; bytes: Uint8Array }
  | { type: "MailStarted"; id: bigint; cancellable: boolean }
  | { type: "MailDone"; id: bigint; outcome: Outcome; result: Uint8Array }
  | { type: "MailCancelVerdict"; id: bigint; verdict: CancelVerdict }
  | { type: "Ask"; id: bigint; key: string; prompt: Uint8Array }
  | { type: "Progress"; id: bigint; data: Uint8Array }
  | { type: "GiveBack"; id: bigint; awaiting_answer: boolean };

const CONTROL_VARIANTS = [
  "Welcome",
  "Drain",
  "Cancel",
  "Mail",
  "Ping",
  "Shutdown",
  "Lease",
  "CancelMail",
  "Answer",
] as const;
const EVENT_VARIANTS = [
  "Hello",
  "Ready",
  "StepStarted",
  "StepFinished",
  "MailAck",
  "Pong",
  "RunTerminal",
  "Drained",
  "RecycleRequest",
  "Custom",
  "MailStarted",
  "MailDone",
  "MailCancelVerdict",
  "Ask",
  "Progress",
  "GiveBack",
] as const;

const V3_CONTROLS: ReadonlySet<Control["type"]> = new Set(["CancelMail", "Answer"]);
const V3_EVENTS: ReadonlySet<Event["type"]> = new Set(["MailStarted", "MailDone", "MailCancelVerdict", "Ask", "Progress", "GiveBack"]);

/** The oldest protocol version that has this Control message: a supervisor never sends it to a child of an older one. */
export function controlSince(type: Control["type"]): number {
  return V3_CONTROLS.has(type) ? 3 : 2;
}

/** The oldest protocol version that has this Event message: a child of an older version must not send it. */
export function eventSince(type: Event["type"]): number {
  return V3_EVENTS.has(type) ? 3 : 2;
}

// --- encoding -------------------------------------------------------------

function writeOutcome(w: Writer, o: Outcome): void {
  switch (o.kind) {
    case "Succeeded":
      w.variant(0);
      return;
    case "Failed":
      w.variant(1).str(o.reason, "the failure reason");
      return;
    case "Cancelled":
      w.variant(2);
      return;
  }
}

function writeSignedCancel(w: Writer, c: SignedCancel): void {
  const r = c.record;
  w.variant(originIndex(r.origin))
    .str(r.deployment, "the cancel's deployment")
    .option(r.run, (run) => w.str(run, "the cancel's run"))
    .str(r.reason, "the cancel's reason")
    .u64(r.at_ms, "at_ms");
  fixed(w, c.key_id, 8, "key_id");
  w.bytesField(c.signature);
}

function writeSignedMailCancel(w: Writer, c: SignedMailCancel): void {
  const r = c.record;
  w.variant(originIndex(r.origin))
    .str(r.deployment, "the cancel's deployment")
    .u64(r.id, "the cancel's mail id")
    .str(r.reason, "the cancel's reason")
    .u64(r.at_ms, "at_ms");
  fixed(w, c.key_id, 8, "key_id");
  w.bytesField(c.signature);
}

function originIndex(origin: CancelOrigin): number {
  const i = ORIGINS.indexOf(origin);
  if (i < 0) throw new RangeError(`a cancel origin is ${ORIGINS.join(", ")}, got ${JSON.stringify(origin)}`);
  return i;
}

function writeVerdict(w: Writer, v: CancelVerdict): void {
  switch (v.kind) {
    case "Acknowledged":
      w.variant(0);
      return;
    case "NotSupported":
      w.variant(1);
      return;
    case "Refused":
      w.variant(2).str(v.reason, "the refusal's reason");
      return;
  }
}

function fixed(w: Writer, b: Uint8Array, n: number, what: string): void {
  if (b.length !== n) throw new RangeError(`${what} must be ${n} bytes, got ${b.length}`);
  w.raw(b);
}

/** Appends the body encoding of a Control message. */
export function writeControl(w: Writer, m: Control): void {
  switch (m.type) {
    case "Welcome":
      w.variant(0).u32(m.protocol, "protocol").str(m.deployment, "deployment");
      w.u64(m.grants_snapshot.read_at_ms, "read_at_ms");
      fixed(w, m.grants_snapshot.digest, 32, "digest");
      w.bytesField(m.grants_snapshot.body);
      w.u32(m.limits.max_frame_bytes, "max_frame_bytes")
        .u32(m.limits.max_mail_bytes, "max_mail_bytes")
        .u64(m.limits.drain_timeout_ms, "drain_timeout_ms")
        .u64(m.limits.liveness_timeout_ms, "liveness_timeout_ms");
      return;
    case "Drain":
      w.variant(1).u64(m.budget_ms, "budget_ms");
      return;
    case "Cancel":
      w.variant(2);
      writeSignedCancel(w, m.cancel);
      return;
    case "Mail":
      w.variant(3).u64(m.id, "mail id").u32(m.attempt, "attempt").bytesField(m.payload);
      return;
    case "Ping":
      w.variant(4).u64(m.nonce, "nonce");
      return;
    case "Shutdown":
      w.variant(5);
      return;
    case "Lease":
      w.variant(6).u64(m.valid_ms, "valid_ms");
      return;
    case "CancelMail":
      w.variant(7);
      writeSignedMailCancel(w, m.cancel);
      return;
    case "Answer":
      w.variant(8).u64(m.id, "mail id").str(m.key, "the answer's key").bytesField(m.value);
      return;
  }
}

/** Appends the body encoding of an Event message. */
export function writeEvent(w: Writer, m: Event): void {
  switch (m.type) {
    case "Hello":
      w.variant(0)
        .u32(m.protocol, "protocol")
        .str(m.channel_id, "channel_id")
        .u32(m.pid, "pid")
        .bool(m.takes_mail)
        .str(m.implementation, "implementation");
      return;
    case "Ready":
      w.variant(1);
      return;
    case "StepStarted":
      w.variant(2).str(m.run, "the run").str(m.step, "the step name").variant(DRAIN_BEHAVIORS.indexOf(m.drain));
      return;
    case "StepFinished":
      w.variant(3).str(m.run, "the run").str(m.step, "the step name");
      writeOutcome(w, m.outcome);
      return;
    case "MailAck":
      w.variant(4).u64(m.id, "mail id");
      writeOutcome(w, m.outcome);
      return;
    case "Pong":
      w.variant(5).u64(m.nonce, "nonce");
      return;
    case "RunTerminal":
      w.variant(6).str(m.run, "the run");
      writeOutcome(w, m.outcome);
      return;
    case "Drained":
      w.variant(7);
      return;
    case "RecycleRequest":
      w.variant(8).str(m.reason, "the recycle reason");
      return;
    case "Custom":
      w.variant(9).str(m.kind, "the custom event's kind").bytesField(m.bytes);
      return;
    case "MailStarted":
      w.variant(10).u64(m.id, "mail id").bool(m.cancellable);
      return;
    case "MailDone":
      w.variant(11).u64(m.id, "mail id");
      writeOutcome(w, m.outcome);
      w.bytesField(m.result);
      return;
    case "MailCancelVerdict":
      w.variant(12).u64(m.id, "mail id");
      writeVerdict(w, m.verdict);
      return;
    case "Ask":
      w.variant(13).u64(m.id, "mail id").str(m.key, "the question's key").bytesField(m.prompt);
      return;
    case "Progress":
      w.variant(14).u64(m.id, "mail id").bytesField(m.data);
      return;
    case "GiveBack":
      w.variant(15).u64(m.id, "mail id").bool(m.awaiting_answer);
      return;
  }
}

// --- decoding -------------------------------------------------------------

function readOutcome(r: Reader): Outcome {
  switch (r.variant("Outcome", 3)) {
    case 0:
      return { kind: "Succeeded" };
    case 1:
      return { kind: "Failed", reason: r.str("the failure reason") };
    default:
      return { kind: "Cancelled" };
  }
}

function readSignedCancel(r: Reader): SignedCancel {
  const origin = ORIGINS[r.variant("CancelOrigin", ORIGINS.length)] as CancelOrigin;
  const deployment = r.str("the cancel's deployment");
  const run = r.option("the cancel's run", () => r.str("the cancel's run"));
  const reason = r.str("the cancel's reason");
  const at_ms = r.u64("at_ms");
  const key_id = r.raw(8, "key_id");
  const signature = r.bytesField("the signature");
  return { record: { origin, deployment, run, reason, at_ms }, key_id, signature };
}

function readSignedMailCancel(r: Reader): SignedMailCancel {
  const origin = ORIGINS[r.variant("CancelOrigin", ORIGINS.length)] as CancelOrigin;
  const deployment = r.str("the cancel's deployment");
  const id = r.u64("the cancel's mail id");
  const reason = r.str("the cancel's reason");
  const at_ms = r.u64("at_ms");
  const key_id = r.raw(8, "key_id");
  const signature = r.bytesField("the signature");
  return { record: { origin, deployment, id, reason, at_ms }, key_id, signature };
}

function readVerdict(r: Reader): CancelVerdict {
  switch (r.variant("CancelVerdict", 3)) {
    case 0:
      return { kind: "Acknowledged" };
    case 1:
      return { kind: "NotSupported" };
    default:
      return { kind: "Refused", reason: r.str("the refusal's reason") };
  }
}

/** Reads one Control message body. */
export function readControl(r: Reader): Control {
  switch (r.variant("Control", CONTROL_VARIANTS.length)) {
    case 0: {
      const protocol = r.u32("protocol");
      const deployment = r.str("deployment");
      const read_at_ms = r.u64("read_at_ms");
      const digest = r.raw(32, "digest");
      const body = r.bytesField("the grants body");
      const max_frame_bytes = r.u32("max_frame_bytes");
      const max_mail_bytes = r.u32("max_mail_bytes");
      const drain_timeout_ms = r.u64("drain_timeout_ms");
      const liveness_timeout_ms = r.u64("liveness_timeout_ms");
      return {
        type: "Welcome",
        protocol,
        deployment,
        grants_snapshot: { read_at_ms, digest, body },
        limits: { max_frame_bytes, max_mail_bytes, drain_timeout_ms, liveness_timeout_ms },
      };
    }
    case 1:
      return { type: "Drain", budget_ms: r.u64("budget_ms") };
    case 2:
      return { type: "Cancel", cancel: readSignedCancel(r) };
    case 3: {
      const id = r.u64("mail id");
      const attempt = r.u32("attempt");
      const payload = r.bytesField("the mail payload");
      return { type: "Mail", id, attempt, payload };
    }
    case 4:
      return { type: "Ping", nonce: r.u64("nonce") };
    case 5:
      return { type: "Shutdown" };
    case 6:
      return { type: "Lease", valid_ms: r.u64("valid_ms") };
    case 7:
      return { type: "CancelMail", cancel: readSignedMailCancel(r) };
    default: {
      const id = r.u64("mail id");
      const key = r.str("the answer's key");
      return { type: "Answer", id, key, value: r.bytesField("the answer's value") };
    }
  }
}

/** Reads one Event message body. */
export function readEvent(r: Reader): Event {
  switch (r.variant("Event", EVENT_VARIANTS.length)) {
    case 0: {
      const protocol = r.u32("protocol");
      const channel_id = r.str("channel_id");
      const pid = r.u32("pid");
      const takes_mail = r.bool("takes_mail");
      const implementation = r.str("implementation");
      return { type: "Hello", protocol, channel_id, pid, takes_mail, implementation };
    }
    case 1:
      return { type: "Ready" };
    case 2: {
      const run = r.str("the run");
      const step = r.str("the step name");
      const drain = DRAIN_BEHAVIORS[r.variant("DrainBehavior", DRAIN_BEHAVIORS.length)] as DrainBehavior;
      return { type: "StepStarted", run, step, drain };
    }
    case 3: {
      const run = r.str("the run");
      const step = r.str("the step name");
      return { type: "StepFinished", run, step, outcome: readOutcome(r) };
    }
    case 4: {
      const id = r.u64("mail id");
      return { type: "MailAck", id, outcome: readOutcome(r) };
    }
    case 5:
      return { type: "Pong", nonce: r.u64("nonce") };
    case 6: {
      const run = r.str("the run");
      return { type: "RunTerminal", run, outcome: readOutcome(r) };
    }
    case 7:
      return { type: "Drained" };
    case 8:
      return { type: "RecycleRequest", reason: r.str("the recycle reason") };
    case 9: {
      const kind = r.str("the custom event's kind");
      return { type: "Custom", kind, bytes: r.bytesField("the custom event's bytes") };
    }
    case 10: {
      const id = r.u64("mail id");
      return { type: "MailStarted", id, cancellable: r.bool("cancellable") };
    }
    case 11: {
      const id = r.u64("mail id");
      const outcome = readOutcome(r);
      return { type: "MailDone", id, outcome, result: r.bytesField("the mail's result") };
    }
    case 12: {
      const id = r.u64("mail id");
      return { type: "MailCancelVerdict", id, verdict: readVerdict(r) };
    }
    case 13: {
      const id = r.u64("mail id");
      const key = r.str("the question's key");
      return { type: "Ask", id, key, prompt: r.bytesField("the question's prompt") };
    }
    case 14: {
      const id = r.u64("mail id");
      return { type: "Progress", id, data: r.bytesField("the progress data") };
    }
    default: {
      const id = r.u64("mail id");
      return { type: "GiveBack", id, awaiting_answer: r.bool("awaiting_answer") };
    }
  }
}
