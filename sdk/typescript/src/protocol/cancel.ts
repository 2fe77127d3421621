/**
 * Signed cancel requests: the exact bytes the supervisor signs
 * (`ipc/src/signed.rs` and `cancel.rs`), and the checks a child makes
 * before it obeys one, in the Rust order: the key id, the signature's
 * length, the signature itself, the deployment, then the run (for a cancel
 * of runs) or the item (for a cancel of one mail item, version 3).
 */

import { type PublicKey } from "./ed25519.js";
import {
  type CancelOrigin,
  type CancelRequested,
  type MailCancelRequested,
  type SignedCancel,
  type SignedMailCancel,
} from "./messages.js";

/** The domain tag that begins every run cancel's signing bytes. */
export const CANCEL_DOMAIN = "wfhost/cancel/v1";

/** The domain tag that begins every mail-item cancel's signing bytes (version 3). */
export const MAIL_CANCEL_DOMAIN = "wfhost/cancel-mail/v1";

/** The origin's name in the signing bytes, the journal and the CLI. */
export function originName(origin: CancelOrigin): "supervisor-drain" | "operator" | "deadline" {
  switch (origin) {
    case "SupervisorDrain":
      return "supervisor-drain";
    case "Operator":
      return "operator";
    case "Deadline":
      return "deadline";
  }
}

const utf8 = new TextEncoder();

/** The canonical byte builder: `str(x)` is a u64 big-endian length then the UTF-8 bytes, `u64(x)` 8 big-endian bytes. */
class Canonical {
  private readonly parts: Uint8Array[] = [];

  constructor(domain: string) {
    this.str(domain);
  }

  u64(v: bigint): this {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, v, false);
    this.parts.push(b);
    return this;
  }

  str(s: string): this {
    const bytes = utf8.encode(s);
    this.u64(BigInt(bytes.length));
    this.parts.push(bytes);
    return this;
  }

  byte(b: number): this {
    this.parts.push(Uint8Array.of(b));
    return this;
  }

  bytes(): Uint8Array {
    const out = new Uint8Array(this.parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}

/**
 * The canonical signing bytes of a run cancel: every variable field is a
 * u64 big-endian length then its bytes; the optional run is a presence byte
 * (0/1) then the string; `at_ms` is a u64 big-endian.
 */
export function cancelSigningBytes(record: CancelRequested): Uint8Array {
  const c = new Canonical(CANCEL_DOMAIN).str(originName(record.origin)).str(record.deployment);
  if (record.run === null) c.byte(0);
  else c.byte(1).str(record.run);
  return c.str(record.reason).u64(record.at_ms).bytes();
}

/**
 * The canonical signing bytes of a cancel of one mail item (version 3,
 * §5.5): the domain `wfhost/cancel-mail/v1`, the origin's name, the
 * deployment, the item id as a u64, the reason, `at_ms`.
 */
export function mailCancelSigningBytes(record: MailCancelRequested): Uint8Array {
  return new Canonical(MAIL_CANCEL_DOMAIN)
    .str(originName(record.origin))
    .str(record.deployment)
    .u64(record.id)
    .str(record.reason)
    .u64(record.at_ms)
    .bytes();
}

/** Why a cancel was refused, as the golden vectors name the classes. */
export type CancelRefusal =
  | "unknown_key"
  | "malformed_signature"
  | "invalid_signature"
  | "wrong_deployment"
  | "unknown_run"
  | "unknown_item";

/** A refused cancel: the class and a sentence naming what was wrong. */
export interface Refused {
  refusal: CancelRefusal;
  message: string;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** Steps 1 to 4 of §5.3, shared by both kinds of cancel: the key id, the signature's length and validity, the deployment. */
function verifySignedFor(
  cancel: { key_id: Uint8Array; signature: Uint8Array; record: { deployment: string } },
  signingBytes: () => Uint8Array,
  trusted: PublicKey,
  deployment: string,
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
  if (!trusted.verifyStrict(signingBytes(), cancel.signature)) {
    return { refusal: "invalid_signature", message: "signature does not verify" };
  }
  const r = cancel.record;
  if (r.deployment !== deployment) {
    return {
      refusal: "wrong_deployment",
      message: `cancel is for deployment ${JSON.stringify(r.deployment)}, this is ${JSON.stringify(deployment)}`,
    };
  }
  return null;
}

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
  const refused = verifySignedFor(cancel, () => cancelSigningBytes(cancel.record), trusted, deployment);
  if (refused !== null) return refused;
  const r = cancel.record;
  if (r.run !== null && !knowsRun(r.run)) {
    return {
      refusal: "unknown_run",
      message: `cancel is for run ${JSON.stringify(r.run)}, which this child does not know`,
    };
  }
  return null;
}

/**
 * Verifies a cancel of one mail item (version 3) for this child: signed by
 * `trusted` over the mail-cancel signing bytes, for `deployment`, and for
 * an item `holds` accepts (delivered and not yet done). Returns null when
 * it must be obeyed.
 */
export function verifyMailCancel(
  cancel: SignedMailCancel,
  trusted: PublicKey,
  deployment: string,
  holds: (id: bigint) => boolean,
): Refused | null {
  const refused = verifySignedFor(cancel, () => mailCancelSigningBytes(cancel.record), trusted, deployment);
  if (refused !== null) return refused;
  if (!holds(cancel.record.id)) {
    return {
      refusal: "unknown_item",
      message: `cancel is for mail item ${cancel.record.id}, which this child does not hold`,
    };
  }
  return null;
}
