"""The work ledger's drain, Drained and cancel rules, without a socket
(the cases of child/src/work.rs, ported)."""

from __future__ import annotations

from wfhost import messages as m
from wfhost.mail_ledger import DECLINED, DELIVER, DUPLICATE, REACK, REMEMBERED_ACKS, MailLedger
from wfhost.work import REMEMBERED_CANCELLED_RUNS, Work


def names(events: list) -> list[str]:
    return [type(e).__name__ for e in events]


def test_drain_cancels_cancel_steps_and_waits_for_them():
    w = Work()
    c, ct, ev = w.start("r1", "fetch", "cancel")
    assert names(ev) == ["StepStarted"]
    a, at, _ = w.start("r1", "approve", "wait")
    assert w.drain(1000) == [], "a cancel step is still in flight"
    assert ct.cause == "drain" and "1000 ms" in ct.reason
    assert not at.event.is_set(), "wait steps go on"
    assert names(w.finish(c, "cancelled")) == ["StepFinished", "Drained"]
    assert names(w.finish(a, "succeeded")) == ["StepFinished"]
    assert w.drain(1000) == [], "Drained is sent once"


def test_drain_with_only_wait_steps_is_drained_at_once():
    w = Work()
    _, tok, _ = w.start("r1", "approve", "wait")
    assert names(w.drain(0)) == ["Drained"]
    assert not tok.event.is_set()


def test_new_cancel_steps_start_cancelled_during_a_drain():
    w = Work()
    w.drain(0)
    _, tok, _ = w.start("r1", "fetch", "cancel")
    assert tok.cause == "drain"
    _, tok, _ = w.start("r1", "approve", "wait")
    assert not tok.event.is_set()


def test_a_lease_expiry_is_a_drain_with_its_own_cause():
    w = Work()
    assert w.take_mail()
    c, ct, _ = w.start("mail-1", "fetch", "cancel")
    _, at, _ = w.start("mail-1", "approve", "wait")
    assert w.lease_expired(300) == []
    assert ct.cause == "lease" and "300 ms" in ct.reason
    assert not at.event.is_set()
    assert not w.take_mail(), "no mail after the lease ran out"
    assert names(w.finish(c, "cancelled")) == ["StepFinished"], "mail is still held"
    assert names(w.settle_mail()) == ["Drained"]
    assert w.drain(0) == [], "a Drain after the expiry changes nothing"


def test_cancel_cascades_over_the_run_and_ends_it_after_its_last_step():
    w = Work()
    a, at, _ = w.start("r1", "approve", "wait")
    b, bt, _ = w.start("r1", "fetch", "cancel")
    _, other, _ = w.start("r2", "fetch", "cancel")
    assert w.cancel("r1", "because") == []
    assert (at.cause, bt.cause) == ("cancel", "cancel") and at.reason == "because"
    assert not other.event.is_set()
    assert names(w.finish(a, "cancelled")) == ["StepFinished"]
    ev = w.finish(b, "cancelled")
    assert ev[1:] == [m.RunTerminal("r1", "cancelled")]
    assert not w.knows_run("r1")
    assert w.run_terminal("r1", "succeeded") == [], "not twice"
    late, late_tok, _ = w.start("r1", "late", "wait")
    assert late_tok.cause == "cancel"
    assert names(w.finish(late, "cancelled")) == ["StepFinished"], "the run ended once"


def test_cancel_of_an_idle_run_ends_it_at_once_and_none_means_all():
    w = Work()
    a, _, _ = w.start("r1", "s", "wait")
    w.finish(a, "succeeded")
    _, t2, _ = w.start("r2", "s", "wait")
    assert w.cancel(None, "all") == [m.RunTerminal("r1", "cancelled")], "r2 waits for its step"
    assert t2.cause == "cancel"
    assert w.cancel("nope", "x") == []


def test_a_run_being_cancelled_ends_cancelled_whatever_the_application_says():
    w = Work()
    s, _, _ = w.start("r1", "s", "wait")
    w.cancel("r1", "x")
    ev = w.finish(s, "succeeded", "succeeded")
    assert ev[1:] == [m.RunTerminal("r1", "cancelled")]


def test_finish_with_run_outcome_orders_step_run_drained():
    w = Work()
    c, _, _ = w.start("r1", "command", "cancel")
    w.drain(0)
    assert names(w.finish(c, "cancelled", "cancelled")) == [
        "StepFinished",
        "RunTerminal",
        "Drained",
    ]


def test_held_mail_delays_drained_until_it_is_settled():
    w = Work()
    assert w.take_mail()
    a, _, _ = w.start("mail-1", "approve", "wait")
    assert w.drain(0) == [], "the application holds mail"
    assert not w.take_mail(), "no mail is handed out during a drain"
    assert names(w.finish(a, "succeeded", "cancelled")) == ["StepFinished", "RunTerminal"]
    assert names(w.settle_mail()) == ["Drained"]
    assert w.settle_mail() == [], "Drained is sent once"


def test_drained_waits_for_cancel_steps_and_held_mail_in_either_order():
    w = Work()
    assert w.take_mail()
    c, _, _ = w.start("mail-1", "fetch", "cancel")
    assert w.drain(0) == []
    assert names(w.finish(c, "cancelled")) == ["StepFinished"]
    assert names(w.settle_mail()) == ["Drained"]

    w = Work()
    assert w.take_mail()
    c, _, _ = w.start("mail-1", "fetch", "cancel")
    assert w.drain(0) == []
    assert w.settle_mail() == [], "a cancel step is still in flight"
    assert names(w.finish(c, "cancelled")) == ["StepFinished", "Drained"]


def test_mail_settled_before_a_drain_does_not_hold_it_up():
    w = Work()
    assert w.take_mail() and w.take_mail()
    assert w.settle_mail() == [] and w.settle_mail() == []
    assert names(w.drain(0)) == ["Drained"]


def test_close_fires_every_token_and_later_ones_and_stops_mail():
    w = Work()
    _, tok, _ = w.start("r1", "approve", "wait")
    w.close("shutdown", "the supervisor sent Shutdown")
    assert tok.cause == "shutdown"
    assert not w.takes_mail()
    w.close("disconnected", "gone")
    assert tok.cause == "disconnected"
    _, late, _ = w.start("r2", "s", "wait")
    assert late.cause == "disconnected"


def test_a_token_only_escalates():
    w = Work()
    _, tok, _ = w.start("r1", "fetch", "cancel")
    w.drain(0)
    w.cancel("r1", "signed")
    assert (tok.cause, tok.reason) == ("cancel", "signed")
    w.close("shutdown", "later")
    assert tok.cause == "cancel", "never downgrades"


def test_remembers_a_bounded_number_of_cancelled_runs():
    w = Work()
    for i in range(REMEMBERED_CANCELLED_RUNS + 10):
        run = f"r{i}"
        sid, _, _ = w.start(run, "s", "wait")
        w.finish(sid, "succeeded")
        w.cancel(run, "x")
    assert len(w.cancelled_runs) == REMEMBERED_CANCELLED_RUNS


def test_mail_ledger_delivers_once_and_reacks_redeliveries():
    ledger = MailLedger()
    assert ledger.receive(7, True) == (DELIVER, None)
    assert ledger.receive(7, True) == (DUPLICATE, None)
    ledger.ack(7, "succeeded")
    assert ledger.receive(7, True) == (REACK, "succeeded")
    assert ledger.receive(7, False) == (REACK, "succeeded"), "even while draining"
    assert ledger.receive(8, False) == (DECLINED, None)
    assert ledger.receive(8, True) == (DELIVER, None)
    ledger.abandon(8)
    assert ledger.receive(8, True) == (DELIVER, None), "released mail comes again"


def test_mail_ledger_remembers_a_bounded_number_of_acks():
    ledger = MailLedger()
    for i in range(REMEMBERED_ACKS + 5):
        ledger.receive(i, True)
        ledger.ack(i, "succeeded")
    assert len(ledger.acked) == REMEMBERED_ACKS
    assert ledger.receive(0, True) == (DELIVER, None), "the oldest is forgotten"
