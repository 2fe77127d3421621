/**
 * Signed cancel requests: the exact bytes the supervisor signs
 * (`ipc/src/signed.rs` and `cancel.rs`), and the checks a child makes
 * before it obeys one, in the Rust order: the key id, the signature's
 * length, the signature itself, the deployment, then the run.
 */

import { type PublicKey } from "./ed25519.js";
import { type CancelOrigin, type CancelRequested, type SignedCancel } from "./messages.js";

/** The domain tag that begins every cancel's signing bytes. */
export const CANCEL_DOMAIN = "wfhost/cancel/v1";

/** The origin's name in the signing bytes, the journal and the CLI. */
export function originName(origin: CancelOrigin): "supervisor-drain" | "operator" {
  return origin === "SupervisorDrain" ? "supervisor-drain" : "operator";
}

const utf8 = new TextEncoder();

/**
 * The canonical signing bytes: every variable field is a u64 big-endian
 * length then its bytes; the optional run is a presence byte (0/1) then the
 * string; `at_ms` is a u64 big-endian.
 */
export function cancelSigningBytes(record: CancelRequested): Uint8Array {
  const parts: Uint8Array[] = [];
  const u64 = (v: bigint) => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, v, false);
    parts.push(b);
  };
  const str = (s: string) => {
    const bytes = utf8.encode(s);
    u64(BigInt(bytes.length));
    parts.push(bytes);
  };
  str(CANCEL_DOMAIN);
  str(originName(record.origin));
  str(record.deployment);
  if (record.run === null) {
    parts.push(Uint8Array.of(0));
  } else {
    parts.push(Uint8Array.of(1));
    str(record.run);
  }
  str(record.reason);
  u64(record.at_ms);
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Why a cancel was refused, as the golden vectors name the classes. */
export type CancelRefusal =
  | "unknown_key"
  | "malformed_signature"
  | "invalid_signature"
  | "wrong_deployment"
  | "unknown_run";

/** A refused cancel: the class and a sentence naming what was wrong. */
export interface Refused {
  refusal: CancelRefusal;
  message: string;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/**
 * Verifies a cancel for this child: signed by `trusted`, for `deployment`,
 * and, when it names a run, a run `knowsRun` accepts. Returns null when it
 * must be obeyed.
 */
export function verifyCancel(
  cancel: SignedCancel,
  trusted: PublicKey,
  deployment: string,
  knowsRun: (run: string) => boolean,
): Refused | null {
  if (hex(cancel.key_id) !== hex(trusted.keyId)) {
    return {
      refusal: "unknown_key",
      message: `signed by unknown key ${hex(cancel.key_id)} (trusted key is ${hex(trusted.keyId)})`,
    };
  }
  if (cancel.signature.length !== 64) {
    return {
      refusal: "malformed_signature",
      message: `malformed signature (${cancel.signature.length} bytes, expected 64)`,
    };
  }
  if (!trusted.verifyStrict(cancelSigningBytes(cancel.record), cancel.signature)) {
    return { refusal: "invalid_signature", message: "signature does not verify" };
  }
  const r = cancel.record;
  if (r.deployment !== deployment) {
    return {
      refusal: "wrong_deployment",
      message: `cancel is for deployment ${JSON.stringify(r.deployment)}, this is ${JSON.stringify(deployment)}`,
    };
  }
  if (r.run !== null && !knowsRun(r.run)) {
    return {
      refusal: "unknown_run",
      message: `cancel is for run ${JSON.stringify(r.run)}, which this child does not know`,
    };
  }
  return null;
}
