/**
 * What the runtime does with each message from the supervisor, on the event
 * loop as it arrives, so a Ping is answered at once however long a step
 * runs (unless a step blocks the loop itself). An `Answer` resolves the
 * asks waiting for it.
 */

import type { Core } from "./core.js";
import { Cancelled } from "./errors.js";
import { originName, verifyCancel, verifyMailCancel } from "./protocol/cancel.js";
import { controlSince, type Control, type SignedCancel, type SignedMailCancel } from "./protocol/messages.js";

/** setTimeout's longest delay; longer leases are waited for in pieces. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Handles one Control message after the handshake. */
export class Dispatcher {
  private leaseTimer: NodeJS.Timeout | null = null;

  constructor(private readonly core: Core) {
    core.whenClosed(() => this.clearLease());
  }

  handle(message: Control): void {
    const core = this.core;
    const since = controlSince(message.type);
    if (since > core.protocol) {
      // A child of the older version would not know the discriminant: a broken frame (§4.9).
      return this.violation(`${message.type} is a protocol-${since} message, and this child speaks protocol ${core.protocol}`);
    }
    switch (message.type) {
      case "Ping":
        core.postAll([{ type: "Pong", nonce: message.nonce }]);
        return;
      case "Drain":
        this.drain(message.budget_ms);
        return;
      case "Cancel":
        this.cancel(message.cancel);
        return;
      case "Mail":
        core.inbox.deliver(message.id, message.attempt, message.payload);
        return;
      case "Lease":
        this.lease(message.valid_ms);
        return;
      case "Shutdown":
        core.close({ kind: "shutdown", message: "the supervisor sent Shutdown" });
        // Pings are still answered while the process lives, but the channel
        // no longer keeps it alive: with nothing else to do it exits.
        core.socket.unref();
        return;
      case "CancelMail":
        this.cancelMail(message.cancel);
        return;
      case "Answer":
        core.inbox.answer(message.id, message.key, message.value);
        return;
      case "Welcome":
        return this.violation("unexpected Welcome after the handshake");
    }
  }

  /** The supervisor broke the protocol: the channel ends, and the runtime closes as failed. */
  private violation(what: string): void {
    const core = this.core;
    const reason = `protocol violation: ${what}`;
    core.log(`${reason}; closing`);
    core.outbox.fail(reason);
    core.close({ kind: "failed", message: reason });
    core.socket.destroy();
  }

  /** Cancel-behaviour steps are aborted, wait-behaviour steps go on, mail stops; `Drained` once nothing is left. */
  private drain(budgetMs: bigint): void {
    const core = this.core;
    if (core.work.isDraining()) return;
    core.log(`drain requested (budget ${budgetMs} ms)`);
    this.clearLease();
    this.startDrain(new Cancelled("drain"));
  }

  /** Verifies a cancel (key, signature, deployment, run) and runs the cascade, or logs why it was refused. */
  private cancel(cancel: SignedCancel): void {
    const core = this.core;
    const r = cancel.record;
    const run = r.run ?? "<every run>";
    const origin = originName(r.origin);
    const refused = verifyCancel(cancel, core.env.supervisorKey, core.env.deployment, (x) => core.work.knowsRun(x));
    if (refused !== null) {
      core.log(
        `refused cancel of run ${run} for deployment ${JSON.stringify(r.deployment)} (origin ${origin}): ${refused.message}`,
      );
      return;
    }
    core.log(`cancel of run ${run} accepted (origin ${origin}, reason ${JSON.stringify(r.reason)})`);
    core.postAll(core.work.cancel(r.run, new Cancelled("cancel", { reason: r.reason, origin })));
  }

  /**
   * Verifies a cancel of one mail item (key, signature, deployment, an item
   * this child holds) and answers it with exactly one `MailCancelVerdict`:
   * `Refused` with the refusal's text, else whatever the inbox did.
   */
  private cancelMail(cancel: SignedMailCancel): void {
    const core = this.core;
    const r = cancel.record;
    const origin = originName(r.origin);
    const refused = verifyMailCancel(cancel, core.env.supervisorKey, core.env.deployment, (id) => core.inbox.holds(id));
    if (refused !== null) {
      core.log(
        `refused cancel of mail ${r.id} for deployment ${JSON.stringify(r.deployment)} (origin ${origin}): ${refused.message}`,
      );
      core.postAll([{ type: "MailCancelVerdict", id: r.id, verdict: { kind: "Refused", reason: refused.message } }]);
      return;
    }
    const verdict = core.inbox.cancel(r.id, new Cancelled("cancel", { reason: r.reason, origin }));
    const said =
      verdict.kind === "Acknowledged"
        ? "acknowledged"
        : verdict.kind === "NotSupported"
          ? "not supported: its handler cannot be cancelled"
          : `refused: ${verdict.reason}`;
    core.log(`cancel of mail ${r.id} ${said} (origin ${origin}, reason ${JSON.stringify(r.reason)})`);
  }

  /** A fresh lease: the deadline moves to `validMs` from now. */
  private lease(validMs: bigint): void {
    // After a drain (or an expiry) a Lease undoes nothing.
    if (this.core.work.isDraining() || this.core.closeReason !== null) return;
    this.clearLease();
    this.armLease(validMs, validMs);
  }

  private armLease(left: bigint, total: bigint): void {
    const now = left > BigInt(MAX_TIMER_MS) ? MAX_TIMER_MS : Number(left);
    this.leaseTimer = setTimeout(() => {
      const rest = left - BigInt(now);
      if (rest > 0n) this.armLease(rest, total);
      else this.expireLease(total);
    }, now);
    // A lease timer alone must not keep the process alive.
    this.leaseTimer.unref();
  }

  private clearLease(): void {
    if (this.leaseTimer !== null) clearTimeout(this.leaseTimer);
    this.leaseTimer = null;
  }

  /** No newer Lease came in time: act as drained, as if Drain had arrived (the supervisor may have lost the deployment). */
  private expireLease(validMs: bigint): void {
    const core = this.core;
    this.leaseTimer = null;
    if (core.work.isDraining() || core.closeReason !== null) return;
    core.log(`lease ran out (no newer Lease within ${validMs} ms): acting as drained`);
    this.startDrain(new Cancelled("lease"));
  }

  /** The drain itself, whoever started it: items whose handlers wait in `ask` are given back, and do not hold it. */
  private startDrain(reason: Cancelled): void {
    const core = this.core;
    core.postAll(core.work.drain(reason));
    core.inbox.giveBackAsking();
    if (!core.draining.signal.aborted) core.draining.abort(reason);
    core.inbox.stop();
  }
}
