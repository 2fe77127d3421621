/** A step started by hand: its signal, and the report of how it ended. */

import type { Core } from "./core.js";
import type { Mail } from "./inbox.js";
import { toOutcome, type AckOutcome } from "./mail.js";

/** What a step does when its child is drained. */
export type StepBehavior = "cancel" | "wait";

/** Options of `rt.step` and `rt.startStep`. */
export interface StepOptions {
  /**
   * For a cancel-behaviour step: `"abort"` (the default) aborts its signal
   * when a drain starts; `"wind-down"` leaves the signal alone so the body
   * can finish or stop on its own (watch `rt.draining`), while the drain
   * budget runs; a verified cancel, lease expiry or close still aborts it.
   */
  onDrain?: "abort" | "wind-down";
  /**
   * The mail item this step works for (default: the item whose
   * `rt.handleMail` handler is running, if any; `null`: none). A verified
   * cancel of the item (protocol 3) cancels the step's run, as a cancel of
   * the run does; a step started after it starts cancelled.
   */
  mail?: Mail | null;
}

/**
 * A running step. Finish it with `finish` exactly once; until then a
 * cancel-behaviour step holds up `Drained`.
 */
export class Step {
  private finished = false;

  /** @internal */
  constructor(
    private readonly core: Core,
    private readonly id: number,
    /** The run this step belongs to. */
    readonly run: string,
    /** The step's name. */
    readonly name: string,
    /** Aborts when the step must stop; `signal.reason` is a `Cancelled` saying why. */
    readonly signal: AbortSignal,
  ) {}

  /** Whether `finish` was called. */
  get isFinished(): boolean {
    return this.finished;
  }

  /**
   * Reports how the step ended (`StepFinished`), then `RunTerminal` if its
   * run was cancelled and this was its last step, or if `runOutcome` is
   * given (a run of one step), then `Drained` if it is now due. Resolves
   * once written; a second call does nothing.
   */
  finish(outcome: AckOutcome, runOutcome?: AckOutcome): Promise<void> {
    if (this.finished) return Promise.resolve();
    const wire = toOutcome(outcome);
    const run = runOutcome === undefined ? undefined : toOutcome(runOutcome);
    this.finished = true;
    return this.core.sendAll(this.core.work.finish(this.id, wire, run));
  }
}
