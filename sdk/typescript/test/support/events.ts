/** The events a child writes on its end of a channel, read by a test playing the supervisor. */

import type { Socket } from "node:net";

import { FrameDecoder, type Event } from "../../dist/protocol/index.js";

export class EventStream {
  private readonly decoder = FrameDecoder.event();
  private readonly events: Event[] = [];
  private wake: (() => void) | null = null;
  private ended = false;

  /** `context` adds to a timeout's message (the child's stderr, say). */
  constructor(
    socket: Socket,
    private readonly context: () => string = () => "",
  ) {
    socket.on("data", (chunk: Buffer) => {
      this.decoder.push(chunk);
      for (let f = this.decoder.next(); f !== null; f = this.decoder.next()) this.events.push(f.body);
      this.wake?.();
    });
    socket.on("end", () => this.end());
    socket.on("error", () => undefined);
  }

  /** No more events will come (the child closed its end, or exited). */
  end(): void {
    this.ended = true;
    this.wake?.();
  }

  /** Whether the child closed its end. */
  get isEnded(): boolean {
    return this.ended;
  }

  /** The next event (Pongs skipped when `skipPongs`), or a rejection after `ms`. */
  async next(ms: number, skipPongs: boolean): Promise<Event> {
    const deadline = Date.now() + ms;
    for (;;) {
      const e = this.events.shift();
      if (e !== undefined && !(skipPongs && e.type === "Pong")) return e;
      if (e !== undefined) continue;
      if (this.ended) throw new Error(`the child closed the channel${this.context()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no event within ${ms} ms${this.context()}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }
}
