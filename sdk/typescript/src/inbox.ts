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
 *
 * In protocol 3 a started item's handler may also ask a person a question
 * (`mail.ask`: `Ask`, resolved by the supervisor's `Answer`) and report
 * progress (`mail.progress`). When a drain begins (or the lease runs out)
 * every item whose handler waits in `ask` is *given back* (`GiveBack`):
 * forgotten by this child, its `ask` failing with `GivenBackError`, and
 * whatever its handler then does discarded.
 */

import { jsonBytes, resultBytes, type MailResult } from "./custom.js";
import { Cancelled, ChannelClosed, GivenBackError, InvalidEvent } from "./errors.js";
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

/** The longest key of a question, in UTF-8 bytes (docs/protocol.md §4.12). */
export const MAX_ASK_KEY_BYTES = 256;

/** The largest prompt of a question, answer or progress report, in bytes of JSON. */
export const MAX_ASK_JSON_BYTES = 65_536;

/**
 * `queued`: delivered, not started; `held`: started, with its handler;
 * `acked`, `released`: ended by this child; `dropped`: left unstarted for
 * the next child; `given-back`: given back while its handler asked.
 */
type State = "queued" | "held" | "acked" | "released" | "dropped" | "given-back";

/** One `ask` waiting for its answer. */
interface Asker {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

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
  /** The asks waiting for an answer, by key (an `Ask` was sent for each key). */
  private readonly asking = new Map<string, Asker[]>();
  /** The answers received in this attempt, by key: a second ask of the key returns at once. */
  private readonly answers = new Map<string, Uint8Array>();
  /** Why the item was given back, once it was. */
  private givenBack: GivenBackError | null = null;

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
  ) {
    // A cancel of the item, or the runtime closing, fails its asks with the signal's reason.
    this.controller.signal.addEventListener("abort", () => this.failAsks(this.controller.signal.reason as Error), { once: true });
  }

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

  /** Whether the item was acknowledged, released or given back: it is no longer this child's to end. */
  get settled(): boolean {
    return this.state !== "queued" && this.state !== "held";
  }

  /**
   * Asks a person a question about this item (protocol 3) and resolves
   * with the answer, a JSON value, however long it takes: `Ask { id, key,
   * prompt }` goes to the supervisor, which stores the question with the
   * item (`wfhost questions`) until someone answers it (`wfhost answer`).
   * `key` (1 to 256 bytes of UTF-8) names the question within the item;
   * `prompt` is any JSON value (a string is sent as a JSON string) whose
   * encoding is at most 64 KiB.
   *
   * - The answer is remembered for the item: a second `ask` of an answered
   *   key resolves at once, without a frame, and several asks of one key
   *   waiting at once share one question and one answer.
   * - **Given back.** When a drain begins or the lease runs out while the
   *   handler waits here, or when it asks after that, the item is given
   *   back to the supervisor (`GiveBack`): this rejects with a
   *   `GivenBackError`, which the handler should let pass, and whatever
   *   the handler then returns or throws is discarded. Once the question
   *   is answered the item is delivered again, as its next attempt: the
   *   handler runs **from the start**, and its `ask` of the same key
   *   resolves at once with the stored answer. Work done before an `ask`
   *   is done again, so make it idempotent (or ask first).
   * - A cancel of the item while it waits (`mail.signal` aborts) rejects
   *   with the signal's `Cancelled`: the item ends `Cancelled`.
   *
   * Rejects without sending anything: with a `TypeError` for a key that is
   * not a string or a prompt JSON cannot carry; with an `InvalidEvent` for
   * a key or prompt out of bounds, under protocol 2 (which has no
   * questions), or for an item no longer in hand.
   */
  ask<T = unknown>(key: string, prompt: unknown): Promise<T> {
    try {
      return this.startAsk(key, prompt) as Promise<T>;
    } catch (e) {
      return Promise.reject(e as Error);
    }
  }

  private startAsk(key: string, prompt: unknown): Promise<unknown> {
    const core = this.core;
    if (core.protocol < 3) {
      throw new InvalidEvent(
        `mail ${this.id}: mail.ask needs protocol 3, and this child speaks protocol 2 with its supervisor (a supervisor of version 2 has no questions); nothing was sent`,
      );
    }
    checkKey(key, this.id);
    const bytes = jsonBytes(prompt, { what: `mail ${this.id}: the prompt of ask(${JSON.stringify(key)})`, after: "nothing was sent" });
    if (bytes.length > MAX_ASK_JSON_BYTES) {
      throw new InvalidEvent(
        `mail ${this.id}: the prompt of ask(${JSON.stringify(key)}) is ${bytes.length} bytes of JSON, over the limit of ${MAX_ASK_JSON_BYTES}; nothing was sent`,
        true,
      );
    }
    this.requireInHand(`ask(${JSON.stringify(key)})`, key);
    if (this.controller.signal.aborted) return Promise.reject(this.controller.signal.reason as Error);
    const known = this.answers.get(key);
    if (known !== undefined) return Promise.resolve(parseAnswer(known, this.id, key));
    if (core.work.isDraining()) {
      // Asking after the drain began: nobody will answer in time; the item goes back now.
      this.inbox.giveBack(this, key);
      return Promise.reject(this.givenBack!);
    }
    const promise = new Promise<unknown>((resolve, reject) => {
      const waiting = this.asking.get(key);
      if (waiting !== undefined) {
        waiting.push({ resolve, reject });
        return;
      }
      // Throws (nothing queued) when the frame cannot be sent.
      core.outbox.enqueue({ type: "Ask", id: this.id, key, prompt: bytes }).catch(() => undefined);
      this.asking.set(key, [{ resolve, reject }]);
    });
    return promise;
  }

  /**
   * Reports progress of this item (protocol 3): `Progress { id, data }`,
   * kept in the event log with the item (`mail_progress`, `wfhost events
   * --mail ID`). `data` is any JSON value (a string is sent as a JSON
   * string) whose encoding is at most 64 KiB. It does not wait: the event
   * is queued, and a closed channel drops it. Throws, sending nothing, a
   * `TypeError` for data JSON cannot carry and an `InvalidEvent` for data
   * over 64 KiB, under protocol 2, or for an item no longer in hand (a
   * `GivenBackError` for an item given back).
   */
  progress(data: unknown): void {
    const core = this.core;
    if (core.protocol < 3) {
      throw new InvalidEvent(
        `mail ${this.id}: mail.progress needs protocol 3, and this child speaks protocol 2 with its supervisor (a supervisor of version 2 keeps no progress); nothing was sent`,
      );
    }
    const bytes = jsonBytes(data, { what: `mail ${this.id}: the data of progress(data)`, after: "nothing was sent" });
    if (bytes.length > MAX_ASK_JSON_BYTES) {
      throw new InvalidEvent(
        `mail ${this.id}: progress data of ${bytes.length} bytes of JSON is over the limit of ${MAX_ASK_JSON_BYTES}; nothing was sent`,
        true,
      );
    }
    this.requireInHand("progress(data)", null);
    try {
      core.outbox.enqueue({ type: "Progress", id: this.id, data: bytes }).catch(() => undefined);
    } catch (e) {
      if (!(e instanceof ChannelClosed)) throw e;
    }
  }

  /** Throws unless the item is started and still this child's: given back (`GivenBackError`), ended or not started (`InvalidEvent`). */
  private requireInHand(what: string, key: string | null): void {
    if (this.state === "held") return;
    if (this.givenBack !== null) {
      throw new GivenBackError(
        this.id,
        key,
        `mail ${this.id} was given back to the supervisor (${this.givenBack.key === null ? "earlier" : `while it asked ${JSON.stringify(this.givenBack.key)}`}); ${what} is not sent: let the error pass`,
      );
    }
    throw new InvalidEvent(
      this.state === "queued"
        ? `mail ${this.id} is not started; ${what} is for an item in hand`
        : `mail ${this.id} was already ${this.state}; ${what} is for an item in hand`,
    );
  }

  /** @internal Whether the item's handler waits in `ask`. */
  get isAsking(): boolean {
    return this.asking.size > 0;
  }

  /** @internal The first key asked and not yet answered, for messages. */
  askedKey(): string | null {
    for (const k of this.asking.keys()) return k;
    return null;
  }

  /** @internal An answer from the supervisor: resolves the asks of `key`, remembered; false when nobody waits for it. */
  answer(key: string, value: Uint8Array): boolean {
    const waiting = this.asking.get(key);
    if (waiting === undefined) return false;
    this.asking.delete(key);
    this.answers.set(key, value);
    for (const w of waiting) {
      try {
        w.resolve(parseAnswer(value, this.id, key));
      } catch (e) {
        w.reject(e as Error);
      }
    }
    return true;
  }

  /** @internal Marks the item given back (the inbox sent `GiveBack`) and fails its asks. */
  markGivenBack(error: GivenBackError): void {
    this.state = "given-back";
    this.givenBack = error;
    this.failAsks(error);
  }

  /** Rejects every waiting ask with `error`. */
  private failAsks(error: Error): void {
    const all = [...this.asking.values()].flat();
    this.asking.clear();
    for (const w of all) w.reject(error);
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
    if (this.givenBack !== null) {
      throw new GivenBackError(this.id, null, `mail ${this.id} was given back to the supervisor; its outcome is not sent (it runs again on its next attempt)`);
    }
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

/** Throws unless `key` is 1 to 256 bytes of UTF-8. */
function checkKey(key: unknown, id: bigint): asserts key is string {
  if (typeof key !== "string") {
    throw new TypeError(`mail ${id}: ask(key, prompt): key must be a string, got ${key === null ? "null" : typeof key}; nothing was sent`);
  }
  if (!key.isWellFormed()) throw new InvalidEvent(`mail ${id}: ask(key, prompt): the key has a lone surrogate (it has no UTF-8 form); nothing was sent`);
  const n = Buffer.byteLength(key, "utf8");
  if (n === 0 || n > MAX_ASK_KEY_BYTES) {
    throw new InvalidEvent(`mail ${id}: ask(key, prompt): the key must be 1 to ${MAX_ASK_KEY_BYTES} bytes of UTF-8, got ${n}; nothing was sent`);
  }
}

/** An answer's JSON, parsed afresh for each asker (so no two share one object). */
function parseAnswer(value: Uint8Array, id: bigint, key: string): unknown {
  let text: string;
  try {
    text = strictUtf8.decode(value);
  } catch {
    throw new SyntaxError(`mail ${id}: the answer to ${JSON.stringify(key)} (${value.length} bytes) is not UTF-8`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new SyntaxError(`mail ${id}: the answer to ${JSON.stringify(key)} is not JSON (${(e as Error).message})`);
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

  /** An `Answer` from the supervisor: resolves the item's asks of `key`; ignored (logged) when nobody here waits for it. */
  answer(id: bigint, key: string, value: Uint8Array): void {
    const mail = this.live.get(id);
    if (mail !== undefined && mail.state === "held" && mail.answer(key, value)) return;
    this.core.log(
      `Answer for mail ${id} (key ${JSON.stringify(key)}, ${value.length} bytes) ignored: ${
        mail === undefined ? "this child does not hold that item" : "no ask of that key waits for it"
      }`,
    );
  }

  /**
   * Gives `mail` back to the supervisor while its handler asks `key`:
   * `GiveBack { awaiting_answer: true }`, the item forgotten (no `MailDone`
   * is ever sent for it by this child), its asks failed with a
   * `GivenBackError`, and `Drained` if the drain waited only for it.
   */
  giveBack(mail: Mail, key: string | null): void {
    if (mail.state !== "held") return;
    const core = this.core;
    this.forget(mail);
    core.ledger.abandon(mail.id);
    core.postAll([{ type: "GiveBack", id: mail.id, awaiting_answer: true }]);
    const waitingFor = key === null ? "an answer" : `the answer to ${JSON.stringify(key)}`;
    // (An ask begun during the drain gives its item back at once: it too "waited".)
    mail.markGivenBack(
      new GivenBackError(
        mail.id,
        key,
        `mail ${mail.id} was given back to the supervisor while it waited for ${waitingFor} (the child is draining): let this error pass; the item runs again from the start on its next attempt, once the question is answered, and its ask then returns the answer at once`,
      ),
    );
    core.log(`mail ${mail.id}: given back while it waited for ${waitingFor}; it comes again, as its next attempt, once answered`);
    // After the GiveBack is queued, so a Drained it makes due follows it.
    core.postAll(core.work.settleMail());
  }

  /** A drain began: every started item whose handler waits in `ask` is given back. */
  giveBackAsking(): void {
    for (const mail of [...this.live.values()]) {
      if (mail.state === "held" && mail.isAsking) this.giveBack(mail, mail.askedKey());
    }
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
