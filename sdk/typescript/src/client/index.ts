/**
 * `@wfhost/child/client`: a producer's client for the supervisor's control
 * socket (`docs/control.md`, protocol 2): send mail exactly once, read
 * status, follow the event stream, and the operator commands.
 *
 * ```ts
 * import { Client } from "@wfhost/child/client";
 * const client = new Client({ config: "/etc/wfhost/wfhost.toml" });
 * const { id } = await client.send("orders", JSON.stringify({ order: 9 }), { key: "order-9" });
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

/** One event of the supervisor's durable stream. */
export interface WfhostEvent {
  seq: number;
  at_ms: number;
  deployment: string | null;
  kind: string;
  body: Record<string, unknown>;
}

/**
 * How often `send` tries a request whose answer was lost or whose outcome
 * the supervisor could not tell, and the first pause (doubled each time).
 */
const SEND_TRIES = 5;
const SEND_RETRY_PAUSE_MS = 100;

export class Client {
  /** The control socket's path. */
  readonly socketPath: string;

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
   * miss nothing still retained.
   */
  async *events(options: { after?: number; follow?: boolean } = {}): AsyncGenerator<WfhostEvent, void, undefined> {
    const { socket, reader } = await this.open({ cmd: "events", after: options.after ?? 0, follow: options.follow ?? false });
    try {
      const first = await this.answer(reader);
      if ((first.data as { streaming?: boolean }).streaming !== true) {
        throw new WfhostError(EXIT.failed, `the supervisor did not start a stream: ${first.text}`);
      }
      for (;;) {
        const m = await reader.next();
        if (m.kind === "end") return;
        if (m.kind === "error") throw this.lost(m.message);
        yield JSON.parse(m.text) as WfhostEvent;
      }
    } finally {
      socket.destroy();
    }
  }

  /** One request and its answer on a fresh connection. */
  private async exchange(request: Record<string, unknown>, body?: Uint8Array): Promise<{ data: unknown; text: string }> {
    const { socket, reader } = await this.open(request, body);
    try {
      return await this.answer(reader);
    } finally {
      socket.destroy();
    }
  }

  /** Connects and writes `request` (and `body`). */
  private open(request: Record<string, unknown>, body?: Uint8Array): Promise<{ socket: Socket; reader: MessageReader }> {
    const message = encodeMessage({ v: CONTROL_VERSION, ...request });
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
        // A write that fails still leaves the answer to read: the
        // supervisor may refuse before it reads the whole request.
        socket.on("error", () => undefined);
        socket.write(message);
        if (body !== undefined && body.length > 0) socket.write(body);
        resolve({ socket, reader });
      });
    });
  }

  /** Reads the answer; a refusal becomes a WfhostError with the supervisor's code and words. */
  private async answer(reader: MessageReader): Promise<{ data: unknown; text: string }> {
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
