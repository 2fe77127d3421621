/**
 * The signature rules against every cancel vector (verdict and refusal
 * class, signing bytes, frame) and every small-order encoding, and what
 * `node:crypto` alone would have accepted.
 */

import assert from "node:assert/strict";
import { createPrivateKey, createPublicKey, sign, verify } from "node:crypto";
import { describe, test } from "node:test";

import {
  FrameDecoder,
  PublicKey,
  SMALL_ORDER_ENCODINGS,
  cancelSigningBytes,
  decodeOne,
  isCanonicalScalar,
  isSmallOrder,
  verifyCancel,
} from "../dist/protocol/index.js";
import { cancelFromJson, hex, loadVectors, unhex } from "./vectors.js";

const v = loadVectors();
const s = v.signing;

describe("cancel vectors", () => {
  assert.ok(s.cancels.length >= 13, `only ${s.cancels.length} cancel vectors`);
  for (const c of s.cancels) {
    test(`${c.name}: ${c.verdict}${c.refusal ? ` (${c.refusal})` : ""}`, () => {
      const cancel = cancelFromJson(c.cancel);
      assert.equal(hex(cancelSigningBytes(cancel.record)), c.signing_bytes, "signing bytes");
      const frame = decodeOne(FrameDecoder.control(), unhex(c.frame));
      assert.equal(frame.body.type, "Cancel");
      assert.deepEqual(frame.body.type === "Cancel" && frame.body.cancel, cancel, "the frame carries the cancel");
      const trusted = PublicKey.fromHex(c.trusted_key);
      const verdict = verifyCancel(cancel, trusted, s.deployment, (run) => s.known_runs.includes(run));
      if (c.verdict === "accept") {
        assert.equal(verdict, null, c.why);
      } else {
        assert.ok(verdict, `refused: ${c.why}`);
        assert.equal(verdict.refusal, c.refusal, `${c.why}: ${verdict.message}`);
      }
    });
  }

  test("the key id is the first 8 bytes of the key's SHA-256", () => {
    assert.equal(hex(PublicKey.fromHex(s.public_key).keyId), s.key_id);
  });

  test("the domain vector is refused only because of the domain, and OpenSSL alone accepts the small-order forgeries", () => {
    const byName = (n: string) => {
      const c = s.cancels.find((x) => x.name === n);
      assert.ok(c, `vector ${n}`);
      return c;
    };
    // Without the small-order rule the plain equation passes: this is what
    // the extra checks are for.
    for (const name of ["R of small order", "trusted key of small order"]) {
      const c = byName(name);
      const cancel = cancelFromJson(c.cancel);
      const der = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), unhex(c.trusted_key)]);
      const key = createPublicKey({ key: der, format: "der", type: "spki" });
      let plain: boolean;
      try {
        plain = verify(null, cancelSigningBytes(cancel.record), key, cancel.signature);
      } catch {
        plain = false;
      }
      assert.equal(plain, true, `${name}: node:crypto alone accepts it (if this fails, OpenSSL became strict)`);
    }
  });
});

describe("strictness", () => {
  test("every small-order encoding is listed and refused as R and as a key", () => {
    assert.deepEqual([...SMALL_ORDER_ENCODINGS].sort(), [...s.small_order_encodings].sort());
    const good = cancelFromJson(s.cancels[0]!.cancel);
    const msg = cancelSigningBytes(good.record);
    for (const e of s.small_order_encodings) {
      assert.ok(isSmallOrder(unhex(e)), e);
      const forged = new Uint8Array(good.signature);
      forged.set(unhex(e), 0);
      assert.equal(PublicKey.fromHex(s.public_key).verifyStrict(msg, forged), false, `R = ${e}`);
      let key: PublicKey | null = null;
      try {
        key = PublicKey.fromHex(e);
      } catch {
        // OpenSSL may refuse to load it at all, which is as good.
      }
      if (key) {
        assert.equal(key.verifyStrict(msg, unhex(e + "00".repeat(32))), false, `key = ${e}`);
      }
    }
    assert.equal(isSmallOrder(unhex(s.public_key)), false);
  });

  test("S must be below the group order", () => {
    const L = unhex("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010");
    assert.equal(isCanonicalScalar(L), false, "L itself");
    const below = new Uint8Array(L);
    below[0] = 0xec;
    assert.equal(isCanonicalScalar(below), true, "L - 1");
    assert.equal(isCanonicalScalar(new Uint8Array(32).fill(0xff)), false);
  });

  test("a signature made here with the vectors' seed verifies, and a flipped bit does not", () => {
    const pkcs8 = Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), unhex(s.seed)]);
    const priv = createPrivateKey({ key: pkcs8, format: "der", type: "pkcs8" });
    const key = PublicKey.fromHex(s.public_key);
    const msg = new TextEncoder().encode("hello");
    const sig = new Uint8Array(sign(null, msg, priv));
    assert.equal(key.verifyStrict(msg, sig), true);
    sig[5] = (sig[5] as number) ^ 1;
    assert.equal(key.verifyStrict(msg, sig), false);
    assert.equal(key.verifyStrict(msg, sig.subarray(0, 63)), false, "63 bytes");
  });

  test("a public key in hex is checked", () => {
    assert.throws(() => PublicKey.fromHex("abcd"), /64 hex characters/);
    assert.throws(() => PublicKey.fromHex("zz".repeat(32)), /64 hex characters/);
  });
});
