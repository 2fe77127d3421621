/**
 * What can go wrong, as error classes an application can tell apart:
 * connecting, sending on a closed channel, an event the wire cannot carry,
 * and a step that was asked to stop.
 */

/** Why a step was asked to stop, from the mildest to the most severe. */
export type CancelCause = "drain" | "lease" | "shutdown" | "disconnected" | "cancel";

const SEVERITY: Record<CancelCause, number> = { drain: 0, lease: 1, shutdown: 2, disconnected: 3, cancel: 4 };

/** Whether `a` is more severe than `b`. */
export function moreSevere(a: CancelCause, b: CancelCause): boolean {
  return SEVERITY[a] > SEVERITY[b];
}

/** Who asked for a verified cancel (`deadline`: an item's deadline passed, version 3). */
export type CancelOriginName = "supervisor-drain" | "operator" | "deadline";

/**
 * A step was stopped: the `signal.reason` of an aborted step, and what
 * `rt.step` rejects with. `cause` says why; a verified cancel also carries
 * its `reason` text and `origin`.
 */
export class Cancelled extends Error {
  override name = "Cancelled";
  override readonly cause: CancelCause;
  /** The cancel's reason text (verified cancels only). */
  readonly reason: string | null;
  /** Who asked for the cancel (verified cancels only). */
  readonly origin: CancelOriginName | null;

  constructor(cause: CancelCause, detail?: { reason: string; origin: CancelOriginName }) {
    super(describe(cause, detail));
    this.cause = cause;
    this.reason = detail?.reason ?? null;
    this.origin = detail?.origin ?? null;
  }
}

function describe(cause: CancelCause, detail?: { reason: string; origin: CancelOriginName }): string {
  switch (cause) {
    case "drain":
      return "cancelled: the child is draining (cancel-behaviour step)";
    case "lease":
      return "cancelled: the supervisor's lease ran out, so this child stopped on its own";
    case "shutdown":
      return "cancelled: the supervisor asked this child to shut down";
    case "disconnected":
      return "cancelled: the control channel to the supervisor is gone";
    case "cancel":
      return `cancelled by a verified cancel (origin ${detail?.origin ?? "?"}): ${detail?.reason ?? ""}`;
  }
}

/** `connect()` failed: the process was not started by wfhost, or the handshake failed. */
export class ConnectError extends Error {
  override name = "ConnectError";
}

/**
 * The item was given back to the supervisor while its handler waited in
 * `mail.ask` (a drain began, or the lease ran out): what `ask` rejects
 * with then, and with which any later `ask`, `progress` or `ack` of the
 * item rejects. Let it pass: the item is no longer this child's, and
 * whatever its handler returns or throws is discarded (no `MailDone` is
 * sent). The supervisor delivers the item again once its question is
 * answered, as its next attempt: the handler runs from the start, and its
 * `ask` of the same key returns the stored answer at once.
 */
export class GivenBackError extends Error {
  override name = "GivenBackError";
  constructor(
    /** The item given back. */
    readonly id: bigint,
    /** The key whose answer was awaited (or asked for), or null when the item was given back earlier. */
    readonly key: string | null,
    message: string,
  ) {
    super(message);
  }
}

/** The control channel is closed: nothing more reaches the supervisor. */
export class ChannelClosed extends Error {
  override name = "ChannelClosed";
}

/** An event was not sent: the wire cannot carry it (too large, bad text, out of range), or Ready was not sent yet. */
export class InvalidEvent extends Error {
  override name = "InvalidEvent";
  constructor(
    message: string,
    /** Whether the event's frame was above `max_frame_bytes` (and would otherwise have gone). */
    readonly tooLarge = false,
  ) {
    super(message);
  }
}
