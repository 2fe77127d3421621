/**
 * State shared by the runtime's handles (Runtime, Mail, Step) and the
 * dispatcher: the protocol version spoken, the work ledger, the mail ledger
 * and inbox, the outbox, the drain signal, and how the runtime closed.
 */

import type { Socket } from "node:net";

import type { ChildEnv } from "./env.js";
import { Cancelled, ChannelClosed, type CancelCause } from "./errors.js";
import { Inbox } from "./inbox.js";
import { MailLedger } from "./mail.js";
import type { Outbox } from "./outbox.js";
import type { Event, Welcome } from "./protocol/messages.js";
import { Work } from "./work.js";

/** Why the runtime closed. */
export interface CloseReason {
  /**
   * `shutdown`: the supervisor sent Shutdown (exit now); `disconnected`:
   * the supervisor closed the channel; `failed`: the channel broke or the
   * supervisor broke the protocol; `closed`: this child called `rt.close()`.
   */
  kind: "shutdown" | "disconnected" | "failed" | "closed";
  /** A sentence for the log. */
  message: string;
}

/** The cause step signals are aborted with when the runtime closes for `kind`. */
function closeCause(kind: CloseReason["kind"]): CancelCause {
  return kind === "shutdown" ? "shutdown" : "disconnected";
}

export class Core {
  readonly work = new Work();
  readonly ledger = new MailLedger();
  readonly inbox: Inbox;
  readonly draining = new AbortController();
  readonly closed: Promise<CloseReason>;
  closeReason: CloseReason | null = null;
  private resolveClosed!: (r: CloseReason) => void;
  private readonly onClose: (() => void)[] = [];

  constructor(
    readonly env: ChildEnv,
    readonly welcome: Welcome,
    readonly socket: Socket,
    readonly outbox: Outbox,
    readonly log: (line: string) => void,
  ) {
    this.inbox = new Inbox(this);
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
  }

  /** The protocol version this child speaks (the Welcome's, equal to the Hello's). */
  get protocol(): number {
    return this.env.protocol;
  }

  /** Queues events in order; a closed channel drops them (the closure is reported through `closed`). */
  postAll(events: Event[]): void {
    for (const e of events) {
      try {
        this.outbox.post(e);
      } catch (err) {
        if (!(err instanceof ChannelClosed)) throw err;
      }
    }
  }

  /** Queues events in order and resolves once the last is written. */
  sendAll(events: Event[]): Promise<void> {
    let last: Promise<void> = Promise.resolve();
    for (const e of events) last = this.outbox.send(e);
    return last;
  }

  /** Runs `f` when the runtime closes (timers to clear, say). */
  whenClosed(f: () => void): void {
    this.onClose.push(f);
  }

  /**
   * Marks the runtime closed (the first reason wins), aborts every step
   * signal with the reason's cause, and ends the mail iterators.
   */
  close(reason: CloseReason): void {
    const cause = new Cancelled(closeCause(reason.kind));
    this.work.close(cause);
    this.inbox.close(cause);
    if (this.closeReason !== null) return;
    this.closeReason = reason;
    for (const f of this.onClose.splice(0)) f();
    this.resolveClosed(reason);
  }
}
