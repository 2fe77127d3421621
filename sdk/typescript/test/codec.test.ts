/**
 * The codec against every frame and every invalid frame of the golden
 * vectors: each frame decodes to its message and its message encodes to
 * the exact bytes; each invalid frame is refused with its class.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  DecodeError,
  EncodeError,
  FrameDecoder,
  ProtocolViolation,
  Reader,
  SeqTracker,
  Writer,
  decodeOne,
  encodeControlFrame,
  encodeEventFrame,
  OLDEST_PROTOCOL,
  PROTOCOL_VERSION,
  controlSince,
  eventSince,
  type Control,
  type Event,
} from "../dist/protocol/index.js";
import { hex, loadVectors, messageFromJson, messageToJson, unhex } from "./vectors.js";

const v = loadVectors();

const CONTROLS: Control["type"][] = ["Welcome", "Drain", "Cancel", "Mail", "Ping", "Shutdown", "Lease", "CancelMail", "Answer"];
const EVENTS: Event["type"][] = [
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
];

describe("golden frames", () => {
  test("the vectors are of protocol 3 (oldest 2), with 91 frames covering every message", () => {
    assert.equal(v.protocol, PROTOCOL_VERSION);
    assert.equal(v.oldest_protocol, OLDEST_PROTOCOL);
    assert.ok(v.frames.length >= 91, `only ${v.frames.length} frames in the vectors`);
    const seen = (dir: string) => new Set(v.frames.filter((f) => f.direction === dir).map((f) => f.message["type"]));
    assert.deepEqual([...seen("down")].sort(), [...CONTROLS].sort(), "every Control variant, and no other");
    assert.deepEqual([...seen("up")].sort(), [...EVENTS].sort(), "every Event variant, and no other");
    for (const t of CONTROLS) assert.equal(controlSince(t), ["CancelMail", "Answer"].includes(t) ? 3 : 2, t);
    for (const t of EVENTS) assert.equal(eventSince(t), EVENTS.indexOf(t) >= 10 ? 3 : 2, t);
    const origins = new Set(
      [...v.frames.map((f) => f.message), ...v.signing.cancels, ...v.signing.mail_cancels].flatMap((m) => {
        const c = m["cancel"] as { origin?: string } | undefined;
        return c?.origin === undefined ? [] : [c.origin];
      }),
    );
    assert.deepEqual([...origins].sort(), ["Deadline", "Operator", "SupervisorDrain"]);
    const verdicts = new Set(v.frames.flatMap((f) => (f.message["type"] === "MailCancelVerdict" ? [(f.message["verdict"] as { kind: string }).kind] : [])));
    assert.deepEqual([...verdicts].sort(), ["Acknowledged", "NotSupported", "Refused"]);
  });

  for (const f of v.frames) {
    test(`${f.direction} ${f.name}: decodes to its message`, () => {
      const bytes = unhex(f.hex);
      const frame =
        f.direction === "down"
          ? decodeOne(FrameDecoder.control(v.max_frame_bytes * 64), bytes)
          : decodeOne(FrameDecoder.event(v.max_frame_bytes * 64), bytes);
      assert.equal(frame.seq, BigInt(f.seq));
      assert.deepEqual(messageToJson(frame.body), f.message);
    });
    test(`${f.direction} ${f.name}: encodes to its bytes`, () => {
      const message = messageFromJson(f.message);
      const frame = { seq: BigInt(f.seq), body: message };
      const bytes =
        f.direction === "down"
          ? encodeControlFrame(frame as { seq: bigint; body: Control })
          : encodeEventFrame(frame as { seq: bigint; body: Event });
      assert.equal(hex(bytes), f.hex);
    });
    test(`${f.direction} ${f.name}: decodes when fed one byte at a time`, () => {
      const bytes = unhex(f.hex);
      const d = f.direction === "down" ? FrameDecoder.control() : FrameDecoder.event();
      let got = null;
      for (let i = 0; i < bytes.length; i++) {
        assert.equal(got, null, "no frame before its last byte");
        d.push(bytes.subarray(i, i + 1));
        got = d.next();
      }
      assert.ok(got, "a frame after the last byte");
      assert.deepEqual(messageToJson(got.body), f.message);
      d.finish();
    });
  }
});

describe("invalid frames", () => {
  assert.ok(v.invalid_frames.length >= 15);
  assert.ok(
    v.invalid_frames.some((f) => f.name === "unknown Event variant" && f.hex === "000000020110"),
    "the unknown Event variant is discriminant 16",
  );
  for (const f of v.invalid_frames) {
    test(`${f.direction} ${f.name}: refused as ${f.error}`, () => {
      const d = f.direction === "down" ? FrameDecoder.control(v.max_frame_bytes) : FrameDecoder.event(v.max_frame_bytes);
      assert.throws(
        () => decodeOne(d as FrameDecoder<unknown>, unhex(f.hex)),
        (e: unknown) => {
          assert.ok(e instanceof ProtocolViolation, `a ProtocolViolation, got ${String(e)}`);
          assert.equal(e.kind, f.error, `${f.note}: ${e.message}`);
          return true;
        },
      );
    });
  }

  test("Event 16 and Control 9 name no variant; 15 and 8 are the last of protocol 3", () => {
    assert.throws(() => decodeOne(FrameDecoder.event(), unhex("000000020110")), /Event: variant 16 names none \(there are 16\)/);
    assert.throws(() => decodeOne(FrameDecoder.control(), unhex("000000020109")), /Control: variant 9 names none \(there are 9\)/);
    assert.deepEqual(decodeOne(FrameDecoder.event(), unhex("00000004010f0700")).body, { type: "GiveBack", id: 7n, awaiting_answer: false });
    assert.deepEqual(decodeOne(FrameDecoder.control(), unhex("000000050108070000")).body, {
      type: "Answer",
      id: 7n,
      key: "",
      value: new Uint8Array(0),
    });
    // A verdict and a cancel origin beyond the last are refused too.
    assert.throws(() => decodeOne(FrameDecoder.event(), unhex("00000004010c0703")), /CancelVerdict: variant 3 names none/);
    assert.throws(() => decodeOne(FrameDecoder.control(), unhex("00000004010703" + "00")), /CancelOrigin: variant 3 names none/);
    assert.throws(() => decodeOne(FrameDecoder.event(), unhex("00000004010a0702")), /cancellable: 2 is not a bool/);
  });

  test("a too-large header is refused before the body arrives", () => {
    const d = FrameDecoder.control(1024);
    d.push(unhex("00000401"));
    assert.throws(() => d.next(), /frame of 1025 bytes exceeds max_frame_bytes 1024/);
  });

  test("a claimed length far beyond the body allocates nothing and is refused", () => {
    // A Mail whose payload claims u64::MAX bytes.
    const body = unhex("0103" + "01" + "01" + "fdffffffffffffffff");
    const frame = new Uint8Array(4 + body.length);
    new DataView(frame.buffer).setUint32(0, body.length);
    frame.set(body, 4);
    assert.throws(() => decodeOne(FrameDecoder.control(), frame), /claims 18446744073709551615 bytes/);
  });
});

describe("bincode rules", () => {
  test("varint boundaries round-trip and non-minimal forms are read as Rust reads them", () => {
    for (const n of [0n, 250n, 251n, 65535n, 65536n, 4294967295n, 4294967296n, 18446744073709551615n]) {
      const w = new Writer().u64(n, "n");
      assert.equal(new Reader(w.bytes()).u64("n"), n);
    }
    assert.equal(hex(new Writer().u64(250n, "n").bytes()), "fa");
    assert.equal(hex(new Writer().u64(251n, "n").bytes()), "fbfb00");
    // bincode does not insist on the shortest form.
    assert.equal(new Reader(unhex("fb0500")).u64("n"), 5n);
    assert.equal(new Reader(unhex("fd0500000000000000")).u64("n"), 5n);
    assert.throws(() => new Reader(unhex("fd0500000000000000")).u32("n"), DecodeError);
    assert.throws(() => new Reader(unhex("fe")).u64("n"), DecodeError);
    assert.throws(() => new Reader(unhex("ff")).u64("n"), DecodeError);
  });

  test("strings keep a leading BOM and refuse overlong or surrogate UTF-8", () => {
    const bom = new Writer().str("\ufeffx", "s").bytes();
    assert.equal(hex(bom), "04efbbbf78");
    assert.equal(new Reader(bom).str("s"), "\ufeffx");
    for (const bad of ["02c0af", "03eda080", "01ff", "02c328"]) {
      assert.throws(() => new Reader(unhex(bad)).str("s"), /not valid UTF-8/);
    }
  });

  test("values the wire cannot carry are refused when encoding", () => {
    assert.throws(() => new Writer().str("a\ud800", "name"), EncodeError);
    assert.throws(() => new Writer().u32(2 ** 32, "attempt"), EncodeError);
    assert.throws(() => new Writer().u32(1.5, "attempt"), EncodeError);
    assert.throws(() => new Writer().u64(-1n, "id"), EncodeError);
    assert.throws(() => new Writer().u64(2n ** 64n, "id"), EncodeError);
  });

  test("an event above max_frame_bytes is refused by the sender", () => {
    const big = { seq: 1n, body: { type: "Custom", kind: "k", bytes: new Uint8Array(2000) } as Event };
    assert.throws(() => encodeEventFrame(big, 1024), /exceeds max_frame_bytes 1024/);
  });
});

describe("sequence numbers", () => {
  test("1, 2, 3 pass; a gap and a repeat are named", () => {
    const s = new SeqTracker();
    s.check(1n);
    s.check(2n);
    assert.throws(() => s.check(4n), /sequence gap: expected 3, got 4/);
    const t = new SeqTracker();
    t.check(1n);
    assert.throws(() => t.check(1n), /sequence repeat: expected 2, got 1/);
    const issue = new SeqTracker();
    assert.deepEqual([issue.issue(), issue.issue()], [1n, 2n]);
  });
});
