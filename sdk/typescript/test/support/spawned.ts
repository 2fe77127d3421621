/**
 * A child process started as the supervisor starts one: its control
 * channel at fd 3 (a socketpair libuv makes for `stdio[3] = "pipe"`), a
 * cleared environment plus `WFHOST_*`, stdout and stderr captured.
 */

import { spawn, type ChildProcess } from "node:child_process";
import type { Socket } from "node:net";

import { encodeControlFrame, type Control, type Event } from "../../dist/protocol/index.js";
import { EventStream } from "./events.js";
import { childEnv } from "./supervisor.js";

export class Spawned {
  readonly child: ChildProcess;
  readonly channel: Socket;
  readonly env: Record<string, string>;
  stderr = "";
  stdout = "";
  private seq = 1n;
  private readonly events: EventStream;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; atMs: number }>;

  constructor(args: string[], deployment = "billing", protocolMax?: string) {
    this.env = childEnv(deployment, protocolMax);
    this.child = spawn(process.execPath, args, {
      env: { ...this.env, PATH: process.env["PATH"] ?? "/usr/bin:/bin" },
      stdio: ["ignore", "pipe", "pipe", "pipe"],
    });
    this.channel = this.child.stdio[3] as Socket;
    this.events = new EventStream(this.channel, () => `; stderr: ${this.stderr}`);
    this.child.stdout!.on("data", (d: Buffer) => (this.stdout += d.toString()));
    this.child.stderr!.on("data", (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) =>
      this.child.on("exit", (code, signal) => {
        resolve({ code, signal, atMs: performance.now() });
        this.events.end();
      }),
    );
  }

  send(message: Control): void {
    this.channel.write(encodeControlFrame({ seq: this.seq++, body: message }));
  }

  sendRaw(bytes: Uint8Array): void {
    this.channel.write(bytes);
  }

  /** The next event other than Pong, or a rejection after `ms`. */
  next(ms = 10_000): Promise<Event> {
    return this.events.next(ms, true);
  }

  async expect<T extends Event["type"]>(type: T): Promise<Extract<Event, { type: T }>> {
    const e = await this.next();
    if (e.type !== type) throw new Error(`expected ${type}, got ${e.type}; stderr: ${this.stderr}`);
    return e as Extract<Event, { type: T }>;
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}
