/**
 * Strict ed25519 verification, as `ed25519-dalek`'s `verify_strict` judges
 * signatures: `node:crypto` (OpenSSL) checks the plain, cofactorless
 * equation and that S is below the group order, but accepts a public key or
 * an R of small order, with which a forger can make signatures that pass
 * the plain equation for any message. Those encodings are refused here
 * before OpenSSL is asked, and S < L is checked here too rather than
 * trusted to the OpenSSL version at hand.
 */

import { createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

/**
 * Every 32-byte encoding of a point of small order (the eight torsion
 * points, with their non-canonical encodings): refused as a public key and
 * as a signature's R.
 */
export const SMALL_ORDER_ENCODINGS: readonly string[] = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0000000000000000000000000000000000000000000000000000000000000080",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000080",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
];
const SMALL_ORDER = new Set(SMALL_ORDER_ENCODINGS);

/** The group order L, little-endian, as S is encoded. */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

/** The DER prefix of an ed25519 SubjectPublicKeyInfo; the 32 key bytes follow. */
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** Whether a 32-byte point encoding is one of a small-order point. */
export function isSmallOrder(encoding: Uint8Array): boolean {
  return encoding.length === 32 && SMALL_ORDER.has(Buffer.from(encoding).toString("hex"));
}

/** Whether a 32-byte little-endian scalar is canonical (below L). */
export function isCanonicalScalar(s: Uint8Array): boolean {
  if (s.length !== 32) return false;
  let v = 0n;
  for (let i = 31; i >= 0; i--) v = (v << 8n) | BigInt(s[i] as number);
  return v < L;
}

/** A trusted ed25519 public key, ready to verify with. */
export class PublicKey {
  /** The 32 raw bytes. */
  readonly bytes: Uint8Array;
  /** First 8 bytes of the SHA-256 of the key: the id signed records carry. */
  readonly keyId: Uint8Array;
  private readonly key: KeyObject;

  private constructor(bytes: Uint8Array) {
    this.bytes = bytes;
    this.keyId = new Uint8Array(createHash("sha256").update(bytes).digest().subarray(0, 8));
    this.key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, bytes]), format: "der", type: "spki" });
  }

  /** A key from its 32 raw bytes; throws a TypeError naming the problem. */
  static fromBytes(bytes: Uint8Array): PublicKey {
    if (bytes.length !== 32) throw new TypeError(`an ed25519 public key is 32 bytes, got ${bytes.length}`);
    try {
      return new PublicKey(new Uint8Array(bytes));
    } catch (e) {
      throw new TypeError(`not an ed25519 public key: ${(e as Error).message}`);
    }
  }

  /** A key from 64 hex characters (the form of `WFHOST_SUPERVISOR_KEY`). */
  static fromHex(text: string): PublicKey {
    const t = text.trim();
    if (!/^[0-9a-fA-F]{64}$/.test(t)) throw new TypeError(`expected 64 hex characters, got ${t.length} characters`);
    return PublicKey.fromBytes(Buffer.from(t, "hex"));
  }

  /** The key as 64 lower-case hex characters. */
  toHex(): string {
    return Buffer.from(this.bytes).toString("hex");
  }

  /**
   * Verifies `signature` (64 bytes) over `message` strictly: refuses a
   * small-order key or R and a non-canonical S, then checks the equation.
   */
  verifyStrict(message: Uint8Array, signature: Uint8Array): boolean {
    if (signature.length !== 64) return false;
    if (isSmallOrder(this.bytes) || isSmallOrder(signature.subarray(0, 32))) return false;
    if (!isCanonicalScalar(signature.subarray(32))) return false;
    try {
      return verify(null, message, this.key, signature);
    } catch {
      return false;
    }
  }
}
