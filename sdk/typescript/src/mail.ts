/**
 * Mail: work the supervisor delivers at least once. Each id reaches the
 * application once; an id already acknowledged is answered again from
 * memory when the supervisor redelivers it, never processed twice.
 *
 * A mail item is *held* from the moment the mail iterator hands it out
 * until it is acknowledged or released; a drain is not over (`Drained` is
 * not sent) while any is held. Once a drain starts, the lease runs out or
 * the runtime closes, no more mail is handed out: the iterators end, mail
 * already queued is dropped and mail arriving later is not taken, all left
 * unacknowledged for the supervisor to deliver to the next child.
 * Redeliveries of acknowledged mail are still acknowledged again.
 */

import { rememberBounded } from "./memory.js";
import type { Outcome } from "./protocol/messages.js";

/** How many acknowledged ids (and their outcomes) are remembered for answering redeliveries. */
export const REMEMBERED_ACKS = 4096;

/** What to do with a delivery. */
export type Delivery =
  | { kind: "deliver" }
  | { kind: "reack"; outcome: Outcome }
  | { kind: "duplicate" }
  | { kind: "declined" };

/** Which mail ids are with the application and which are acknowledged. */
export class MailLedger {
  private readonly inFlight = new Set<bigint>();
  /** Acknowledged ids, oldest first. */
  private readonly acked = new Map<bigint, Outcome>();

  /** Classifies a delivery of `id`, marking new mail in flight when this child is `taking` mail. */
  receive(id: bigint, taking: boolean): Delivery {
    const outcome = this.acked.get(id);
    if (outcome !== undefined) return { kind: "reack", outcome };
    if (this.inFlight.has(id)) return { kind: "duplicate" };
    if (!taking) return { kind: "declined" };
    this.inFlight.add(id);
    return { kind: "deliver" };
  }

  /** Records the acknowledgement of `id`. */
  ack(id: bigint, outcome: Outcome): void {
    this.inFlight.delete(id);
    rememberBounded(this.acked, id, outcome, REMEMBERED_ACKS);
  }

  /** Forgets mail left unacknowledged, so a redelivery reaches the application again. */
  abandon(id: bigint): void {
    this.inFlight.delete(id);
  }

  /** Ids with the application (for tests and diagnostics). */
  inFlightIds(): bigint[] {
    return [...this.inFlight].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** How many acknowledgements are remembered. */
  rememberedAcks(): number {
    return this.acked.size;
  }
}

/** How processing of a mail item ended, as an application says it. */
export type AckOutcome = "succeeded" | "cancelled" | { failed: string };

/** The wire form of an application's outcome; throws a TypeError for anything else. */
export function toOutcome(o: AckOutcome): Outcome {
  if (o === "succeeded") return { kind: "Succeeded" };
  if (o === "cancelled") return { kind: "Cancelled" };
  if (o !== null && typeof o === "object" && typeof o.failed === "string") return { kind: "Failed", reason: o.failed };
  throw new TypeError(`an outcome is 'succeeded', 'cancelled' or { failed: reason }, got ${JSON.stringify(o)}`);
}

/** The lower-case name of an outcome, for logs. */
export function outcomeText(o: Outcome): string {
  switch (o.kind) {
    case "Succeeded":
      return "succeeded";
    case "Cancelled":
      return "cancelled";
    case "Failed":
      return `failed: ${o.reason}`;
  }
}
