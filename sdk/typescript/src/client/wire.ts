/**
 * The control socket's framing: every message, either way, is a u32
 * big-endian length N (1 ≤ N ≤ 4 MiB) and N bytes of UTF-8 JSON; a `send`
 * request is followed by its raw payload.
 */

import type { Socket } from "node:net";

/** The largest JSON message either side sends (4 MiB). */
export const MAX_MESSAGE = 4 << 20;

/** One length-prefixed JSON message. */
export function encodeMessage(value: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(value), "utf8");
  if (json.length === 0 || json.length > MAX_MESSAGE) {
    throw new RangeError(`control message of ${json.length} bytes (limit ${MAX_MESSAGE})`);
  }
  const header = Buffer.alloc(4);
  header.writeUInt32BE(json.length, 0);
  return Buffer.concat([header, json]);
}

/** What came off the socket: a message (raw text kept for exact u64s), the end, or a failure. */
export type Incoming = { kind: "message"; text: string } | { kind: "end" } | { kind: "error"; message: string };

/** Splits a socket's bytes into JSON messages and queues them for `next()`. */
export class MessageReader {
  private buf: Buffer = Buffer.alloc(0);
  private readonly queue: Incoming[] = [];
  private waiter: ((m: Incoming) => void) | null = null;
  private finished = false;

  /** Whether the connection ended (or failed): nothing more will come. */
  get ended(): boolean {
    return this.finished;
  }

  /** Whether any byte of an answer came since the last `next()`. */
  get answered(): boolean {
    return this.buf.length > 0 || this.queue.length > 0;
  }

  constructor(socket: Socket) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.finish({ kind: "end" }));
    socket.on("close", () => this.finish({ kind: "end" }));
    socket.on("error", (e: Error) => this.finish({ kind: "error", message: e.message }));
  }

  private onData(chunk: Buffer): void {
    if (this.finished) return;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 4) {
      const len = this.buf.readUInt32BE(0);
      if (len === 0 || len > MAX_MESSAGE) {
        return this.finish({ kind: "error", message: `control message of ${len} bytes (limit ${MAX_MESSAGE})` });
      }
      if (this.buf.length < 4 + len) return;
      const text = this.buf.subarray(4, 4 + len).toString("utf8");
      this.buf = this.buf.subarray(4 + len);
      this.push({ kind: "message", text });
    }
  }

  private push(m: Incoming): void {
    const w = this.waiter;
    if (w !== null) {
      this.waiter = null;
      w(m);
    } else {
      this.queue.push(m);
    }
  }

  private finish(m: Incoming): void {
    if (this.finished) return;
    this.finished = true;
    if (m.kind === "end" && this.buf.length > 0) {
      this.push({ kind: "error", message: `the connection ended inside a message (${this.buf.length} bytes)` });
    } else {
      this.push(m);
    }
  }

  /** The next message, or how the stream ended. */
  next(): Promise<Incoming> {
    const m = this.queue.shift();
    if (m !== undefined) return Promise.resolve(m);
    if (this.finished) return Promise.resolve({ kind: "end" });
    return new Promise((resolve) => (this.waiter = resolve));
  }
}
