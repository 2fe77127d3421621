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
  mailCancelSigningBytes,
  MAIL_CANCEL_DOMAIN,
  verifyCancel,
  verifyMailCancel,
} from "../dist/protocol/index.js";
import { cancelFromJson, hex, loadVectors, mailCancelFromJson, unhex } from "./vectors.js";

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

describe("mail cancel vectors (protocol 3)", () => {
  assert.ok(s.mail_cancels.length >= 8, `only ${s.mail_cancels.length} mail cancel vectors`);
  const held = new Set(s.held_items.map((x) => BigInt(x)));
  const trusted = PublicKey.fromHex(s.public_key);

  test("the domain and the item held", () => {
    assert.equal(s.mail_domain, MAIL_CANCEL_DOMAIN);
    assert.deepEqual(s.held_items, ["17"]);
  });

  for (const c of s.mail_cancels) {
    test(`${c.name}: ${c.verdict}${c.refusal ? ` (${c.refusal})` : ""}`, () => {
      const cancel = mailCancelFromJson(c.cancel);
      assert.equal(hex(mailCancelSigningBytes(cancel.record)), c.signing_bytes, "signing bytes");
      const frame = decodeOne(FrameDecoder.control(), unhex(c.frame));
      assert.equal(frame.body.type, "CancelMail");
      assert.deepEqual(frame.body.type === "CancelMail" && frame.body.cancel, cancel, "the frame carries the cancel");
      const verdict = verifyMailCancel(cancel, trusted, s.deployment, (id) => held.has(id));
      if (c.verdict === "accept") {
        assert.equal(verdict, null, c.why);
      } else {
        assert.ok(verdict, `refused: ${c.why}`);
        assert.equal(verdict.refusal, c.refusal, `${c.why}: ${verdict.message}`);
      }
    });
  }

  test("every refusal class of a mail cancel is covered, and unknown_item names the item", () => {
    const classes = new Set(s.mail_cancels.map((c) => c.refusal));
    for (const r of [null, "invalid_signature", "unknown_key", "wrong_deployment", "unknown_item"]) assert.ok(classes.has(r), String(r));
    const c = s.mail_cancels.find((x) => x.refusal === "unknown_item")!;
    const verdict = verifyMailCancel(mailCancelFromJson(c.cancel), trusted, s.deployment, (id) => held.has(id));
    assert.equal(verdict?.message, "cancel is for mail item 9, which this child does not hold");
  });

  test("a run cancel's signature and a mail cancel's do not pass as each other", () => {
    const mail = mailCancelFromJson(s.mail_cancels.find((x) => x.verdict === "accept")!.cancel);
    const run = cancelFromJson(s.cancels.find((x) => x.verdict === "accept")!.cancel);
    assert.equal(trusted.verifyStrict(cancelSigningBytes(run.record), mail.signature), false);
    assert.equal(trusted.verifyStrict(mailCancelSigningBytes(mail.record), run.signature), false);
    const small = new Uint8Array(mail.signature);
    small.set(unhex(s.small_order_encodings[0]!), 0);
    assert.equal(verifyMailCancel({ ...mail, signature: small }, trusted, s.deployment, () => true)?.refusal, "invalid_signature");
    assert.equal(verifyMailCancel({ ...mail, signature: mail.signature.subarray(0, 63) }, trusted, s.deployment, () => true)?.refusal, "malformed_signature");
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
