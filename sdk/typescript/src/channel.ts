/**
 * The control channel: the inherited fd taken as a socket, and the reader
 * that turns its bytes into checked Control messages (lengths before
 * bodies, sequence numbers in order) on the event loop.
 */

import { fstatSync } from "node:fs";
import { Socket } from "node:net";

import { ConnectError } from "./errors.js";
import { FrameDecoder, MAX_FRAME_LIMIT, ProtocolViolation, SeqTracker } from "./protocol/frame.js";
import type { Control } from "./protocol/messages.js";

let taken = false;

/**
 * Takes the inherited control fd: checks it is an open socket and wraps it
 * in a `net.Socket`. A process has one control channel, so this works once.
 */
export function openControlFd(fd: number): Socket {
  let isSocket: boolean;
  try {
    isSocket = fstatSync(fd).isSocket();
  } catch (e) {
    throw new ConnectError(
      `control fd ${fd} (WFHOST_CONTROL_FD) is unusable: ${(e as Error).message}; this process must be started by \`wfhost supervise\``,
    );
  }
  if (!isSocket) {
    throw new ConnectError(
      `control fd ${fd} (WFHOST_CONTROL_FD) is unusable: not a socket; this process must be started by \`wfhost supervise\``,
    );
  }
  if (taken) throw new ConnectError("the control channel was already taken by an earlier connect() in this process");
  taken = true;
  return new Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
}

/** How the stream of Control frames ended: cleanly (null) or with the reason it broke. */
export type EndOfChannel = null | { violation: boolean; message: string };

/**
 * Reads Control frames off `socket` and hands each to `handler`, in order,
 * synchronously as bytes arrive. The first violation or I/O error stops
 * it; `onEnd` is told once.
 */
export class FrameReader {
  private readonly decoder = FrameDecoder.control(MAX_FRAME_LIMIT);
  private readonly seq = new SeqTracker();
  private done = false;

  constructor(
    private readonly socket: Socket,
    public handler: (message: Control) => void,
    private readonly onEnd: (end: EndOfChannel) => void,
  ) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.onStreamEnd());
    socket.on("error", (e: Error) => this.end({ violation: false, message: `control channel I/O: ${e.message}` }));
    socket.on("close", () => this.end(null));
  }

  /** Refuses bodies above `maxFrameBytes` from now on (the Welcome's limit). */
  setLimit(maxFrameBytes: number): void {
    this.decoder.setLimit(maxFrameBytes);
  }

  /** Stops handing out frames (the runtime closed). */
  stop(): void {
    this.done = true;
  }

  private onData(chunk: Buffer): void {
    if (this.done) return;
    try {
      this.decoder.push(chunk);
      for (;;) {
        if (this.done) return;
        const frame = this.decoder.next();
        if (frame === null) return;
        this.seq.check(frame.seq);
        this.handler(frame.body);
      }
    } catch (e) {
      if (e instanceof ProtocolViolation) {
        this.end({ violation: true, message: `protocol violation: ${e.message}` });
      } else {
        throw e;
      }
    }
  }

  private onStreamEnd(): void {
    try {
      this.decoder.finish();
      this.end(null);
    } catch (e) {
      this.end({ violation: true, message: `protocol violation: ${(e as Error).message}` });
    }
  }

  private end(how: EndOfChannel): void {
    if (this.done) return;
    this.done = true;
    this.onEnd(how);
  }
}
