"""The in-flight work of a child (``child/src/work.rs``, ported): which
steps run, for which run, with which drain behaviour, and how many mail
items the application holds. Pure bookkeeping: every change returns the
events it implies, in wire order, and fires tokens, so the drain and cancel
rules are tested without a socket. The runtime calls it under one lock.

``Drained`` means nothing is left that the drain must wait for. It is sent
once, as soon as all three hold: a drain has started, no cancel-behaviour
step is in flight, and no mail item is held by the application (handed out
and neither acknowledged nor released). A lease that runs out starts a
drain exactly as ``Drain`` does (docs/protocol.md §4.7), with its own cause.
"""

from __future__ import annotations

from collections import OrderedDict

from . import messages as m
from . import token as t
from .outcome import CANCELLED, Outcome
from .token import CancelToken

# Cancelled runs remembered, so late steps of a cancelled run start
# cancelled and a late run_terminal is not reported twice.
REMEMBERED_CANCELLED_RUNS = 4096


class _Step:
    __slots__ = ("run", "name", "drain", "token")

    def __init__(self, run: str, name: str, drain: str, token: CancelToken) -> None:
        self.run = run
        self.name = name
        self.drain = drain
        self.token = token


class _Run:
    __slots__ = ("active", "cancelled", "cancel_reason", "steps")

    def __init__(self) -> None:
        self.active = 0
        self.cancelled = False
        self.cancel_reason = ""
        self.steps: set[int] = set()


class Work:
    """Steps and runs in flight, held mail, and the drain state."""

    def __init__(self) -> None:
        self.steps: dict[int, _Step] = {}
        self.next_id = 0
        self.runs: dict[str, _Run] = {}
        self.cancelled_runs: OrderedDict[str, str] = OrderedDict()
        self.mail_held = 0
        self.draining = False  # a Drain arrived or the lease ran out
        self.drain_reason = ""
        self.drain_cause = t.DRAIN
        self.drained_sent = False
        self.closed: tuple[str, str] | None = None  # (cause, reason)
        self.cancel_steps = 0

    # --- steps -----------------------------------------------------------

    def start(self, run: str, name: str, drain: str) -> tuple[int, CancelToken, list]:
        """Registers a step. Its token starts fired when the step is new
        work that must not begin: a cancel-behaviour step during a drain, a
        step of a cancelled run, any step after the channel closed."""
        token = CancelToken()
        if self.draining and drain == "cancel":
            token.fire(self.drain_cause, self.drain_reason)
        if self.closed is not None:
            token.fire(*self.closed)
        state = self.runs.get(run)
        if state is None:
            state = self.runs[run] = _Run()
        state.active += 1
        if run in self.cancelled_runs and not state.cancelled:
            state.cancelled = True
            state.cancel_reason = self.cancelled_runs[run]
        if state.cancelled:
            token.fire(t.CANCEL, state.cancel_reason)
        self.next_id += 1
        sid = self.next_id
        state.steps.add(sid)
        self.steps[sid] = _Step(run, name, drain, token)
        if drain == "cancel":
            self.cancel_steps += 1
        return sid, token, [m.StepStarted(run, name, drain)]

    def finish(self, sid: int, outcome: Outcome, run_outcome: Outcome | None = None) -> list:
        """Ends a step; with ``run_outcome`` also ends its run. Emits
        ``StepFinished``, then ``RunTerminal`` when the run is over (a
        cancelled run ends with its last step), then ``Drained`` when due."""
        step = self.steps.pop(sid, None)
        if step is None:
            return []
        if step.drain == "cancel":
            self.cancel_steps -= 1
        events: list = [m.StepFinished(step.run, step.name, outcome)]
        cancelled_run_over = False
        state = self.runs.get(step.run)
        if state is not None:
            state.active = max(0, state.active - 1)
            state.steps.discard(sid)
            cancelled_run_over = state.cancelled and state.active == 0
        if run_outcome is not None:
            events += self.run_terminal(step.run, run_outcome)
        elif cancelled_run_over:
            events += self._end_cancelled_run(step.run)
        events += self._drained_if_due()
        return events

    # --- drain -----------------------------------------------------------

    def drain(self, budget_ms: int) -> list:
        """The supervisor's ``Drain``: fires the tokens of cancel-behaviour
        steps, stops mail being handed out, and emits ``Drained`` at once
        when nothing is left to wait for. A second drain is a no-op."""
        return self._start_drain(
            t.DRAIN, f"the supervisor is draining this child (budget {budget_ms} ms)"
        )

    def lease_expired(self, valid_ms: int) -> list:
        """The lease ran out: a drain of the child's own, since the
        supervisor may have lost the deployment to another host."""
        return self._start_drain(
            t.LEASE,
            f"the supervisor's lease ran out ({valid_ms} ms without a renewal); "
            f"it may have lost this deployment",
        )

    def _start_drain(self, cause: str, reason: str) -> list:
        if self.draining:
            return []
        self.draining = True
        self.drain_cause = cause
        self.drain_reason = reason
        for step in self.steps.values():
            if step.drain == "cancel":
                step.token.fire(cause, reason)
        return self._drained_if_due()

    def takes_mail(self) -> bool:
        """Whether mail may still be handed to the application."""
        return not self.draining and self.closed is None

    def take_mail(self) -> bool:
        """Hands one item out if mail is still taken; it is then held until
        settled with :meth:`settle_mail`."""
        if self.takes_mail():
            self.mail_held += 1
            return True
        return False

    def settle_mail(self) -> list:
        """A held item was acknowledged or released."""
        self.mail_held = max(0, self.mail_held - 1)
        return self._drained_if_due()

    # --- cancel ------------------------------------------------------------

    def knows_run(self, run: str) -> bool:
        """Whether ``run`` is in flight (a verified cancel may name only
        such a run)."""
        return run in self.runs

    def cancel(self, run: str | None, reason: str) -> list:
        """The cancellation cascade of a verified cancel: fires the token of
        every step of ``run`` (every run when None), whatever its drain
        behaviour; a run with no step left ends at once with RunTerminal."""
        if run is None:
            targets = sorted(self.runs)
        else:
            targets = [run] if run in self.runs else []
        events: list = []
        for name in targets:
            state = self.runs[name]
            state.cancelled = True
            state.cancel_reason = reason
            for sid in state.steps:
                self.steps[sid].token.fire(t.CANCEL, reason)
            if state.active == 0:
                events += self._end_cancelled_run(name)
        return events

    def run_terminal(self, run: str, outcome: Outcome) -> list:
        """The application declares ``run`` over. A run already reported
        cancelled is not reported again; a run being cancelled ends
        cancelled whatever the application says."""
        if run in self.cancelled_runs:
            return []
        state = self.runs.pop(run, None)
        if state is not None and state.cancelled:
            self._remember_cancelled(run, state.cancel_reason)
            return [m.RunTerminal(run, CANCELLED)]
        return [m.RunTerminal(run, outcome)]

    # --- close -------------------------------------------------------------

    def close(self, cause: str, reason: str) -> None:
        """The channel ended: fires every token, and every later step's."""
        if self.closed is None or t.SEVERITY[cause] > t.SEVERITY[self.closed[0]]:
            self.closed = (cause, reason)
        for step in self.steps.values():
            step.token.fire(cause, reason)

    # --- internals -----------------------------------------------------------

    def _end_cancelled_run(self, run: str) -> list:
        state = self.runs.pop(run, None)
        if run in self.cancelled_runs:
            return []  # a late step of a run already reported cancelled
        self._remember_cancelled(run, state.cancel_reason if state else "")
        return [m.RunTerminal(run, CANCELLED)]

    def _remember_cancelled(self, run: str, reason: str) -> None:
        if run not in self.cancelled_runs:
            self.cancelled_runs[run] = reason
            while len(self.cancelled_runs) > REMEMBERED_CANCELLED_RUNS:
                self.cancelled_runs.popitem(last=False)

    def _drained_if_due(self) -> list:
        if (
            self.draining
            and not self.drained_sent
            and self.cancel_steps == 0
            and self.mail_held == 0
        ):
            self.drained_sent = True
            return [m.Drained()]
        return []
