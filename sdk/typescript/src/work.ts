/**
 * The in-flight work of a child: which steps run, for which run, with which
 * drain behaviour, and how many mail items the application holds. Pure
 * bookkeeping, as `child/src/work.rs`: every change returns the events it
 * implies, in wire order, and aborts step signals, so drain and cancel
 * accounting is tested without a socket.
 *
 * `Drained` means nothing is left that the drain must wait for. It is sent
 * once, as soon as all three hold: a drain started (`Drain`, or the lease
 * ran out), no
 * cancel-behaviour step is in flight, and no mail item is held by the
 * application (handed out and neither acknowledged nor released). Once a
 * drain starts no more mail is handed out, so the held count only falls.
 */

import { Cancelled, moreSevere, type CancelCause } from "./errors.js";
import { rememberBounded } from "./memory.js";
import type { DrainBehavior, Event, Outcome } from "./protocol/messages.js";

/** How many cancelled runs are remembered, so late steps of a cancelled run start cancelled. */
export const REMEMBERED_CANCELLED_RUNS = 4096;

interface ActiveStep {
  run: string;
  name: string;
  drain: DrainBehavior;
  /** A drain leaves this step's signal alone: the body winds down by watching `rt.draining`. */
  windDown: boolean;
  controller: AbortController;
}

interface RunState {
  active: number;
  /** The verified cancel that ended the run, once one did. */
  cancelled: Cancelled | null;
}

/** A step as the ledger registered it. */
export interface Started {
  id: number;
  signal: AbortSignal;
  events: Event[];
}

export class Work {
  private readonly steps = new Map<number, ActiveStep>();
  private nextId = 0;
  private readonly runs = new Map<string, RunState>();
  /** Runs ended by a verified cancel, oldest first (a Map keeps insertion order). */
  private readonly cancelledRuns = new Map<string, Cancelled>();
  private mailHeld = 0;
  private draining: Cancelled | null = null;
  private drainedSent = false;
  private closed: Cancelled | null = null;

  /**
   * Registers a step. Its signal starts aborted when the step is new work
   * that must not begin: a cancel-behaviour step during a drain or after
   * the lease ran out, a step of a cancelled run, any step after close.
   */
  start(run: string, name: string, drain: DrainBehavior, windDown = false): Started {
    const controller = new AbortController();
    let reason: Cancelled | null = null;
    const consider = (r: Cancelled | null) => {
      if (r !== null && (reason === null || moreSevere(r.cause, reason.cause))) reason = r;
    };
    if (drain === "Cancel" && this.draining !== null && (!windDown || this.draining.cause === "lease")) {
      consider(this.draining);
    }
    consider(this.closed);
    let state = this.runs.get(run);
    if (state === undefined) {
      state = { active: 0, cancelled: null };
      this.runs.set(run, state);
    }
    state.active += 1;
    state.cancelled ??= this.cancelledRuns.get(run) ?? null;
    consider(state.cancelled);
    if (reason !== null) controller.abort(reason);
    const id = ++this.nextId;
    this.steps.set(id, { run, name, drain, windDown, controller });
    return { id, signal: controller.signal, events: [{ type: "StepStarted", run, step: name, drain }] };
  }

  /** Unregisters a step whose `StepStarted` could not be sent, as if it never began. */
  forget(id: number): void {
    const step = this.steps.get(id);
    if (step === undefined) return;
    this.steps.delete(id);
    const run = this.runs.get(step.run);
    if (run !== undefined) {
      run.active = Math.max(0, run.active - 1);
      if (run.active === 0 && run.cancelled === null) this.runs.delete(step.run);
    }
  }

  /**
   * Ends a step; with `runOutcome` also ends its run. Emits `StepFinished`,
   * then `RunTerminal` when the run is over (a cancelled run ends with its
   * last step), then `Drained` when it is now due.
   */
  finish(id: number, outcome: Outcome, runOutcome?: Outcome): Event[] {
    const step = this.steps.get(id);
    if (step === undefined) return [];
    this.steps.delete(id);
    const events: Event[] = [{ type: "StepFinished", run: step.run, step: step.name, outcome }];
    let cancelledRunOver = false;
    const run = this.runs.get(step.run);
    if (run !== undefined) {
      run.active = Math.max(0, run.active - 1);
      cancelledRunOver = run.cancelled !== null && run.active === 0;
    }
    if (runOutcome !== undefined) {
      events.push(...this.runTerminal(step.run, runOutcome));
    } else if (cancelledRunOver && run?.cancelled) {
      events.push(...this.endCancelledRun(step.run, run.cancelled));
    }
    events.push(...this.drainedIfDone());
    return events;
  }

  /**
   * Starts a drain (a `Drain`, or the lease running out, whose `reason`
   * has cause `lease`): aborts the signals of cancel-behaviour steps with
   * `reason`, stops mail being handed out, and emits `Drained` at once when
   * nothing is left to wait for. A supervisor's drain leaves wind-down
   * steps alone (its budget runs while they wind down); a lease expiry
   * aborts them too, since no supervisor is left to grant a budget. A
   * second drain is a no-op.
   */
  drain(reason: Cancelled): Event[] {
    if (this.draining !== null) return [];
    this.draining = reason;
    const all = reason.cause === "lease";
    for (const s of this.steps.values()) {
      if (s.drain === "Cancel" && (all || !s.windDown)) s.controller.abort(reason);
    }
    return this.drainedIfDone();
  }

  /** Whether a drain has started (asked for, or by lease expiry). */
  isDraining(): boolean {
    return this.draining !== null;
  }

  /** Whether mail may still be handed to the application. */
  takesMail(): boolean {
    return this.draining === null && this.closed === null;
  }

  /** Hands one mail item out if mail is still taken; true when it is now held. */
  takeMail(): boolean {
    const taking = this.takesMail();
    if (taking) this.mailHeld += 1;
    return taking;
  }

  /** A held item was acknowledged or released; emits `Drained` when that was the last thing a drain waited for. */
  settleMail(): Event[] {
    this.mailHeld = Math.max(0, this.mailHeld - 1);
    return this.drainedIfDone();
  }

  /** Mail items the application holds. */
  heldMail(): number {
    return this.mailHeld;
  }

  /** Whether `run` is in flight (a verified cancel may only name such a run). */
  knowsRun(run: string): boolean {
    return this.runs.has(run);
  }

  /** Steps in flight, for diagnostics. */
  activeSteps(): { run: string; step: string; drain: DrainBehavior }[] {
    return [...this.steps.values()].map((s) => ({ run: s.run, step: s.name, drain: s.drain }));
  }

  /**
   * The cancellation cascade of a verified cancel: aborts the signal of
   * every step of `run` (every run when null), whatever its drain
   * behaviour; a run with no step in flight ends at once with `RunTerminal`.
   */
  cancel(run: string | null, reason: Cancelled): Event[] {
    const targets = run === null ? [...this.runs.keys()].sort() : this.runs.has(run) ? [run] : [];
    const events: Event[] = [];
    for (const r of targets) {
      const state = this.runs.get(r);
      if (state === undefined) continue;
      state.cancelled ??= reason;
      for (const s of this.steps.values()) {
        if (s.run === r) s.controller.abort(reason);
      }
      if (state.active === 0) events.push(...this.endCancelledRun(r, state.cancelled));
    }
    return events;
  }

  /**
   * The application declares `run` over. A run already reported cancelled
   * is not reported again; a run being cancelled ends as cancelled whatever
   * the application says.
   */
  runTerminal(run: string, outcome: Outcome): Event[] {
    if (this.cancelledRuns.has(run)) return [];
    const state = this.runs.get(run);
    this.runs.delete(run);
    if (state?.cancelled) {
      this.rememberCancelled(run, state.cancelled);
      return [{ type: "RunTerminal", run, outcome: { kind: "Cancelled" } }];
    }
    return [{ type: "RunTerminal", run, outcome }];
  }

  /** The channel ended: aborts every signal with `reason`, and every later step's too. */
  close(reason: Cancelled): void {
    if (this.closed === null || moreSevere(reason.cause, this.closed.cause)) this.closed = reason;
    for (const s of this.steps.values()) s.controller.abort(reason);
  }

  /** Why the runtime closed, or null. */
  closedBy(): CancelCause | null {
    return this.closed?.cause ?? null;
  }

  private endCancelledRun(run: string, reason: Cancelled): Event[] {
    this.runs.delete(run);
    // A late step of a run already reported cancelled ends it only once.
    if (this.cancelledRuns.has(run)) return [];
    this.rememberCancelled(run, reason);
    return [{ type: "RunTerminal", run, outcome: { kind: "Cancelled" } }];
  }

  private rememberCancelled(run: string, reason: Cancelled): void {
    rememberBounded(this.cancelledRuns, run, reason, REMEMBERED_CANCELLED_RUNS);
  }

  /** Tells whether a cancelled run is remembered (for tests). */
  remembersCancelled(run: string): boolean {
    return this.cancelledRuns.has(run);
  }

  /** `Drained`, once, when a drain was asked for, no cancel-behaviour step is in flight and no mail is held. */
  private drainedIfDone(): Event[] {
    if (this.draining === null || this.drainedSent || this.mailHeld > 0) return [];
    for (const s of this.steps.values()) if (s.drain === "Cancel") return [];
    this.drainedSent = true;
    return [{ type: "Drained" }];
  }
}
