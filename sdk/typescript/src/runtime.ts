/**
 * The runtime: the handle a workflow child holds to talk to its
 * supervisor. `connect()` does the handshake from the environment; the
 * dispatcher then answers the supervisor on the event loop (Ping, Drain,
 * Cancel, CancelMail, Mail, Lease, Shutdown, Answer) while the application
 * runs steps.
 */

import { AsyncLocalStorage } from "node:async_hooks";
import type { Socket } from "node:net";

import { openControlFd, FrameReader, type EndOfChannel } from "./channel.js";
import { Core, type CloseReason } from "./core.js";
import { customBytes, type CustomData, type MailResult } from "./custom.js";
import { Dispatcher } from "./dispatch.js";
import { readChildEnv, ENV_VARS, type ChildEnv } from "./env.js";
import { Cancelled, ChannelClosed, ConnectError, InvalidEvent } from "./errors.js";
import type { Cancellable, Mail, MailOptions } from "./inbox.js";
import { toOutcome, type AckOutcome } from "./mail.js";
import { Outbox } from "./outbox.js";
import { MAX_FRAME_LIMIT } from "./protocol/frame.js";
import { MAX_IMPLEMENTATION_BYTES, type Control, type Welcome } from "./protocol/messages.js";
import { Step, type StepBehavior, type StepOptions } from "./step.js";
import { DEFAULT_IMPLEMENTATION } from "./version.js";

/** Options of `connect()`. */
export interface ConnectOptions {
  /** Whether this child takes mail (default true); when false the supervisor refuses `wfhost send` to it. */
  takesMail?: boolean;
  /** Shown in `wfhost status` (default `@wfhost/child/<version>`); at most 128 bytes. */
  implementation?: string;
  /** Where the `WFHOST_*` variables are read (default `process.env`, from which they are then removed). */
  env?: Record<string, string | undefined>;
  /** An already-open Unix stream socket to use instead of `WFHOST_CONTROL_FD` (for embedding and tests). */
  socket?: Socket;
  /** Where the runtime's own log lines go (default: stderr, prefixed `@wfhost/child: `). */
  log?: (line: string) => void;
  /** How long to wait for the supervisor's Welcome (default 30 000 ms). */
  handshakeTimeoutMs?: number;
  /**
   * The newest protocol version to speak (default 3, the newest this
   * package knows): `2` makes this a child of version 2 whatever the
   * supervisor offers (MailAck, no results, no cancel of one item).
   */
  protocol?: 2 | 3;
}

/** The grants the supervisor read for this child's life. */
export interface GrantsSnapshot {
  /** The file's bytes as read (empty when the deployment has none). */
  bytes: Uint8Array;
  /** The bytes parsed as JSON (null when empty); throws a SyntaxError naming the problem. */
  json<T = unknown>(): T | null;
  /** Unix time in milliseconds when the file was read. */
  readAtMs: number;
  /** SHA-256 of the bytes, in hex: a short name for this snapshot. */
  digest: string;
}

/** The bounds in force, from Welcome. */
export interface RuntimeLimits {
  maxFrameBytes: number;
  maxMailBytes: number;
  drainTimeoutMs: number;
  livenessTimeoutMs: number;
}

/**
 * A mail handler (`rt.handleMail`): called with each item as it is
 * started; what it returns (or resolves with) is the item's result, and
 * how it ends is the item's outcome.
 */
export type MailHandler = (mail: Mail) => MailResult | Promise<MailResult>;

/** Options of `rt.handleMail`. */
export interface HandleMailOptions extends MailOptions {
  /**
   * The most items handled at once (default: no limit; the supervisor sends
   * at most 32 unacknowledged items). Items beyond it wait in the inbox,
   * not started: a cancel of one ends it at once, and a drain leaves it for
   * the next child with the same `attempt`.
   */
  concurrency?: number;
}

/** The item whose handler is running, so the steps it starts are the item's (a cancel of the item cancels them). */
const currentMail = new AsyncLocalStorage<Mail>();

/** The outcome of an item, from how its handler ended. */
function handlerOutcome(mail: Mail, threw: boolean, error: unknown): AckOutcome {
  if (!threw) return "succeeded";
  if (error instanceof Cancelled || mail.signal.aborted) return "cancelled";
  // An AbortError of a signal aborted with a Cancelled (a step's, say).
  if (error instanceof Error && error.name === "AbortError" && error.cause instanceof Cancelled) return "cancelled";
  return { failed: error instanceof Error ? error.message : String(error) };
}

const toNumber = (v: bigint): number => (v > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(v));

function defaultLog(line: string): void {
  process.stderr.write(`@wfhost/child: ${line}\n`);
}

/**
 * Connects to the supervisor through the control channel named by the
 * `WFHOST_*` environment, sends Hello and waits for Welcome.
 */
export async function connect(options: ConnectOptions = {}): Promise<Runtime> {
  const usesProcessEnv = options.env === undefined;
  if (options.protocol !== undefined && options.protocol !== 2 && options.protocol !== 3) {
    throw new ConnectError(`connect({ protocol }) is 2 or 3, got ${JSON.stringify(options.protocol)}`);
  }
  const env = readChildEnv(options.env ?? process.env, options.protocol);
  const implementation = options.implementation ?? DEFAULT_IMPLEMENTATION;
  const implBytes = Buffer.byteLength(implementation, "utf8");
  if (implementation === "" || implBytes > MAX_IMPLEMENTATION_BYTES) {
    throw new ConnectError(
      `the implementation name must be 1 to ${MAX_IMPLEMENTATION_BYTES} bytes, got ${implBytes}: pass a shorter connect({ implementation })`,
    );
  }
  const socket = options.socket ?? openControlFd(env.controlFd);
  if (usesProcessEnv) {
    // Programs this child starts must not believe they are wfhost children.
    for (const name of ENV_VARS) delete process.env[name];
  }
  const log = options.log ?? defaultLog;
  const outbox = new Outbox(socket, MAX_FRAME_LIMIT);
  outbox.setProtocol(env.protocol);
  const timeoutMs = options.handshakeTimeoutMs ?? 30_000;

  return new Promise<Runtime>((resolve, reject) => {
    let settled = false;
    let runtime: Runtime | null = null;
    const fail = (message: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reader.stop();
      socket.destroy();
      reject(new ConnectError(`handshake with the supervisor failed: ${message}`));
    };
    const timer = setTimeout(
      () => fail(`no Welcome within ${timeoutMs} ms of Hello; is this process started by \`wfhost supervise\`?`),
      timeoutMs,
    );
    const onEnd = (end: EndOfChannel) => {
      if (runtime !== null) return runtime._channelEnded(end);
      fail(
        end === null
          ? "the supervisor closed the channel instead of answering Hello (wrong channel id or protocol?)"
          : end.message,
      );
    };
    const reader = new FrameReader(socket, (first: Control) => {
      if (settled) return;
      if (first.type !== "Welcome") return fail(`expected Welcome, got ${first.type}`);
      if (first.protocol !== env.protocol) {
        return fail(
          `Welcome speaks protocol ${first.protocol} but this child speaks ${env.protocol} (its Hello said so); use a @wfhost/child matching the supervisor`,
        );
      }
      if (first.deployment !== env.deployment) {
        return fail(
          `Welcome is for deployment ${JSON.stringify(first.deployment)} but WFHOST_DEPLOYMENT is ${JSON.stringify(env.deployment)}`,
        );
      }
      settled = true;
      clearTimeout(timer);
      const welcome: Welcome = first;
      reader.setLimit(welcome.limits.max_frame_bytes);
      outbox.setMaxFrameBytes(welcome.limits.max_frame_bytes);
      runtime = new Runtime(new Core(env, welcome, socket, outbox, log), reader);
      resolve(runtime);
    }, onEnd);
    try {
      outbox.post({
        type: "Hello",
        protocol: env.protocol,
        channel_id: env.channelId,
        pid: process.pid,
        takes_mail: options.takesMail ?? true,
        implementation,
      });
    } catch (e) {
      fail(`cannot send Hello: ${(e as Error).message}`);
    }
  });
}

/** A connected child runtime. */
export class Runtime {
  private readonly core: Core;
  private readonly dispatcher: Dispatcher;
  private readonly reader: FrameReader;
  private readySent = false;

  /** @internal Use `connect()`. */
  constructor(core: Core, reader: FrameReader) {
    this.core = core;
    this.dispatcher = new Dispatcher(core);
    reader.handler = (m) => this.dispatcher.handle(m);
    this.reader = reader;
    // A violation found by the dispatcher ends the stream of frames too.
    core.whenClosed(() => {
      if (core.closeReason?.kind === "failed") reader.stop();
    });
  }

  /** The protocol version spoken with the supervisor: 3, or 2 under a supervisor of version 2. */
  get protocol(): number {
    return this.core.protocol;
  }

  /** The deployment this child serves. */
  get deployment(): string {
    return this.core.env.deployment;
  }

  /** This spawn's channel id. */
  get channelId(): string {
    return this.core.env.channelId;
  }

  /** The supervisor's Welcome as it came (grants, limits, protocol). */
  get welcome(): Welcome {
    return this.core.welcome;
  }

  /** The grants snapshot in force for this child's life. */
  get grants(): GrantsSnapshot {
    const g = this.core.welcome.grants_snapshot;
    return {
      bytes: g.body,
      json<T>(): T | null {
        if (g.body.length === 0) return null;
        const text = Buffer.from(g.body).toString("utf8");
        try {
          return JSON.parse(text) as T;
        } catch (e) {
          throw new SyntaxError(`the grants snapshot is not JSON (${(e as Error).message}); check the deployment's grants_file`);
        }
      },
      readAtMs: toNumber(g.read_at_ms),
      digest: Buffer.from(g.digest).toString("hex"),
    };
  }

  /** The bounds in force. */
  get limits(): RuntimeLimits {
    const l = this.core.welcome.limits;
    return {
      maxFrameBytes: l.max_frame_bytes,
      maxMailBytes: l.max_mail_bytes,
      drainTimeoutMs: toNumber(l.drain_timeout_ms),
      livenessTimeoutMs: toNumber(l.liveness_timeout_ms),
    };
  }

  /**
   * Tells the supervisor this child can take work (`Ready`, once). Nothing
   * else may be sent before it: the supervisor treats any other event
   * between Welcome and Ready as a violation.
   */
  async ready(): Promise<void> {
    if (this.readySent) return;
    this.readySent = true;
    await this.core.outbox.send({ type: "Ready" });
  }

  /** Refuses an event before Ready, which the supervisor would treat as a violation. */
  private requireReady(event: string): void {
    if (!this.readySent) {
      throw new InvalidEvent(
        `${event} event not sent: call \`await rt.ready()\` first (the supervisor treats any event between Welcome and Ready as a protocol violation)`,
      );
    }
  }

  /**
   * The mail, one item at a time, each held (delaying `Drained`) until
   * acknowledged or released. An item is started as it is handed out (in
   * protocol 3 the runtime sends `MailStarted` then); end it with
   * `mail.ack(outcome, result)`. Ends when a drain starts, the lease runs
   * out or the runtime closes. Every iterator shares one queue.
   */
  async *mail(options: MailOptions = {}): AsyncGenerator<Mail, void, undefined> {
    const cancellable = checkCancellable(options.cancellable);
    for (;;) {
      const mail = await this.core.inbox.take(cancellable);
      if (mail === null) return;
      yield mail;
    }
  }

  /**
   * Handles the mail with `handler`, each item as it comes, concurrently
   * (up to `concurrency` at once), and resolves once no more mail is taken
   * (a drain, the lease running out, the runtime closing) and every
   * running handler has ended.
   *
   * Each item is started as its handler is called (`MailStarted` in
   * protocol 3, with `cancellable` from the options: `false`, or a function
   * returning false for the item, makes a cancel of it `NotSupported`). How
   * the handler ends is how the item ends (`MailDone` in protocol 3,
   * `MailAck` in protocol 2):
   *
   * - it returns (or resolves with) a value: `Succeeded`, and the value is
   *   the result: bytes as they are, a string as UTF-8, `undefined`/`null`
   *   as nothing, any other JSON value JSON-encoded;
   * - it throws a `Cancelled` (a step of the item was cancelled), or throws
   *   after the item's `signal` aborted: `Cancelled`;
   * - it throws anything else: `Failed(message)`;
   * - its item was given back (it waited in `mail.ask` when a drain began
   *   or the lease ran out, or asked after that): nothing, whatever it
   *   returns or throws; the item runs again, from the start, as its next
   *   attempt once its question is answered.
   *
   * A handler that settles its item itself (`mail.ack`, `mail.release`)
   * is taken at its word. A result that cannot be sent (JSON cannot carry
   * it, or it does not fit in a frame) ends the item `Failed`, naming the
   * problem, and is logged. Steps the handler starts with `rt.step` or
   * `rt.startStep` belong to its item: a verified cancel of the item aborts
   * `mail.signal` and cancels their runs.
   */
  async handleMail(handler: MailHandler, options: HandleMailOptions = {}): Promise<void> {
    if (typeof handler !== "function") throw new TypeError(`rt.handleMail(handler): handler must be a function, got ${typeof handler}`);
    const cancellable = checkCancellable(options.cancellable);
    const limit = options.concurrency ?? Infinity;
    if (!(limit === Infinity || (Number.isSafeInteger(limit) && limit >= 1))) {
      throw new TypeError(`rt.handleMail: concurrency must be a whole number of at least 1, got ${String(limit)}`);
    }
    const running = new Set<Promise<void>>();
    for (;;) {
      while (running.size >= limit) await Promise.race(running);
      const mail = await this.core.inbox.take(cancellable);
      if (mail === null) break;
      const p: Promise<void> = this.runHandler(handler, mail).finally(() => running.delete(p));
      running.add(p);
    }
    await Promise.all(running);
  }

  /** Runs one item's handler in its context and ends the item as the handler ended. */
  private async runHandler(handler: MailHandler, mail: Mail): Promise<void> {
    const core = this.core;
    let value: MailResult = undefined;
    let threw = false;
    let error: unknown = undefined;
    try {
      value = await currentMail.run(mail, () => handler(mail));
    } catch (e) {
      threw = true;
      error = e;
    }
    if (mail.settled) return;
    const outcome = handlerOutcome(mail, threw, error);
    try {
      await mail.ack(outcome, threw ? undefined : value);
    } catch (e) {
      if (e instanceof TypeError && !mail.settled) {
        core.log(`mail ${mail.id}: ${e.message}; ending it failed`);
        await mail.ack({ failed: e.message }).catch(() => undefined);
      } else if (e instanceof InvalidEvent) {
        core.log(e.message);
      } else if (!(e instanceof ChannelClosed)) {
        core.log(`mail ${mail.id}: cannot end it: ${(e as Error).message}`);
      }
    }
  }

  /**
   * Starts a step by hand (`StepStarted`) for work that does not fit one
   * promise; end it with `step.finish(outcome)`. Its signal may already be
   * aborted: new cancel-behaviour work during a drain, a step of a
   * cancelled run, any step after close.
   */
  startStep(run: string, name: string, behavior: StepBehavior, options: StepOptions = {}): Step {
    const drain = behavior === "cancel" ? "Cancel" : behavior === "wait" ? "Wait" : null;
    if (drain === null) throw new TypeError(`a step's drain behaviour is 'cancel' or 'wait', got ${JSON.stringify(behavior)}`);
    const windDown = options.onDrain === "wind-down";
    if (options.onDrain !== undefined && options.onDrain !== "abort" && !windDown) {
      throw new TypeError(`onDrain is 'abort' or 'wind-down', got ${JSON.stringify(options.onDrain)}`);
    }
    const mail = options.mail === undefined ? (currentMail.getStore() ?? null) : options.mail;
    this.requireReady("StepStarted");
    const core = this.core;
    const started = core.work.start(run, name, drain, windDown);
    try {
      for (const e of started.events) core.outbox.post(e);
    } catch (e) {
      if (e instanceof InvalidEvent) {
        core.work.forget(started.id);
        throw e;
      }
      // A closed channel already aborted the signal (the runtime closed).
      if (!(e instanceof ChannelClosed)) throw e;
    }
    if (mail !== null) core.inbox.linkRun(mail, run);
    return new Step(core, started.id, run, name, started.signal);
  }

  /**
   * Runs one step of `run`: reports `StepStarted`, runs `body(signal)`,
   * reports `StepFinished` and resolves with the body's value. When the
   * signal aborts (a drain for cancel steps, a verified cancel of the run,
   * lease expiry, shutdown or the channel lost) the step is reported
   * `Cancelled` at once and this rejects with the signal's `Cancelled`
   * reason: the body's promise is abandoned, so pass the signal on to
   * whatever it awaits. A body that throws is reported `Failed(message)`
   * and its error is rethrown.
   */
  async step<T>(
    run: string,
    name: string,
    behavior: StepBehavior,
    body: (signal: AbortSignal) => T | Promise<T>,
    options: StepOptions = {},
  ): Promise<T> {
    const step = this.startStep(run, name, behavior, options);
    const signal = step.signal;
    const report = (outcome: AckOutcome) => step.finish(outcome).catch(() => undefined);
    if (signal.aborted) {
      await report("cancelled");
      throw signal.reason;
    }
    let onAbort: () => void = () => undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    });
    let running: Promise<T>;
    try {
      running = Promise.resolve(body(signal));
    } catch (e) {
      running = Promise.reject(e);
    }
    // An abandoned body that fails later is not an unhandled rejection.
    running.catch(() => undefined);
    aborted.catch(() => undefined);
    try {
      const value = await Promise.race([running, aborted]);
      await report("succeeded");
      return value;
    } catch (e) {
      if (signal.aborted) {
        await report("cancelled");
        throw signal.reason;
      }
      if (e instanceof Cancelled) {
        await report("cancelled");
        throw e;
      }
      await report({ failed: e instanceof Error ? e.message : String(e) });
      throw e;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Reports that `run` reached a terminal state (`RunTerminal`). A run a
   * verified cancel already ended is not reported twice, and a run being
   * cancelled is reported cancelled whatever `outcome` says.
   */
  async runTerminal(run: string, outcome: AckOutcome): Promise<void> {
    this.requireReady("RunTerminal");
    await this.core.sendAll(this.core.work.runTerminal(run, toOutcome(outcome)));
  }

  /** Asks the supervisor to replace this child (`RecycleRequest`). */
  async requestRecycle(reason: string): Promise<void> {
    this.requireReady("RecycleRequest");
    await this.core.outbox.send({ type: "RecycleRequest", reason });
  }

  /**
   * Sends an application-defined event (`Custom`) to the supervisor's
   * observers. `data` is bytes (`Uint8Array`, `Buffer`), a string (sent as
   * UTF-8) or a JSON value (an object, array, finite number, boolean or
   * null, sent JSON-encoded); without it the event carries no bytes. A
   * `kind` that is not a string, or `data` of any other type (a function,
   * a symbol, a BigInt, undefined, NaN, a cyclic object, …), throws a
   * `TypeError` here, synchronously, and nothing is sent. The promise
   * rejects with `InvalidEvent` (before Ready, or an event too large for
   * a frame) or `ChannelClosed`.
   */
  custom(kind: string): Promise<void>;
  custom(kind: string, data: CustomData): Promise<void>;
  custom(kind: string, data?: CustomData): Promise<void> {
    if (typeof kind !== "string") {
      throw new TypeError(`rt.custom(kind, data): kind must be a string, got ${kind === null ? "null" : typeof kind}; nothing was sent`);
    }
    const bytes = arguments.length < 2 ? new Uint8Array(0) : customBytes(data);
    return this.sendCustom(kind, bytes);
  }

  private async sendCustom(kind: string, bytes: Uint8Array): Promise<void> {
    this.requireReady("Custom");
    await this.core.outbox.send({ type: "Custom", kind, bytes });
  }

  /** Aborts once a drain starts or the lease runs out (`reason` is a `Cancelled` saying which): take no new work. */
  get draining(): AbortSignal {
    return this.core.draining.signal;
  }

  /** Why the runtime closed, or null while it is open. */
  get closeReason(): CloseReason | null {
    return this.core.closeReason;
  }

  /** Resolves when the runtime closes (Shutdown, the supervisor gone, a broken channel, `close()`): time to exit. */
  get closed(): Promise<CloseReason> {
    return this.core.closed;
  }

  /** Resolves once every event sent so far is written. */
  flush(): Promise<void> {
    return this.core.outbox.drainQueue();
  }

  /**
   * Writes what is queued, closes the channel (the supervisor reads end of
   * stream, as when this child exits) and closes the runtime: step signals
   * abort as `disconnected`, the mail iterators end.
   */
  async close(): Promise<void> {
    await this.core.outbox.end();
    this.reader.stop();
    this.core.close({ kind: "closed", message: "this child closed the control channel" });
    this.core.socket.destroy();
  }

  /** Steps in flight (run, step, drain behaviour), for diagnostics. */
  activeSteps(): { run: string; step: string; behavior: StepBehavior }[] {
    return this.core.work.activeSteps().map((s) => ({
      run: s.run,
      step: s.step,
      behavior: s.drain === "Cancel" ? "cancel" : "wait",
    }));
  }

  /** @internal The channel ended (EOF, a violation, an I/O error). */
  _channelEnded(end: EndOfChannel): void {
    const core = this.core;
    if (end === null) {
      core.outbox.fail("the supervisor closed the channel");
      core.close({ kind: "disconnected", message: "the supervisor closed the channel" });
    } else {
      if (core.closeReason === null || core.closeReason.kind === "shutdown") core.log(`control channel failed: ${end.message}; closing`);
      core.outbox.fail(end.message);
      core.close({ kind: "failed", message: end.message });
    }
    core.socket.destroy();
  }
}

/** Checks the `cancellable` option of `rt.mail` and `rt.handleMail`. */
function checkCancellable(c: Cancellable | undefined): Cancellable {
  if (c === undefined) return true;
  if (typeof c !== "boolean" && typeof c !== "function") {
    throw new TypeError(`cancellable must be a boolean or a function (mail) => boolean, got ${typeof c}`);
  }
  return c;
}

export type { ChildEnv };
