/**
 * Reads `docs/protocol-vectors.json` (the golden vectors the Rust codec
 * generates) and converts between its JSON forms (u64 as decimal strings,
 * bytes as hex, a cancel flattened) and this package's messages.
 */

import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import type { Control, Event, SignedCancel, SignedMailCancel } from "../dist/protocol/index.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The vectors file: `$WFHOST_VECTORS`, else the repository's `docs/protocol-vectors.json`. */
export const VECTORS_PATH = process.env["WFHOST_VECTORS"] ?? resolve(here, "../../../docs/protocol-vectors.json");

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export interface FrameVector {
  name: string;
  direction: "up" | "down";
  hex: string;
  seq: string;
  message: { [k: string]: Json };
}

export interface InvalidVector {
  name: string;
  direction: "up" | "down";
  hex: string;
  error: string;
  note: string;
}

export interface CancelVector {
  name: string;
  cancel: { [k: string]: Json };
  frame: string;
  signing_bytes: string;
  trusted_key: string;
  verdict: "accept" | "refuse";
  refusal: string | null;
  why: string;
}

export interface MailCancelVector {
  name: string;
  cancel: { [k: string]: Json };
  frame: string;
  signing_bytes: string;
  verdict: "accept" | "refuse";
  refusal: string | null;
  why: string;
}

export interface Vectors {
  protocol: number;
  oldest_protocol: number;
  max_frame_bytes: number;
  frames: FrameVector[];
  invalid_frames: InvalidVector[];
  signing: {
    deployment: string;
    domain: string;
    key_id: string;
    known_runs: string[];
    public_key: string;
    other_public_key: string;
    seed: string;
    small_order_encodings: string[];
    cancels: CancelVector[];
    mail_domain: string;
    held_items: string[];
    mail_cancels: MailCancelVector[];
  };
}

export function loadVectors(): Vectors {
  return JSON.parse(readFileSync(VECTORS_PATH, "utf8")) as Vectors;
}

export const unhex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"));
export const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

const BYTE_FIELDS = new Set(["payload", "body", "digest", "key_id", "signature", "bytes", "result", "prompt", "data", "value"]);
const U64_FIELDS = new Set([
  "nonce",
  "budget_ms",
  "id",
  "valid_ms",
  "read_at_ms",
  "drain_timeout_ms",
  "liveness_timeout_ms",
  "at_ms",
]);

function fromJson(key: string, v: Json): unknown {
  if (typeof v === "string" && BYTE_FIELDS.has(key)) return unhex(v);
  if (typeof v === "string" && U64_FIELDS.has(key)) return BigInt(v);
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fromJson(k, x)]));
  }
  return v;
}

function toJson(v: unknown): Json {
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Uint8Array) return hex(v);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toJson(x)]));
  }
  return v as Json;
}

/** A vector's flattened cancel as this package's SignedCancel. */
export function cancelFromJson(c: { [k: string]: Json }): SignedCancel {
  const f = fromJson("", c) as Record<string, unknown>;
  return {
    record: {
      origin: f["origin"] as SignedCancel["record"]["origin"],
      deployment: f["deployment"] as string,
      run: f["run"] as string | null,
      reason: f["reason"] as string,
      at_ms: f["at_ms"] as bigint,
    },
    key_id: f["key_id"] as Uint8Array,
    signature: f["signature"] as Uint8Array,
  };
}

/** A vector's flattened cancel of one mail item as this package's SignedMailCancel. */
export function mailCancelFromJson(c: { [k: string]: Json }): SignedMailCancel {
  const f = fromJson("", c) as Record<string, unknown>;
  return {
    record: {
      origin: f["origin"] as SignedMailCancel["record"]["origin"],
      deployment: f["deployment"] as string,
      id: f["id"] as bigint,
      reason: f["reason"] as string,
      at_ms: f["at_ms"] as bigint,
    },
    key_id: f["key_id"] as Uint8Array,
    signature: f["signature"] as Uint8Array,
  };
}

/** A vector's message as this package's Control or Event. */
export function messageFromJson(m: { [k: string]: Json }): Control | Event {
  if (m["type"] === "Cancel") {
    return { type: "Cancel", cancel: cancelFromJson(m["cancel"] as { [k: string]: Json }) };
  }
  if (m["type"] === "CancelMail") {
    return { type: "CancelMail", cancel: mailCancelFromJson(m["cancel"] as { [k: string]: Json }) };
  }
  return fromJson("", m) as Control | Event;
}

/** This package's message in the vectors' JSON form, for comparison. */
export function messageToJson(m: Control | Event): Json {
  if (m.type === "Cancel" || m.type === "CancelMail") {
    const { record, key_id, signature } = m.cancel;
    return { type: m.type, cancel: toJson({ ...record, key_id, signature }) };
  }
  return toJson(m);
}
