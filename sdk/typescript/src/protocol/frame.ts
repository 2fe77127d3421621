/**
 * Framing: a u32 big-endian length, then that many bytes of body encoding
 * one frame, `seq` (a u64 varint, 1, 2, 3, … per direction) and the
 * message. A length of 0, or above `max_frame_bytes`, is refused from the
 * header alone, before any of the body is buffered.
 */

import { DecodeError, Reader, Writer } from "./bincode.js";
import { type Control, type Event, readControl, readEvent, writeControl, writeEvent } from "./messages.js";

/** The default `max_frame_bytes` (1 MiB). */
export const DEFAULT_MAX_FRAME_BYTES = 1 << 20;
/** The largest `max_frame_bytes` any configuration may set (64 MiB). */
export const MAX_FRAME_LIMIT = 64 << 20;
/** Bytes in the length prefix. */
export const HEADER_BYTES = 4;

/** The class of a protocol violation, as `docs/protocol-vectors.json` names them. */
export type ViolationKind =
  | "empty"
  | "too_large"
  | "truncated"
  | "undecodable"
  | "seq_gap"
  | "seq_repeat"
  | "unexpected";

/** The peer broke the contract; the channel cannot go on. */
export class ProtocolViolation extends Error {
  override name = "ProtocolViolation";
  constructor(
    readonly kind: ViolationKind,
    message: string,
  ) {
    super(message);
  }
}

/** One message with its per-direction sequence number. */
export interface Frame<B> {
  seq: bigint;
  body: B;
}

/** Encodes one whole frame (header and body); refuses a body above `maxFrameBytes`. */
function encodeWith<B>(write: (w: Writer, b: B) => void, frame: Frame<B>, maxFrameBytes: number, w: Writer): void {
  const start = w.length;
  w.raw(ZERO_HEADER);
  w.u64(frame.seq, "seq");
  write(w, frame.body);
  const len = w.length - start - HEADER_BYTES;
  if (len > maxFrameBytes) {
    throw new ProtocolViolation("too_large", `frame of ${len} bytes exceeds max_frame_bytes ${maxFrameBytes}`);
  }
  w.patchU32BE(start, len);
}

const ZERO_HEADER = new Uint8Array(HEADER_BYTES);

/** The frame bytes of an Event (child → supervisor). */
export function encodeEventFrame(frame: Frame<Event>, maxFrameBytes = MAX_FRAME_LIMIT, w = new Writer()): Uint8Array {
  encodeWith(writeEvent, frame, maxFrameBytes, w);
  return w.bytes();
}

/** Appends the frame bytes of an Event to `w` (several frames, one write). */
export function appendEventFrame(w: Writer, frame: Frame<Event>, maxFrameBytes: number): void {
  const start = w.length;
  try {
    encodeWith(writeEvent, frame, maxFrameBytes, w);
  } catch (e) {
    w.truncate(start);
    throw e;
  }
}

/** The frame bytes of a Control message (supervisor → child). */
export function encodeControlFrame(frame: Frame<Control>, maxFrameBytes = MAX_FRAME_LIMIT, w = new Writer()): Uint8Array {
  encodeWith(writeControl, frame, maxFrameBytes, w);
  return w.bytes();
}

/** Decodes a body that must hold exactly one frame. */
function decodeBody<B>(read: (r: Reader) => B, body: Uint8Array): Frame<B> {
  const r = new Reader(body);
  try {
    const seq = r.u64("seq");
    const message = read(r);
    r.end();
    return { seq, body: message };
  } catch (e) {
    if (e instanceof DecodeError) throw new ProtocolViolation("undecodable", `undecodable frame body: ${e.message}`);
    throw e;
  }
}

/**
 * Splits frames off a byte stream. Feed it with `push`, take frames with
 * `next` (null when more bytes are needed), and call `end` when the stream
 * ends to learn whether it ended inside a frame.
 */
export class FrameDecoder<B> {
  private buf: Uint8Array = new Uint8Array(0);
  private start = 0;
  private end_ = 0;
  private maxFrameBytes: number;

  constructor(
    private readonly read: (r: Reader) => B,
    maxFrameBytes: number,
  ) {
    this.maxFrameBytes = Math.min(maxFrameBytes, MAX_FRAME_LIMIT);
  }

  /** A decoder of Control frames (what a child reads). */
  static control(maxFrameBytes = MAX_FRAME_LIMIT): FrameDecoder<Control> {
    return new FrameDecoder(readControl, maxFrameBytes);
  }

  /** A decoder of Event frames (what a supervisor reads). */
  static event(maxFrameBytes = MAX_FRAME_LIMIT): FrameDecoder<Event> {
    return new FrameDecoder(readEvent, maxFrameBytes);
  }

  /** The limit in force. */
  get limit(): number {
    return this.maxFrameBytes;
  }

  /** Changes the limit (after the handshake, to the Welcome's). */
  setLimit(maxFrameBytes: number): void {
    this.maxFrameBytes = Math.min(maxFrameBytes, MAX_FRAME_LIMIT);
  }

  /** Bytes buffered and not yet taken as frames. */
  get buffered(): number {
    return this.end_ - this.start;
  }

  /** Appends bytes read from the stream. */
  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    if (this.start === this.end_) {
      // Nothing pending: decode straight from the chunk.
      this.buf = chunk;
      this.start = 0;
      this.end_ = chunk.length;
      return;
    }
    const pending = this.end_ - this.start;
    const next = new Uint8Array(pending + chunk.length);
    next.set(this.buf.subarray(this.start, this.end_));
    next.set(chunk, pending);
    this.buf = next;
    this.start = 0;
    this.end_ = next.length;
  }

  /** Checks a length prefix before any of the body is taken. */
  private checkLen(len: number): void {
    if (len === 0) throw new ProtocolViolation("empty", "empty frame (length 0)");
    if (len > this.maxFrameBytes) {
      throw new ProtocolViolation("too_large", `frame of ${len} bytes exceeds max_frame_bytes ${this.maxFrameBytes}`);
    }
  }

  /** The next whole frame, or null when more bytes are needed. */
  next(): Frame<B> | null {
    const have = this.end_ - this.start;
    if (have < HEADER_BYTES) return null;
    const b = this.buf;
    const s = this.start;
    const len = ((b[s] as number) * 0x1000000 + ((b[s + 1] as number) << 16) + ((b[s + 2] as number) << 8) + (b[s + 3] as number));
    this.checkLen(len);
    if (have < HEADER_BYTES + len) return null;
    const body = b.subarray(s + HEADER_BYTES, s + HEADER_BYTES + len);
    this.start = s + HEADER_BYTES + len;
    if (this.start === this.end_) {
      this.buf = new Uint8Array(0);
      this.start = this.end_ = 0;
    }
    return decodeBody(this.read, body);
  }

  /** The stream ended: refuses an unfinished frame. */
  finish(): void {
    const have = this.end_ - this.start;
    if (have === 0) return;
    let want = HEADER_BYTES;
    if (have >= HEADER_BYTES) {
      const v = new DataView(this.buf.buffer, this.buf.byteOffset + this.start, HEADER_BYTES);
      want = HEADER_BYTES + v.getUint32(0, false);
    }
    throw new ProtocolViolation("truncated", `stream ended inside a frame (${have} of ${want} bytes)`);
  }
}

/** Decodes a buffer that must hold exactly one frame and nothing else. */
export function decodeOne<B>(decoder: FrameDecoder<B>, bytes: Uint8Array): Frame<B> {
  decoder.push(bytes);
  const frame = decoder.next();
  if (frame === null) decoder.finish();
  if (frame === null) throw new ProtocolViolation("truncated", "stream ended inside a frame");
  if (decoder.buffered > 0) {
    throw new ProtocolViolation("undecodable", `undecodable frame body: ${decoder.buffered} bytes after the frame`);
  }
  return frame;
}

/** Checks the sequence numbers of one direction, or hands them out to a sender: 1, 2, 3, … */
export class SeqTracker {
  private nextSeq = 1n;

  /** Accepts `seq` if it is the next one, else names the gap or repeat. */
  check(seq: bigint): void {
    const expected = this.nextSeq;
    if (seq === expected) {
      this.nextSeq = expected + 1n;
    } else if (seq > expected) {
      throw new ProtocolViolation("seq_gap", `sequence gap: expected ${expected}, got ${seq}`);
    } else {
      throw new ProtocolViolation("seq_repeat", `sequence repeat: expected ${expected}, got ${seq}`);
    }
  }

  /** The next sequence number for a sender. */
  issue(): bigint {
    const seq = this.nextSeq;
    this.nextSeq = seq + 1n;
    return seq;
  }
}
