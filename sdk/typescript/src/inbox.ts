/**
 * The inbox: mail delivered by the supervisor, handed to the application
 * one item at a time, and the `Mail` handle through which the application
 * ends an item (with its result, in protocol 3) or releases it.
 *
 * In protocol 3 an item is *started* when it is handed to the application
 * (the iterator yields it, or `rt.handleMail` calls its handler): the
 * runtime sends `MailStarted` then, before any other event of the item,
 * and ends the item with `MailDone` (outcome and result) instead of
 * `MailAck`. An item received but not started (still queued when a drain,
 * a lease expiry or the end came) is not acknowledged: the supervisor
 * delivers it again with the same `attempt`. A verified `CancelMail` of an
 * item is answered here, with one `MailCancelVerdict`.
 */

import { resultBytes, type MailResult } from "./custom.js";
import { Cancelled, InvalidEvent } from "./errors.js";
import { toOutcome, type AckOutcome, type MailLedger } from "./mail.js";
import type { Outbox } from "./outbox.js";
import type { CancelVerdict, Event, Outcome } from "./protocol/messages.js";
import type { Work } from "./work.js";

/**
 * What the inbox needs of the runtime's core: the protocol version spoken,
 * the ledgers it keeps mail and work in, the outbox its events go out
 * through, and the log. The core implements it; the inbox never reaches
 * past it.
 */
export interface InboxHost {
  readonly protocol: number;
  readonly ledger: MailLedger;
  readonly work: Work;
  readonly outbox: Pick<Outbox, "enqueue" | "frameLimit">;
  postAll(events: Event[]): void;
  log(line: string): void;
}

/**
 * Whether a handler can be cancelled: a boolean for every item, or a
 * function deciding per item (called once, as the item is started, before
 * the handler; it may read the payload).
 */
export type Cancellable = boolean | ((mail: Mail) => boolean);

/** Options of `rt.mail()`. */
export interface MailOptions {
  /**
   * Whether the items this iterator hands out can be cancelled one by one
   * (protocol 3, default true). An item that cannot be is started with
   * `MailStarted { cancellable: false }`, and a cancel of it is answered
   * `NotSupported`: it runs to its end (a drain still aborts its
   * cancel-behaviour steps).
   */
  cancellable?: Cancellable;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

type State = "queued" | "held" | "acked" | "released" | "dropped";

/**
 * One piece of mail. End it with `ack` (protocol 3: with its result) once
 * processed, or `release` it for the next child. `signal` aborts when this
 * item (and no other) must stop.
 */
export class Mail {
  /** @internal */
  state: State = "queued";
  /** @internal Whether a cancel of this item is obeyed (decided when it is started). */
  cancellable = true;
  /** @internal The runs of steps started for this item: a verified cancel of the item cancels them. */
  readonly runs = new Set<string>();
  /** @internal The verified cancel of this item, once one was acknowledged. */
  cancelledBy: Cancelled | null = null;
  private readonly controller = new AbortController();

  /** @internal */
  constructor(
    private readonly core: InboxHost,
    private readonly inbox: Inbox,
    /** The store-assigned id, stable across redeliveries. */
    readonly id: bigint,
    /**
     * 1 on the first delivery. In protocol 3 it counts *starts*: 2 means a
     * handler of an earlier child started the item and did not finish it
     * (an item a child received but never started comes back with the same
     * attempt). In protocol 2 it counts deliveries: the earlier child may
     * never have started the item. Either way `attempt > 1` proves no work
     * done, nor does 1 prove none (`wfhost mail retry` starts again at 1):
     * a handler that must not redo a side effect keeps its own durable
     * record of what it did, keyed by the mail id, and consults that.
     */
    readonly attempt: number,
    /** The payload as sent. */
    readonly payload: Uint8Array,
  ) {}

  /**
   * Aborts when this item must stop: a verified cancel of this item
   * (protocol 3; `reason` is a `Cancelled` with cause `cancel`, and the
   * item's steps are cancelled too), or the runtime closing (cause
   * `shutdown` or `disconnected`). A drain does not abort it: a drain
   * aborts cancel-behaviour steps, and the item is held until it ends.
   */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

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
   * Reports how processing ended and resolves once it is written: in
   * protocol 3 `MailDone` with `result` (bytes as they are, a string as
   * UTF-8, `undefined`/`null` as nothing, any other JSON value
   * JSON-encoded), in protocol 2 `MailAck` (the result is dropped: a
   * version-2 supervisor stores none). Then `Drained`, if a drain was
   * waiting only for this. The outcome is final.
   *
   * A result JSON cannot carry rejects with a TypeError and changes
   * nothing. A result whose `MailDone` would not fit in a frame
   * (`max_frame_bytes`) ends the item `Failed("result of N bytes does not
   * fit in a frame of max_frame_bytes M")` with no result, and rejects
   * with an `InvalidEvent` saying so. Rejects with `ChannelClosed` when it
   * can no longer reach the supervisor (the item then comes again to the
   * next child).
   */
  async ack(outcome: AckOutcome = "succeeded", result?: MailResult): Promise<void> {
    const wire = toOutcome(outcome);
    if (this.settled) throw new Error(`mail ${this.id} was already ${this.state}; an item is acknowledged once`);
    const bytes = this.core.protocol >= 3 ? resultBytes(result, this.id) : new Uint8Array(0);
    const wasHeld = this.state === "held";
    this.state = "acked";
    this.inbox.forget(this);
    let written: Promise<void>;
    let tooLarge: InvalidEvent | null = null;
    try {
      written = this.send(wire, bytes);
      this.core.ledger.ack(this.id, wire);
    } catch (e) {
      if (e instanceof InvalidEvent && e.tooLarge) {
        const reason = `result of ${bytes.length} bytes does not fit in a frame of max_frame_bytes ${this.core.outbox.frameLimit}`;
        const failed: Outcome = { kind: "Failed", reason };
        tooLarge = new InvalidEvent(`mail ${this.id}: ${reason}; the item was ended Failed with that reason, without its result`, true);
        this.core.ledger.ack(this.id, failed);
        try {
          written = this.send(failed, new Uint8Array(0));
        } catch (e2) {
          written = Promise.reject(e2);
        }
      } else {
        this.core.ledger.ack(this.id, wire);
        written = Promise.reject(e);
      }
    }
    // After the MailAck/MailDone is queued, so a Drained it makes due follows it.
    if (wasHeld) this.core.postAll(this.core.work.settleMail());
    await written;
    if (tooLarge !== null) throw tooLarge;
  }

  /** Queues this item's MailDone (protocol 3) or MailAck (protocol 2); throws when it cannot be queued. */
  private send(outcome: Outcome, result: Uint8Array): Promise<void> {
    const event: Event =
      this.core.protocol >= 3 ? { type: "MailDone", id: this.id, outcome, result } : { type: "MailAck", id: this.id, outcome };
    return this.core.outbox.enqueue(event);
  }

  /**
   * Leaves the item unacknowledged: the supervisor delivers it again to the
   * next child (in protocol 3 with `attempt` one higher, since it was
   * started). Stops it holding up a drain.
   */
  release(): void {
    if (this.settled) return;
    const wasHeld = this.state === "held";
    this.state = "released";
    this.inbox.forget(this);
    this.core.ledger.abandon(this.id);
    if (wasHeld) this.core.postAll(this.core.work.settleMail());
  }

  /** @internal Aborts the item's signal. */
  abort(reason: Cancelled): void {
    this.controller.abort(reason);
  }
}

type Waiter = { resolve: (m: Mail | null) => void; cancellable: Cancellable };

export class Inbox {
  private readonly queue: Mail[] = [];
  private readonly waiters: Waiter[] = [];
  /** Items delivered and neither done nor let go (queued or started), by id: what this child holds. */
  private readonly live = new Map<bigint, Mail>();

  constructor(private readonly core: InboxHost) {}

  /** One delivery from the supervisor. */
  deliver(id: bigint, attempt: number, payload: Uint8Array): void {
    const core = this.core;
    const d = core.ledger.receive(id, core.work.takesMail());
    switch (d.kind) {
      case "deliver": {
        const mail = new Mail(core, this, id, attempt, payload);
        this.live.set(id, mail);
        const waiter = this.waiters.shift();
        if (waiter !== undefined && this.handOut(mail, waiter.cancellable)) waiter.resolve(mail);
        else this.queue.push(mail);
        return;
      }
      case "reack":
        core.log(
          core.protocol >= 3
            ? `mail ${id} redelivered after it was done; sending its MailDone again, without running it`
            : `mail ${id} redelivered after its ack; acknowledging again`,
        );
        core.postAll([
          core.protocol >= 3
            ? { type: "MailDone", id, outcome: d.outcome, result: new Uint8Array(0) }
            : { type: "MailAck", id, outcome: d.outcome },
        ]);
        return;
      case "duplicate":
        core.log(`mail ${id} delivered again while still in progress; ignored`);
        return;
      case "declined":
        core.log(`mail ${id} arrived after Drain, lease expiry or Shutdown; not taken, left for redelivery to the next child`);
        return;
    }
  }

  /** The next item, started and held until it ends or is released; null once no more mail is taken. */
  take(cancellable: Cancellable = true): Promise<Mail | null> {
    if (!this.core.work.takesMail()) {
      this.discard();
      return Promise.resolve(null);
    }
    for (;;) {
      const mail = this.queue.shift();
      if (mail === undefined) break;
      if (mail.settled) continue;
      if (this.handOut(mail, cancellable)) return Promise.resolve(mail);
    }
    return new Promise((resolve) => this.waiters.push({ resolve, cancellable }));
  }

  /** Starts `mail` (held; `MailStarted` in protocol 3) if mail is still handed out. */
  private handOut(mail: Mail, cancellable: Cancellable): boolean {
    if (!this.core.work.takeMail()) {
      this.drop(mail);
      return false;
    }
    mail.state = "held";
    mail.cancellable = this.decide(mail, cancellable);
    if (this.core.protocol >= 3) {
      this.core.postAll([{ type: "MailStarted", id: mail.id, cancellable: mail.cancellable }]);
    }
    return true;
  }

  private decide(mail: Mail, cancellable: Cancellable): boolean {
    if (typeof cancellable === "boolean") return cancellable;
    try {
      return cancellable(mail) !== false;
    } catch (e) {
      this.core.log(`mail ${mail.id}: the cancellable option threw (${(e as Error).message}); taking the item as cancellable`);
      return true;
    }
  }

  private drop(mail: Mail): void {
    mail.state = "dropped";
    this.forget(mail);
    this.core.ledger.abandon(mail.id);
  }

  /** @internal An item is settled: this child no longer holds it. */
  forget(mail: Mail): void {
    if (this.live.get(mail.id) === mail) this.live.delete(mail.id);
    mail.runs.clear();
  }

  /** Whether this child holds item `id`: delivered, not yet done or let go (a cancel may only name such an item). */
  holds(id: bigint): boolean {
    return this.live.has(id);
  }

  /**
   * Obeys a verified cancel of item `id` (which this child holds), posting
   * the verdict first: an item not started yet is ended `Cancelled` at
   * once and never started; a started item whose handler cannot be
   * cancelled gets `NotSupported`; any other started item has its signal
   * aborted and its runs cancelled (every step, as a cancel of the run
   * does), and ends when its handler does.
   */
  cancel(id: bigint, reason: Cancelled): CancelVerdict {
    const core = this.core;
    const mail = this.live.get(id);
    if (mail === undefined) {
      const verdict: CancelVerdict = { kind: "Refused", reason: `cancel is for mail item ${id}, which this child does not hold` };
      core.postAll([{ type: "MailCancelVerdict", id, verdict }]);
      return verdict;
    }
    if (mail.state === "queued") {
      const i = this.queue.indexOf(mail);
      if (i >= 0) this.queue.splice(i, 1);
      mail.state = "acked";
      mail.cancelledBy = reason;
      mail.abort(reason);
      this.forget(mail);
      const outcome: Outcome = { kind: "Cancelled" };
      core.ledger.ack(id, outcome);
      core.postAll([
        { type: "MailCancelVerdict", id, verdict: { kind: "Acknowledged" } },
        { type: "MailDone", id, outcome, result: new Uint8Array(0) },
      ]);
      return { kind: "Acknowledged" };
    }
    if (!mail.cancellable) {
      core.postAll([{ type: "MailCancelVerdict", id, verdict: { kind: "NotSupported" } }]);
      return { kind: "NotSupported" };
    }
    core.postAll([{ type: "MailCancelVerdict", id, verdict: { kind: "Acknowledged" } }]);
    mail.cancelledBy ??= reason;
    mail.abort(reason);
    for (const run of [...mail.runs].sort()) core.postAll(core.work.cancel(run, reason));
    return { kind: "Acknowledged" };
  }

  /**
   * A step of `run` was started for `mail` (after its `StepStarted` is
   * queued): a cancel of the item cancels the run, and a step started after
   * the item's cancel starts cancelled, its run with it.
   */
  linkRun(mail: Mail, run: string): void {
    if (mail.state !== "held") return;
    mail.runs.add(run);
    if (mail.cancelledBy !== null) this.core.postAll(this.core.work.cancel(run, mail.cancelledBy));
  }

  /** No more mail is taken: drops the queue (left for the next child) and ends every iterator. */
  stop(): void {
    this.discard();
    for (const w of this.waiters.splice(0)) w.resolve(null);
  }

  /** The runtime closed: as `stop`, and every held item's signal aborts with `reason`. */
  close(reason: Cancelled): void {
    this.stop();
    for (const mail of this.live.values()) mail.abort(reason);
  }

  private discard(): void {
    if (this.queue.length === 0) return;
    const ids = this.queue.splice(0).flatMap((m) => {
      if (m.settled) return [];
      this.drop(m);
      return [m.id];
    });
    if (ids.length === 0) return;
    this.core.log(`not taking queued mail [${ids.join(", ")}] (draining or closed); left for redelivery to the next child`);
  }
}
