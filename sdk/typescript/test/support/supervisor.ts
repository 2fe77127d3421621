/**
 * A scripted supervisor for runtime tests: the other end of a real Unix
 * stream socket (a listening socket in a temp dir and a connection to it,
 * which behaves as the supervisor's socketpair does), speaking the wire
 * protocol with this package's codec.
 */

import { createPrivateKey, randomBytes, sign } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, connect as netConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { EventStream } from "./events.js";
import {
  PublicKey,
  cancelSigningBytes,
  encodeControlFrame,
  mailCancelSigningBytes,
  type CancelRequested,
  type Control,
  type Event,
  type MailCancelRequested,
  type SignedCancel,
  type SignedMailCancel,
  type Welcome,
} from "../../dist/protocol/index.js";

/** The golden vectors' test key (RFC 8032 test 1). */
export const SEED_HEX = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
export const PUBLIC_HEX = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const PRIVATE = createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(SEED_HEX, "hex")]),
  format: "der",
  type: "pkcs8",
});

/** Signs a cancel with the test key. */
export function signCancel(record: CancelRequested): SignedCancel {
  const signature = new Uint8Array(sign(null, cancelSigningBytes(record), PRIVATE));
  return { record, key_id: PublicKey.fromHex(PUBLIC_HEX).keyId, signature };
}

/** Signs a cancel of one mail item with the test key. */
export function signMailCancel(record: MailCancelRequested): SignedMailCancel {
  const signature = new Uint8Array(sign(null, mailCancelSigningBytes(record), PRIVATE));
  return { record, key_id: PublicKey.fromHex(PUBLIC_HEX).keyId, signature };
}

/**
 * A `WFHOST_*` environment for deployment `deployment`: a supervisor of
 * version 2 (no `WFHOST_PROTOCOL_MAX`) unless `protocolMax` is given.
 */
export function childEnv(deployment = "billing", protocolMax?: string): Record<string, string> {
  return {
    WFHOST_CONTROL_FD: "3",
    WFHOST_CHANNEL_ID: randomBytes(16).toString("hex"),
    WFHOST_PROTOCOL: "2",
    ...(protocolMax === undefined ? {} : { WFHOST_PROTOCOL_MAX: protocolMax }),
    WFHOST_DEPLOYMENT: deployment,
    WFHOST_SUPERVISOR_KEY: PUBLIC_HEX,
  };
}

/** A Welcome for `deployment` with the given limits (of protocol `protocol`, 2 unless told). */
export function welcome(deployment = "billing", over: Partial<Welcome["limits"]> = {}, grants = "", protocol = 2): Control {
  const body = new TextEncoder().encode(grants);
  return {
    type: "Welcome",
    protocol,
    deployment,
    grants_snapshot: { read_at_ms: 1_700_000_000_000n, digest: new Uint8Array(32).fill(7), body },
    limits: {
      max_frame_bytes: 1 << 20,
      max_mail_bytes: 256 << 10,
      drain_timeout_ms: 5000n,
      liveness_timeout_ms: 30000n,
      ...over,
    },
  };
}

export class FakeSupervisor {
  private seq = 1n;
  private readonly events: EventStream;

  private constructor(
    readonly socket: Socket,
    private readonly dir: string,
  ) {
    this.events = new EventStream(socket);
  }

  /** A connected pair: the supervisor's end and the child's. */
  static async pair(): Promise<{ sup: FakeSupervisor; child: Socket }> {
    const dir = mkdtempSync(join(tmpdir(), "wfts-"));
    const path = join(dir, "s");
    const server = createServer();
    const accepted = new Promise<Socket>((resolve) => server.once("connection", resolve));
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const child = netConnect({ path, allowHalfOpen: true });
    const ours = await accepted;
    server.close();
    await new Promise<void>((resolve) => child.once("connect", () => resolve()));
    return { sup: new FakeSupervisor(ours, dir), child };
  }

  /** Sends a Control message with the next sequence number. */
  send(message: Control): void {
    this.socket.write(encodeControlFrame({ seq: this.seq++, body: message }));
  }

  /** Writes raw bytes (a broken frame, say). */
  sendRaw(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  /** The next event, or a rejection after `ms`. */
  next(ms = 5000): Promise<Event> {
    return this.events.next(ms, false);
  }

  /** The next event, which must be of `type`. */
  async expect<T extends Event["type"]>(type: T, ms = 5000): Promise<Extract<Event, { type: T }>> {
    const e = await this.next(ms);
    if (e.type !== type) throw new Error(`expected ${type}, got ${JSON.stringify(e, replacer)}`);
    return e as Extract<Event, { type: T }>;
  }

  /** Events until (and including) the first of `type`, skipping Pongs. */
  async until<T extends Event["type"]>(type: T, ms = 5000): Promise<Event[]> {
    const seen: Event[] = [];
    for (;;) {
      const e = await this.next(ms);
      if (e.type === "Pong") continue;
      seen.push(e);
      if (e.type === type) return seen;
    }
  }

  /** Asserts nothing but Pongs arrives for `ms`. */
  async quiet(ms: number): Promise<Event[]> {
    const seen: Event[] = [];
    const deadline = Date.now() + ms;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) return seen;
      try {
        const e = await this.next(left);
        if (e.type !== "Pong") seen.push(e);
      } catch {
        return seen;
      }
    }
  }

  close(): void {
    this.socket.destroy();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function replacer(_k: string, v: unknown): unknown {
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Uint8Array) return Buffer.from(v).toString("hex");
  return v;
}
