/**
 * The inbox: mail delivered by the supervisor, handed to the application's
 * iterators one item at a time, and the `Mail` handle through which the
 * application acknowledges or releases an item.
 */

import { toOutcome, type AckOutcome, type MailLedger } from "./mail.js";
import type { Outbox } from "./outbox.js";
import type { Event } from "./protocol/messages.js";
import type { Work } from "./work.js";

/**
 * What the inbox needs of the runtime's core: the ledgers it keeps mail
 * and work in, the outbox its acknowledgements go out through, and the
 * log. The core implements it; the inbox never reaches past it.
 */
export interface InboxHost {
  readonly ledger: MailLedger;
  readonly work: Work;
  readonly outbox: Pick<Outbox, "send">;
  postAll(events: Event[]): void;
  log(line: string): void;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

type State = "queued" | "held" | "acked" | "released" | "dropped";

/** One piece of mail; acknowledge it with `ack` once processed, or `release` it for the next child. */
export class Mail {
  /** @internal */
  state: State = "queued";

  /** @internal */
  constructor(
    private readonly core: InboxHost,
    /** The store-assigned id, stable across redeliveries. */
    readonly id: bigint,
    /**
     * 1 on the first delivery; more when an earlier child was handed the
     * item and ended (died, was recycled or stopped) without acknowledging
     * it. That child may never have started it (the supervisor hands a
     * child items ahead of its work, and a recycle gives back the unstarted
     * ones), so `attempt > 1` proves no work done: a handler that must not
     * redo a side effect keeps its own durable record of what it did, keyed
     * by the mail id, and consults that. Nor does 1 prove the opposite:
     * `wfhost mail retry` starts a dead item's count again at 1.
     */
    readonly attempt: number,
    /** The payload as sent. */
    readonly payload: Uint8Array,
  ) {}

  /** The payload as UTF-8 text; throws a TypeError naming the mail if it is not UTF-8. */
  text(): string {
    try {
      return strictUtf8.decode(this.payload);
    } catch {
      throw new TypeError(`mail ${this.id}: the payload (${this.payload.length} bytes) is not valid UTF-8`);
    }
  }

  /** The payload parsed as JSON; throws a SyntaxError naming the mail if it is not. */
  json<T = unknown>(): T {
    const text = this.text();
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new SyntaxError(`mail ${this.id}: the payload is not JSON (${(e as Error).message})`);
    }
  }

  /** Whether the item was acknowledged or released. */
  get settled(): boolean {
    return this.state === "acked" || this.state === "released" || this.state === "dropped";
  }

  /**
   * Reports how processing ended (`MailAck`, then `Drained` if a drain was
   * waiting only for this) and resolves once the acknowledgement is written.
   * Rejects with `ChannelClosed` when it can no longer reach the supervisor
   * (the item then comes again to the next child).
   */
  async ack(outcome: AckOutcome = "succeeded"): Promise<void> {
    const wire = toOutcome(outcome);
    if (this.settled) throw new Error(`mail ${this.id} was already ${this.state}; an item is acknowledged once`);
    const wasHeld = this.state === "held";
    this.state = "acked";
    this.core.ledger.ack(this.id, wire);
    let written: Promise<void>;
    try {
      written = this.core.outbox.send({ type: "MailAck", id: this.id, outcome: wire });
    } catch (e) {
      written = Promise.reject(e);
    }
    // After the MailAck is queued, so a Drained it makes due follows it.
    if (wasHeld) this.core.postAll(this.core.work.settleMail());
    await written;
  }

  /**
   * Leaves the item unacknowledged: the supervisor delivers it again to the
   * next child. Stops it holding up a drain.
   */
  release(): void {
    if (this.settled) return;
    const wasHeld = this.state === "held";
    this.state = "released";
    this.core.ledger.abandon(this.id);
    if (wasHeld) this.core.postAll(this.core.work.settleMail());
  }
}

export class Inbox {
  private readonly queue: Mail[] = [];
  private readonly waiters: ((m: Mail | null) => void)[] = [];

  constructor(private readonly core: InboxHost) {}

  /** One delivery from the supervisor. */
  deliver(id: bigint, attempt: number, payload: Uint8Array): void {
    const core = this.core;
    const d = core.ledger.receive(id, core.work.takesMail());
    switch (d.kind) {
      case "deliver": {
        const mail = new Mail(core, id, attempt, payload);
        const waiter = this.waiters.shift();
        if (waiter !== undefined && this.handOut(mail)) waiter(mail);
        else this.queue.push(mail);
        return;
      }
      case "reack":
        core.log(`mail ${id} redelivered after its ack; acknowledging again`);
        core.postAll([{ type: "MailAck", id, outcome: d.outcome }]);
        return;
      case "duplicate":
        core.log(`mail ${id} delivered again while still in progress; ignored`);
        return;
      case "declined":
        core.log(`mail ${id} arrived after Drain, lease expiry or Shutdown; not taken, left for redelivery to the next child`);
        return;
    }
  }

  /** The next item, held until acknowledged or released; null once no more mail is taken. */
  take(): Promise<Mail | null> {
    if (!this.core.work.takesMail()) {
      this.discard();
      return Promise.resolve(null);
    }
    const mail = this.queue.shift();
    if (mail !== undefined && this.handOut(mail)) return Promise.resolve(mail);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Marks `mail` held if mail is still handed out. */
  private handOut(mail: Mail): boolean {
    if (!this.core.work.takeMail()) {
      this.drop(mail);
      return false;
    }
    mail.state = "held";
    return true;
  }

  private drop(mail: Mail): void {
    mail.state = "dropped";
    this.core.ledger.abandon(mail.id);
  }

  /** No more mail is taken: drops the queue (left for the next child) and ends every iterator. */
  stop(): void {
    this.discard();
    for (const w of this.waiters.splice(0)) w(null);
  }

  private discard(): void {
    if (this.queue.length === 0) return;
    const ids = this.queue.splice(0).map((m) => {
      this.drop(m);
      return m.id;
    });
    this.core.log(`not taking queued mail [${ids.join(", ")}] (draining or closed); left for redelivery to the next child`);
  }
}

