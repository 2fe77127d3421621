/**
 * Codec throughput in Node, as `ipc/benches/codec.rs` measures it in Rust:
 * one iteration encodes a frame (header, seq, body) into a reused buffer
 * and decodes it back, as one message crossing the wire costs on both
 * ends together. Prints frames per second for each message.
 *
 *     npm run bench
 */

import { Writer } from "../protocol/bincode.js";
import { FrameDecoder, decodeOne, encodeControlFrame, encodeEventFrame, type Frame } from "../protocol/frame.js";
import type { Control, Event } from "../protocol/messages.js";

const SECONDS = Number(process.env["BENCH_SECONDS"] ?? "1");

function measure(name: string, once: () => unknown): void {
  // Warm up so the JIT has compiled the path.
  for (let i = 0; i < 20_000; i++) once();
  let n = 0;
  const t0 = process.hrtime.bigint();
  const budget = BigInt(Math.round(SECONDS * 1e9));
  let elapsed = 0n;
  while (elapsed < budget) {
    for (let i = 0; i < 1000; i++) once();
    n += 1000;
    elapsed = process.hrtime.bigint() - t0;
  }
  const secs = Number(elapsed) / 1e9;
  const perSec = n / secs;
  console.log(`${name.padEnd(22)} ${(perSec / 1e6).toFixed(2).padStart(6)} M frames/s  ${((secs / n) * 1e9).toFixed(0).padStart(6)} ns/frame`);
}

/** Encodes `body` into a reused buffer and decodes it back, once per call. */
function roundTrip<B>(
  encode: (frame: Frame<B>, maxFrameBytes: number, w: Writer) => Uint8Array,
  decoder: FrameDecoder<B>,
  body: B,
): () => unknown {
  const w = new Writer(8 * 1024);
  const frame = { seq: 1234n, body };
  return () => {
    w.reset();
    return decodeOne(decoder, encode(frame, 1 << 20, w));
  };
}

const event = (body: Event) => roundTrip(encodeEventFrame, FrameDecoder.event(), body);
const control = (body: Control) => roundTrip(encodeControlFrame, FrameDecoder.control(), body);

const payload = new Uint8Array(4096);
for (let i = 0; i < payload.length; i++) payload[i] = (i * 31) & 0xff;

console.log(`@wfhost/child codec, encode + decode of one frame (Node ${process.version}, ${SECONDS} s each)`);
measure("event_pong", event({ type: "Pong", nonce: 0x1234_5678n }));
measure("event_step_started", event({ type: "StepStarted", run: "run-0192f5a8", step: "charge-card", drain: "Cancel" }));
measure("control_ping", control({ type: "Ping", nonce: 0x1234_5678n }));
measure("control_mail_4k", control({ type: "Mail", id: 77n, attempt: 1, payload }));
