/**
 * `@wfhost/child/client`: a producer's client for the supervisor's control
 * socket (`docs/control.md`, protocol 2): send mail exactly once, wait for
 * an item's result, call a deployment (send, then wait for the result),
 * read status, follow the event stream (or one item's, to its end), list
 * the questions handlers asked and answer them, and the operator commands.
 *
 * ```ts
 * import { Client } from "@wfhost/child/client";
 * const client = new Client({ config: "/etc/wfhost/wfhost.toml" });
 * const { id } = await client.send("orders", JSON.stringify({ order: 9 }), { key: "order-9" });
 * const { ended, outcome, result } = await client.call("pricing", JSON.stringify({ sku: 4 }), { key: "price-4", timeoutMs: 10_000 });
 * ```
 */

import { randomBytes } from "node:crypto";
import { connect as netConnect, type Socket } from "node:net";

import { ConfigError, socketOf } from "./config.js";
import { MessageReader, encodeMessage } from "./wire.js";

export { ConfigError, DEFAULT_STATE_DIR, SOCKET_NAME, socketOf, stateDirOf } from "./config.js";

/** The control protocol version this client speaks. */
export const CONTROL_VERSION = 2;

/** The CLI's exit codes, which the supervisor's refusals carry. */
export const EXIT = { failed: 1, usage: 2, unreachable: 3 } as const;

/**
 * A request failed. `code` is the exit code the `wfhost` CLI would use (1:
 * the operation failed, 2: usage or a malformed request, 3: the supervisor
 * is unreachable); `message` is the supervisor's own words, naming the
 * problem and the next step.
 */
export class WfhostError extends Error {
  override name = "WfhostError";
  constructor(
    readonly code: number,
    message: string,
    /** The request may have reached the supervisor, but its answer was lost. */
    readonly answerLost = false,
    /**
     * Whether the request took effect is unknown: its answer was lost, or
     * the supervisor answered `"outcome": "unknown"` (its store failed at or
     * after the commit). A `send` that ends so may have enqueued the mail;
     * sending again under the same key enqueues it at most once.
     */
    readonly outcomeUnknown = answerLost,
  ) {
    super(message);
  }
}

/** Where the supervisor is: its config file, or its socket. */
export type ClientOptions =
  | { config: string; socket?: never }
  | { socket: string; config?: never };

/** What `send` answers. */
export interface Sent {
  deployment: string;
  /** The mail's id in the store (what the child sees as `mail.id`), as in event bodies. */
  id: number;
  /**
   * False when the idempotency key named mail accepted before: nothing was
   * enqueued. With a key of the client's own (none given), a repeat after
   * a lost answer or an unknown outcome that finds the mail accepted
   * reports true: it was this call's mail.
   */
  new: boolean;
}

/**
 * A mail id from a `send` answer, as a number; ids are far below 2^53, and
 * one that is not a safe integer is refused rather than rounded.
 */
function mailId(id: unknown, text: string): number {
  if (typeof id === "number" && Number.isSafeInteger(id) && id >= 0) return id;
  const raw = /"id"\s*:\s*(-?[0-9][0-9.eE+-]*)/.exec(text)?.[1];
  throw new WfhostError(
    EXIT.failed,
    id === undefined
      ? `the supervisor's answer has no mail id: ${text}`
      : `the supervisor accepted the mail but answered its id as ${raw ?? JSON.stringify(id)}, which is not a safe integer (0 to 2^53 - 1): this client returns ids as numbers and does not round them; find the mail with \`wfhost mail list\` (answer: ${text})`,
  );
}

/** How a mail item ended, as the store keeps it. */
export type MailOutcome = "succeeded" | "failed" | "cancelled" | "dead";

/** What `mailResult` answers: where the item is, and once it ended, how and with what result. */
export interface MailResultAnswer {
  id: number;
  deployment: string;
  /** Whether the item ended (done or dead); false when it did not within `waitMs`. */
  ended: boolean;
  /** `"inbox"` or `"processing"` while it has not ended; `"done"` or `"dead"` once it has. */
  state: string;
  /** How it ended, or null while it has not. */
  outcome: MailOutcome | null;
  /** The failure's (or the cancel's, or the death's) reason, or null. */
  reason: string | null;
  /** The result the handler returned (protocol 3), or null while the item has not ended. */
  result: Uint8Array | null;
  /** The result's size in bytes, or null when the supervisor did not say. */
  resultBytes: number | null;
}

/** What `call` answers: the mail `send` enqueued (or found under the key), and its result if it ended in time. */
export interface Called {
  id: number;
  /** As `send`'s `new`: false when the key named mail accepted before. */
  new: boolean;
  /** Whether the item ended within the timeout. */
  ended: boolean;
  outcome: MailOutcome | null;
  reason: string | null;
  result: Uint8Array | null;
}

const MAIL_OUTCOMES: readonly string[] = ["succeeded", "failed", "cancelled", "dead"];

/** A mail id for a request: a safe integer (a bigint is converted when it is one). */
function requestId(id: number | bigint): number {
  const n = typeof id === "bigint" ? Number(id) : id;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0 || (typeof id === "bigint" && BigInt(n) !== id)) {
    throw new WfhostError(EXIT.usage, `a mail id is a whole number from 0 to 2^53 - 1, got ${String(id)}`);
  }
  return n;
}

/** A wait in milliseconds for a request: a whole number, 0 or more (fractions rounded up). */
function waitOf(ms: number, what: string): number {
  if (typeof ms !== "number" || Number.isNaN(ms) || ms < 0) {
    throw new WfhostError(EXIT.usage, `${what} is a number of milliseconds, 0 or more, got ${String(ms)}`);
  }
  return Math.min(Math.ceil(ms), Number.MAX_SAFE_INTEGER);
}

/** An event cursor (`after`): a whole number, 0 or more. */
function cursorOf(after: number | undefined): number {
  if (after === undefined) return 0;
  if (typeof after !== "number" || !Number.isSafeInteger(after) || after < 0) {
    throw new WfhostError(EXIT.usage, `after is an event's seq, a whole number from 0, got ${String(after)}`);
  }
  return after;
}

/** One event of a stream. */
function parseEvent(text: string): WfhostEvent {
  let e: WfhostEvent;
  try {
    e = JSON.parse(text) as WfhostEvent;
  } catch (err) {
    throw new WfhostError(EXIT.failed, `the supervisor sent an event that is not JSON (${(err as Error).message})`);
  }
  if (e === null || typeof e !== "object" || typeof e.seq !== "number" || typeof e.kind !== "string") {
    throw new WfhostError(EXIT.failed, `the supervisor sent an event without seq or kind: ${text}`);
  }
  return e;
}

/** A question's key for a request: 1 to 256 bytes of UTF-8. */
function keyOf(key: string): string {
  if (typeof key !== "string" || !key.isWellFormed() || Buffer.byteLength(key) === 0 || Buffer.byteLength(key) > 256) {
    throw new WfhostError(EXIT.usage, `a question's key is 1 to 256 bytes of UTF-8, got ${typeof key === "string" ? `${Buffer.byteLength(key)} bytes` : typeof key}`);
  }
  return key;
}

/** An answer's value: any JSON value; what JSON cannot carry is refused before anything is sent. */
function answerValue(value: unknown): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new WfhostError(EXIT.usage, `an answer is a JSON value; this one cannot be encoded (${(e as Error).message})`);
  }
  if (text === undefined) throw new WfhostError(EXIT.usage, `an answer is a JSON value, got ${typeof value}`);
  return value;
}

/** The answer of `mail-result`, checked field by field. */
function parseMailResult(data: unknown, text: string): MailResultAnswer {
  const bad = (why: string) => new WfhostError(EXIT.failed, `the supervisor's mail-result answer ${why}: ${text}`);
  if (data === null || typeof data !== "object") throw bad("holds no object");
  const d = data as Record<string, unknown>;
  const id = mailId(d["id"], text);
  if (typeof d["deployment"] !== "string") throw bad("has no deployment");
  if (typeof d["ended"] !== "boolean") throw bad("does not say whether the item ended");
  if (typeof d["state"] !== "string") throw bad("has no state");
  const outcome = d["outcome"] ?? null;
  if (outcome !== null && (typeof outcome !== "string" || !MAIL_OUTCOMES.includes(outcome))) {
    throw bad(`has an unknown outcome ${JSON.stringify(outcome)}`);
  }
  const reason = d["reason"] ?? null;
  if (reason !== null && typeof reason !== "string") throw bad("has a reason that is not a string");
  const encoded = d["result"] ?? null;
  let result: Uint8Array | null = null;
  if (encoded !== null) {
    if (typeof encoded !== "string" || !/^[A-Za-z0-9+/]*={0,2}$/.test(encoded) || encoded.length % 4 !== 0) {
      throw bad("has a result that is not base64");
    }
    result = new Uint8Array(Buffer.from(encoded, "base64"));
  }
  const size = d["result_bytes"] ?? null;
  if (size !== null && (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0)) {
    throw bad("has a result size that is not a whole number");
  }
  return {
    id,
    deployment: d["deployment"],
    ended: d["ended"],
    state: d["state"],
    outcome: outcome as MailOutcome | null,
    reason,
    result,
    resultBytes: size,
  };
}

/** One event of the supervisor's durable stream. */
export interface WfhostEvent {
  seq: number;
  at_ms: number;
  deployment: string | null;
  kind: string;
  body: Record<string, unknown>;
}

/** An open question: a handler's `ask` waiting for a person's answer. */
export interface Question {
  deployment: string;
  /** The item that asked. */
  id: number;
  /** The question's key within the item. */
  key: string;
  /** The JSON the handler asked with. */
  prompt: unknown;
  /** The attempt of the item that asked. */
  attempt: number;
  /** When it was asked (Unix ms), and how long ago. */
  asked_at_ms: number;
  age_ms: number;
}

/** Who answered, as the supervisor records it: the client's uid and user name (from its peer credentials) and the `by` label. */
export interface AnsweredBy {
  label: string | null;
  uid: number | null;
  user: string | null;
}

/** What `answer` answers. */
export interface Answered {
  id: number;
  deployment: string;
  key: string;
  /** False when the same value had been given before: nothing changed. */
  new: boolean;
  answered_at_ms: number;
  by: AnsweredBy | null;
  journal_seq: number | null;
}

/** The longest `by` label an answer may carry. */
const MAX_BY_CHARS = 128;

/** The kinds of event that end one item's stream: the supervisor closes it after them. */
const ITEM_ENDS: ReadonlySet<string> = new Set(["mail_done", "mail_dead"]);

/**
 * How often `follow` connects again after its stream broke before the
 * item's end, and the first pause (doubled each time); a connection that
 * brought an event starts the count again.
 */
const FOLLOW_TRIES = 5;
const FOLLOW_RETRY_PAUSE_MS = 100;

/** The `questions` answer, checked. */
function parseQuestions(data: unknown, text: string): Question[] {
  const bad = (why: string) => new WfhostError(EXIT.failed, `the supervisor's questions answer ${why}: ${text}`);
  const list = (data as { questions?: unknown } | null)?.questions;
  if (!Array.isArray(list)) throw bad("has no list of questions");
  return list.map((q: unknown, i) => {
    if (q === null || typeof q !== "object") throw bad(`has a question ${i} that is not an object`);
    const o = q as Record<string, unknown>;
    if (typeof o["deployment"] !== "string" || typeof o["key"] !== "string") throw bad(`has a question ${i} without deployment or key`);
    const num = (k: string): number => {
      const v = o[k];
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw bad(`has a question ${i} whose ${k} is not a whole number`);
      return v;
    };
    return {
      deployment: o["deployment"],
      id: num("id"),
      key: o["key"],
      prompt: o["prompt"] ?? null,
      attempt: num("attempt"),
      asked_at_ms: num("asked_at_ms"),
      age_ms: num("age_ms"),
    };
  });
}

/**
 * How often `send` tries a request whose answer was lost or whose outcome
 * the supervisor could not tell, and the first pause (doubled each time).
 */
const SEND_TRIES = 5;
const SEND_RETRY_PAUSE_MS = 100;

/** How long `call` waits for a result unless told. */
const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/**
 * Connections kept open between requests (the supervisor serves request
 * after request on one, and closes one idle for 30 s): at most this many,
 * each at most this long idle. A producer pays the connect once, not per
 * send.
 */
const KEEP_MAX = 8;
const KEEP_IDLE_MS = 20_000;

/** The requests that may go on a kept connection: each is safe to repeat. */
const REPEATABLE: ReadonlySet<string> = new Set(["send", "mail-result", "status", "questions", "answer"]);

/** A connection with its reader, and since when it is idle. */
interface Kept {
  socket: Socket;
  reader: MessageReader;
  since: number;
}

export class Client {
  /** The control socket's path. */
  readonly socketPath: string;
  private readonly idle: Kept[] = [];

  constructor(options: ClientOptions) {
    if (options.socket !== undefined) {
      this.socketPath = options.socket;
    } else if (options.config !== undefined) {
      try {
        this.socketPath = socketOf(options.config);
      } catch (e) {
        throw new WfhostError(EXIT.usage, (e as ConfigError).message);
      }
    } else {
      throw new WfhostError(EXIT.usage, "say which supervisor: new Client({ config: PATH }) (its config file) or new Client({ socket: PATH })");
    }
  }

  /**
   * Sends mail and resolves once it is durable in the store. Always sends
   * an idempotency key (a random one unless `key` is given), so a request
   * whose answer was lost, or that the supervisor answered with an unknown
   * outcome (its store failed at or after the commit), is repeated under
   * the same key, a few times, and enqueued at most once.
   */
  async send(deployment: string, payload: Uint8Array | string, options: { key?: string } = {}): Promise<Sent> {
    const bytes = typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
    const ownKey = options.key === undefined;
    const key = options.key ?? `auto-${randomBytes(16).toString("hex")}`;
    let pause = SEND_RETRY_PAUSE_MS;
    // Whether an earlier try may have enqueued the mail.
    let repeated = false;
    for (let tries = 1; ; tries++) {
      try {
        const { data, text } = await this.exchange(
          { cmd: "send", deployment, payload_bytes: bytes.length, key },
          bytes,
        );
        const d = data as { deployment: string; id?: unknown; new: boolean };
        const id = mailId(d.id, text);
        // Our own random key can only name mail this call sent: an earlier
        // try landed and its answer did not reach us.
        return { deployment: d.deployment, id, new: d.new || (ownKey && repeated) };
      } catch (e) {
        if (!(e instanceof WfhostError) || !(e.answerLost || e.outcomeUnknown)) throw e;
        repeated = true;
        if (tries >= SEND_TRIES) {
          const retry = `tried ${tries} times under idempotency key ${JSON.stringify(key)}: the mail may have been accepted, and sending again with key ${JSON.stringify(key)} enqueues it at most once`;
          throw e.answerLost
            ? new WfhostError(e.code, `${e.message}; ${retry}`, true, true)
            : new WfhostError(
                e.code,
                `the outcome of sending to ${JSON.stringify(deployment)} is unknown: the supervisor could not tell whether it accepted the mail (${e.message}); ${retry}`,
                false,
                true,
              );
        }
        await new Promise((r) => setTimeout(r, pause));
        pause *= 2;
      }
    }
  }

  /**
   * Where mail item `id` is and, once it ended, its outcome and result
   * (`mail-result`). With `waitMs` the supervisor waits up to that long for
   * the item to end before it answers (0, the default, answers at once);
   * `ended: false` then means it had not ended in time.
   */
  async mailResult(id: number | bigint, options: { waitMs?: number } = {}): Promise<MailResultAnswer> {
    const request: Record<string, unknown> = { cmd: "mail-result", id: requestId(id) };
    if (options.waitMs !== undefined) request["wait_ms"] = waitOf(options.waitMs, "waitMs");
    const { data, text } = await this.exchange(request);
    return parseMailResult(data, text);
  }

  /**
   * Sends mail and waits for its result: `send` (the same idempotency key
   * and the same repeats of a lost answer or an unknown outcome), then
   * `mail-result` waiting what is left of `timeoutMs` (default 30 000).
   * Resolves `{ id, new, ended, outcome, reason, result }`; `ended: false`
   * when the item did not end in time (it stays in the inbox: wait again
   * with `mailResult(id, { waitMs })`). Give a `key` to make a retried
   * call find the same item rather than enqueue another.
   */
  async call(
    deployment: string,
    payload: Uint8Array | string,
    options: { key?: string; timeoutMs?: number } = {},
  ): Promise<Called> {
    const timeoutMs = waitOf(options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS, "timeoutMs");
    const start = performance.now();
    const sent = await this.send(deployment, payload, options.key === undefined ? {} : { key: options.key });
    let pause = SEND_RETRY_PAUSE_MS;
    for (let tries = 1; ; tries++) {
      const left = Math.max(0, timeoutMs - (performance.now() - start));
      try {
        const r = await this.mailResult(sent.id, { waitMs: left });
        return { id: sent.id, new: sent.new, ended: r.ended, outcome: r.outcome, reason: r.reason, result: r.result };
      } catch (e) {
        // Reading a result changes nothing: a lost answer is asked again (with what is left of the time, maybe none).
        if (!(e instanceof WfhostError) || !e.answerLost || tries >= SEND_TRIES) {
          if (e instanceof WfhostError) {
            throw new WfhostError(
              e.code,
              `mail ${sent.id} was ${sent.new ? "enqueued" : "found under its key"}, but its result could not be read: ${e.message}; ask again with mailResult(${sent.id})`,
              e.answerLost,
              false,
            );
          }
          throw e;
        }
        await new Promise((r) => setTimeout(r, pause));
        pause *= 2;
      }
    }
  }

  /** Every deployment's status (`docs/control.md`, "A deployment in status"). */
  async status(): Promise<{ deployments: Record<string, unknown>[] }> {
    return (await this.exchange({ cmd: "status" })).data as { deployments: Record<string, unknown>[] };
  }

  /** Replaces a deployment's child; resolves once the new child is ready. */
  async recycle(deployment: string, options: { reason?: string } = {}): Promise<{ deployment: string; old_pid: number | null; pid: number }> {
    return (await this.exchange({ cmd: "recycle", deployment, reason: options.reason ?? null })).data as never;
  }

  /** Drains a deployment; it stays drained until resumed. */
  async drain(deployment: string): Promise<{ deployment: string; message: string }> {
    return (await this.exchange({ cmd: "drain", deployment })).data as never;
  }

  /** Starts a drained or failed deployment again. */
  async resume(deployment: string): Promise<{ deployment: string; message: string }> {
    return (await this.exchange({ cmd: "resume", deployment })).data as never;
  }

  /** A signed operator cancel of one run (or every run); resolves once journaled and sent. */
  async cancel(deployment: string, options: { run?: string } = {}): Promise<{ deployment: string; run: string | null; journal_seq: number }> {
    return (await this.exchange({ cmd: "cancel", deployment, run: options.run ?? null })).data as never;
  }

  /** SIGKILLs a deployment's child now. */
  async kill(deployment: string): Promise<{ deployment: string }> {
    return (await this.exchange({ cmd: "kill", deployment })).data as never;
  }

  /**
   * The durable event stream, oldest first, from the first event after
   * `after`. Without `follow` it ends after the last stored event; with
   * `follow` it goes on with each new event until the loop stops (which
   * closes the connection). Reconnect with `after` = the last `seq` seen to
   * miss nothing still retained. `mail` keeps one item's events only (and
   * a follow then ends after the item's end: see `follow`), `deployment`
   * one deployment's.
   */
  async *events(
    options: { after?: number; follow?: boolean; mail?: number | bigint; deployment?: string } = {},
  ): AsyncGenerator<WfhostEvent, void, undefined> {
    const request: Record<string, unknown> = { cmd: "events", after: cursorOf(options.after), follow: options.follow ?? false };
    if (options.mail !== undefined) request["mail"] = requestId(options.mail);
    if (options.deployment !== undefined) request["deployment"] = options.deployment;
    const { socket, reader } = await this.openStream(request);
    try {
      await this.streamStarted(reader);
      for (;;) {
        const m = await reader.next();
        if (m.kind === "end") return;
        if (m.kind === "error") throw this.lost(m.message);
        yield parseEvent(m.text);
      }
    } finally {
      socket.destroy();
    }
  }

  /**
   * Follows item `id`'s events (`{"cmd":"events","mail":id,"follow":true}`)
   * from the first after `after` (default 0: all of them) to its end: the
   * stream ends after its `mail_done` or `mail_dead` event, so the last
   * event says how it ended. In between come `mail_started`, its steps,
   * `mail_progress` with what the handler reported, `question_asked`,
   * `question_answered`, `mail_given_back`, …
   *
   * A connection that breaks before the end is made again with `after` =
   * the last `seq` seen (no event missed, none twice), up to 5 times in a
   * row, pausing 100 ms, then 200, 400 and 800; then it throws a
   * `WfhostError` (code 3) naming the item and the last `seq`. A refusal
   * throws at once with the supervisor's words; an id no item has (never
   * accepted, or pruned after `mail_retention`) is refused so.
   * Breaking out of the loop closes the connection.
   */
  async *follow(id: number | bigint, options: { after?: number } = {}): AsyncGenerator<WfhostEvent, void, undefined> {
    const mail = requestId(id);
    let after = cursorOf(options.after);
    let failures = 0;
    let pause = FOLLOW_RETRY_PAUSE_MS;
    for (;;) {
      let broke: WfhostError;
      let opened: { socket: Socket; reader: MessageReader } | null = null;
      try {
        opened = await this.openStream({ cmd: "events", mail, follow: true, after });
        await this.streamStarted(opened.reader);
        for (;;) {
          const m = await opened.reader.next();
          if (m.kind === "message") {
            const e = parseEvent(m.text);
            // A reconnection never repeats what was seen.
            if (e.seq <= after) continue;
            after = e.seq;
            failures = 0;
            pause = FOLLOW_RETRY_PAUSE_MS;
            yield e;
            if (ITEM_ENDS.has(e.kind)) return;
            continue;
          }
          throw this.lost(m.kind === "end" ? "the stream ended before the item's end" : m.message);
        }
      } catch (e) {
        // Only a connection lost (or never made) is tried again; a refusal or a bad answer is final.
        if (!(e instanceof WfhostError) || e.code !== EXIT.unreachable) throw e;
        broke = e;
      } finally {
        opened?.socket.destroy();
      }
      failures += 1;
      if (failures >= FOLLOW_TRIES) {
        throw new WfhostError(
          EXIT.unreachable,
          `following mail ${mail}: the connection broke ${failures} times in a row (last: ${broke.message}); ${
            after > 0 ? `the last event seen was seq ${after}: follow again with { after: ${after} }` : "no event was seen"
          }`,
          broke.answerLost,
        );
      }
      await new Promise((r) => setTimeout(r, pause));
      pause *= 2;
    }
  }

  /** Every open question, oldest first (`questions`); only `deployment`'s with the option. */
  async questions(options: { deployment?: string } = {}): Promise<Question[]> {
    const request: Record<string, unknown> = { cmd: "questions" };
    if (options.deployment !== undefined) request["deployment"] = options.deployment;
    const { data, text } = await this.exchange(request);
    return parseQuestions(data, text);
  }

  /**
   * Answers item `id`'s question `key` with `value`, any JSON value (at
   * most 64 KiB encoded), optionally labelled `by` (at most 128
   * characters; the supervisor records the client's uid and user name
   * beside it). Resolves once the answer is stored and journaled; the
   * handler's `ask` then resolves with it (or, if the item was given back
   * while it waited, its next attempt's `ask` does, at once). The same
   * value again answers `new: false`; a different value, an unknown item
   * or key, or an item that ended is refused (a `WfhostError` with the
   * supervisor's words).
   */
  async answer(id: number | bigint, key: string, value: unknown, options: { by?: string } = {}): Promise<Answered> {
    const request: Record<string, unknown> = { cmd: "answer", id: requestId(id), key: keyOf(key), value: answerValue(value) };
    if (options.by !== undefined) {
      if (typeof options.by !== "string" || [...options.by].length > MAX_BY_CHARS) {
        throw new WfhostError(EXIT.usage, `by is a label of at most ${MAX_BY_CHARS} characters, got ${typeof options.by === "string" ? `${[...options.by].length} characters` : typeof options.by}`);
      }
      request["by"] = options.by;
    }
    const { data, text } = await this.exchange(request);
    const d = data as Partial<Answered> | null;
    if (d === null || typeof d !== "object" || typeof d.new !== "boolean") {
      throw new WfhostError(EXIT.failed, `the supervisor's answer to answer is not one: ${text}`);
    }
    return d as Answered;
  }

  /** Reads the first answer of a stream, which must start it. */
  private async streamStarted(reader: MessageReader): Promise<void> {
    const first = await this.answer_(reader);
    if ((first.data as { streaming?: boolean } | null)?.streaming !== true) {
      throw new WfhostError(EXIT.failed, `the supervisor did not start a stream: ${first.text}`);
    }
  }

  /** One request and its answer on a fresh connection. */
  private async exchange(request: Record<string, unknown>, body?: Uint8Array): Promise<{ data: unknown; text: string }> {
    const message = encodeMessage({ v: CONTROL_VERSION, ...request });
    // Only requests safe to repeat go on a kept connection: one the
    // supervisor closed just before the request arrived (it closes kept
    // connections between requests only) is then tried once more on a
    // new one.
    const repeatable = REPEATABLE.has(String(request["cmd"]));
    for (let fresh = !repeatable; ; fresh = true) {
      const kept = fresh ? null : this.kept();
      const { socket, reader } = kept ?? (await this.open());
      socket.ref();
      // A write that fails still leaves the answer to read: the
      // supervisor may refuse before it reads the whole request.
      socket.write(message);
      if (body !== undefined && body.length > 0) socket.write(body);
      let keep = false;
      try {
        const answer = await this.answer_(reader);
        // Answered in full: the connection serves the next request.
        keep = repeatable;
        return answer;
      } catch (e) {
        if (kept !== null && e instanceof WfhostError && e.answerLost && !reader.answered) continue;
        throw e;
      } finally {
        if (keep) this.keep(socket, reader);
        else socket.destroy();
      }
    }
  }

  /**
   * Closes the connections kept open between requests (the next request
   * opens a new one). Kept connections never hold the process open.
   */
  close(): void {
    for (const c of this.idle.splice(0)) c.socket.destroy();
  }

  /** A connection kept from an earlier request that is still open, if any. */
  private kept(): Kept | null {
    const now = performance.now();
    for (let c = this.idle.pop(); c !== undefined; c = this.idle.pop()) {
      if (!c.reader.ended && now - c.since < KEEP_IDLE_MS) return c;
      c.socket.destroy();
    }
    return null;
  }

  private keep(socket: Socket, reader: MessageReader): void {
    if (this.idle.length >= KEEP_MAX) {
      socket.destroy();
      return;
    }
    socket.unref();
    this.idle.push({ socket, reader, since: performance.now() });
  }

  /** A connection of its own for a streaming request, which it ends. */
  private async openStream(request: Record<string, unknown>): Promise<Kept> {
    const message = encodeMessage({ v: CONTROL_VERSION, ...request });
    const opened = await this.open();
    opened.socket.write(message);
    return opened;
  }

  /** Connects. */
  private open(): Promise<Kept> {
    return new Promise((resolve, reject) => {
      const socket = netConnect({ path: this.socketPath });
      const onError = (e: NodeJS.ErrnoException) => {
        socket.destroy();
        if (e.code === "EACCES") {
          reject(
            new WfhostError(
              EXIT.failed,
              `permission denied: cannot connect to ${this.socketPath}: ${e.message}; run as root, the supervisor's user, or a member of its admin_group`,
            ),
          );
        } else {
          reject(
            new WfhostError(
              EXIT.unreachable,
              `cannot reach the supervisor at ${this.socketPath}: ${e.message}; is \`wfhost supervise\` running with this config?`,
            ),
          );
        }
      };
      socket.once("error", onError);
      socket.once("connect", () => {
        socket.off("error", onError);
        const reader = new MessageReader(socket);
        socket.on("error", () => undefined);
        resolve({ socket, reader, since: performance.now() });
      });
    });
  }

  /** Reads the answer; a refusal becomes a WfhostError with the supervisor's code and words. */
  private async answer_(reader: MessageReader): Promise<{ data: unknown; text: string }> {
    const m = await reader.next();
    if (m.kind === "end") throw this.lost("the connection closed before an answer");
    if (m.kind === "error") throw this.lost(m.message);
    let parsed: { ok?: boolean; data?: unknown; code?: number; error?: string; outcome?: string };
    try {
      parsed = JSON.parse(m.text) as typeof parsed;
    } catch (e) {
      throw new WfhostError(EXIT.failed, `the supervisor's answer is not JSON (${(e as Error).message})`);
    }
    if (parsed.ok !== true) {
      throw new WfhostError(
        parsed.code ?? EXIT.failed,
        parsed.error ?? "the supervisor reported a failure",
        false,
        parsed.outcome === "unknown",
      );
    }
    return { data: parsed.data ?? null, text: m.text };
  }

  private lost(why: string): WfhostError {
    return new WfhostError(EXIT.unreachable, `the supervisor at ${this.socketPath} did not answer: ${why}`, true);
  }
}
