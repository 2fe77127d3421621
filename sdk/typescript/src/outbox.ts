/**
 * The one path by which events reach the supervisor. Events are numbered
 * and encoded the moment they are posted (so their order is the order of
 * the calls), gathered while the current task runs, and written in one
 * `write` per burst from a microtask: a Pong goes out before the event
 * loop turns, and a burst of acks costs one system call.
 */

import type { Socket } from "node:net";

import { ChannelClosed, InvalidEvent } from "./errors.js";
import { EncodeError, Writer } from "./protocol/bincode.js";
import { ProtocolViolation, appendEventFrame } from "./protocol/frame.js";
import { eventSince, type Event } from "./protocol/messages.js";

/** A burst is written once it holds this much, without waiting for the microtask. */
const BATCH_BYTES = 64 * 1024;

type Waiter = { resolve: () => void; reject: (e: Error) => void };

export class Outbox {
  private nextSeq = 1n;
  private batch = new Writer(256);
  private waiters: Waiter[] = [];
  private scheduled = false;
  private failure: string | null = null;
  private ended = false;
  private protocol = 2;

  constructor(
    private readonly socket: Socket,
    private maxFrameBytes: number,
  ) {}

  /** The protocol version this child speaks: a newer version's events are refused locally. */
  setProtocol(version: number): void {
    this.protocol = version;
  }

  /** The supervisor's limit, known from Welcome. */
  setMaxFrameBytes(n: number): void {
    this.maxFrameBytes = n;
  }

  /** The limit in force for events. */
  get frameLimit(): number {
    return this.maxFrameBytes;
  }

  /** Why nothing can be sent any more, or null while the channel is open. */
  get closedReason(): string | null {
    return this.failure ?? (this.ended ? "this child closed the control channel" : null);
  }

  /**
   * Queues `event` and returns at once. Throws `InvalidEvent` when the wire
   * cannot carry it and `ChannelClosed` when the channel is closed.
   */
  post(event: Event): void {
    this.append(event);
    this.schedule();
  }

  /**
   * Queues `event` and returns a promise of its write; throws at once, as
   * `post` does, when it cannot be queued.
   */
  enqueue(event: Event): Promise<void> {
    this.append(event);
    const written = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.schedule();
    return written;
  }

  /** Queues `event` and resolves once it is handed to the kernel. */
  send(event: Event): Promise<void> {
    try {
      return this.enqueue(event);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Encodes `event` into the burst with the next sequence number. */
  private append(event: Event): void {
    const closed = this.closedReason;
    if (closed !== null) throw new ChannelClosed(`control channel is closed (${closed}); the supervisor is gone or asked this child to stop`);
    const since = eventSince(event.type);
    if (since > this.protocol) {
      throw new InvalidEvent(`${event.type} event not sent: it is a protocol-${since} message, and this child speaks protocol ${this.protocol}`);
    }
    try {
      appendEventFrame(this.batch, { seq: this.nextSeq, body: event }, this.maxFrameBytes);
    } catch (e) {
      if (e instanceof EncodeError || e instanceof ProtocolViolation || e instanceof RangeError) {
        const tooLarge = e instanceof ProtocolViolation && e.kind === "too_large";
        throw new InvalidEvent(`${event.type} event not sent: ${e.message}; send less data per event, or well-formed text`, tooLarge);
      }
      throw e;
    }
    this.nextSeq += 1n;
  }

  /** Writes a large burst now, else once the current task ends. */
  private schedule(): void {
    if (this.batch.length >= BATCH_BYTES) {
      this.flush();
    } else if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  /** Resolves once everything posted so far is written. */
  drainQueue(): Promise<void> {
    const closed = this.closedReason;
    if (closed !== null) return Promise.reject(new ChannelClosed(`control channel is closed (${closed})`));
    if (this.batch.length === 0 && this.waiters.length === 0) {
      return new Promise((resolve, reject) => {
        this.socket.write(new Uint8Array(0), (err) => (err ? reject(new ChannelClosed(err.message)) : resolve()));
      });
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Writes the burst gathered so far. */
  private flush(): void {
    this.scheduled = false;
    if (this.batch.length === 0 && this.waiters.length === 0) return;
    const bytes = this.batch.bytes();
    const waiters = this.waiters;
    this.batch = new Writer(256);
    this.waiters = [];
    if (this.failure !== null || this.socket.destroyed) {
      const e = new ChannelClosed(`control channel is closed (${this.failure ?? "the socket is gone"})`);
      for (const w of waiters) w.reject(e);
      return;
    }
    this.socket.write(bytes, (err) => {
      if (err) {
        this.fail(`writing to the supervisor failed: ${err.message}`);
        const e = new ChannelClosed(`control channel is closed (${this.failure})`);
        for (const w of waiters) w.reject(e);
      } else {
        for (const w of waiters) w.resolve();
      }
    });
  }

  /** Records the first failure; every later post reports it. */
  fail(reason: string): void {
    this.failure ??= reason;
  }

  /** Writes what is queued, then closes the sending direction (the supervisor reads end of stream). */
  end(): Promise<void> {
    if (this.ended || this.failure !== null) return Promise.resolve();
    this.flush();
    this.ended = true;
    return new Promise((resolve) => {
      if (this.socket.destroyed || !this.socket.writable) return resolve();
      this.socket.end(() => resolve());
    });
  }
}
