"""examples/python-orders approved by a person (``--approval ask``, or
``"approval": "ask"`` in a payload) against a scripted supervisor side
(tests/peer.py): the question and its prompt, an approval and a rejection
in the result, a drain that gives the order back and the next child that
finishes it from its marker and the stored answer, a cancel while asking,
an answer that is neither yes nor no; and the timer mode as it was. The
example under the real supervisor is tests/tests/python_sdk.rs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peer import PYTHON, Peer
from wfhost import messages as m
from wfhost.outcome import Failed

ORDERS = Path(__file__).resolve().parents[3] / "examples" / "python-orders" / "orders.py"
V3 = {"WFHOST_PROTOCOL_MAX": "3"}
RESULT_KEYS = ["attempt", "mail", "order", "stopped", "status", "steps"]
STEP_KEYS = ["at", "attempt", "finalized", "ms", "pid", "rounds", "sha256", "step"]


@pytest.fixture
def markers(tmp_path):
    return tmp_path / "markers"


def orders(markers: Path, *flags: str) -> Peer:
    p = Peer(
        [PYTHON, str(ORDERS), "--fetch-ms", "10", "--approve-ms", "10", *flags],
        env={**V3, "ORDERS_MARKERS": str(markers)},
    )
    p.ready(protocol=3)
    return p


def until(p: Peer, kind: type, mail_id: int, timeout: float = 10.0) -> list:
    got = []
    while True:
        event = p.recv(timeout)
        assert event is not None, f"the channel closed; so far {got}"
        got.append(event)
        if isinstance(event, kind) and getattr(event, "id", None) == mail_id:
            return got


def result_of(done: m.MailDone) -> dict:
    doc = json.loads(done.result)
    assert sorted(doc) == sorted(RESULT_KEYS + (["approval"] if "approval" in doc else []))
    for step in doc["steps"]:
        assert sorted(step) == STEP_KEYS, step
    return doc


def stop(p: Peer) -> str:
    p.send(m.Shutdown())
    code, out, err = p.finish()
    assert code == 0, err
    return out


def test_an_order_approved_by_a_person_goes_on_and_says_so_in_its_result(markers):
    p = orders(markers, "--approval", "ask")
    p.send(m.Mail(1, 1, b'{"order": "A-17"}'))
    got = until(p, m.Ask, 1)
    assert [type(e) for e in got] == [m.MailStarted, m.StepStarted, m.StepFinished, m.Ask], got
    assert got[2] == m.StepFinished("order-1", "fetch", "succeeded")
    prompt = json.loads(got[-1].prompt)
    assert got[-1].key == "approve"
    assert prompt["order"] == "A-17" and prompt["mail"] == 1
    assert (
        sorted(prompt["fetched"]) == ["ms", "sha256"]
        and "approve order A-17?" in prompt["question"]
    )
    assert p.quiet(0.3) == [], "it waits for the answer"
    p.send(m.Answer(1, "approve", b'{"approved": true, "note": "looks fine"}'))
    got = until(p, m.MailDone, 1)
    assert got[0] == m.RunTerminal("order-1", "succeeded")
    assert got[-1].outcome == "succeeded"
    doc = result_of(got[-1])
    assert doc["status"] == "approved" and doc["stopped"] is None
    assert doc["approval"] == {"approved": True, "note": "looks fine"}
    assert [s["step"] for s in doc["steps"]] == ["fetch", "approve"]
    assert not (markers / "1.approve").exists(), "the answer is the supervisor's record"
    out = stop(p)
    assert "mail 1: asking for approval (wfhost answer 1 approve '{\"approved\":true}')" in out
    assert "mail 1: approved by a person (looks fine)" in out


def test_an_order_a_person_rejects_ends_rejected_with_the_note(markers):
    p = orders(markers)  # timer by default; the payload asks
    p.send(m.Mail(2, 1, b'{"order": "B-2", "approval": "ask"}'))
    until(p, m.Ask, 2)
    p.send(m.Answer(2, "approve", b'{"approved": false, "note": "over budget"}'))
    done = until(p, m.MailDone, 2)[-1]
    assert done.outcome == "succeeded", "a decision: the order is done"
    doc = result_of(done)
    assert doc["status"] == "rejected"
    assert doc["approval"] == {"approved": False, "note": "over budget"}
    assert [s["step"] for s in doc["steps"]] == ["fetch", "approve"]
    assert "mail 2: order B-2 rejected (attempt 1)" in stop(p)


def test_a_drain_gives_the_order_back_and_the_next_child_finishes_it(markers):
    first = orders(markers, "--approval", "ask")
    first.send(m.Mail(3, 1, b'{"order": "C-3"}'))
    until(first, m.Ask, 3)
    first.send(m.Drain(5000))
    assert first.quiet(0.5) == [m.GiveBack(3, True), m.Drained()]
    out = stop(first)
    assert "mail 3: given back while it waits for approval" in out

    # Its next attempt, once answered: fetch finalized, the answer at once.
    second = orders(markers, "--approval", "ask")
    second.send(m.Mail(3, 2, b'{"order": "C-3"}'))
    got = until(second, m.Ask, 3)
    assert not any(isinstance(e, m.StepStarted) for e in got), "fetch is not run again"
    second.send(m.Answer(3, "approve", b'{"approved": true}'))
    doc = result_of(until(second, m.MailDone, 3)[-1])
    assert doc["status"] == "approved" and doc["attempt"] == 2
    assert doc["approval"] == {"approved": True, "note": None}
    fetch, approve = doc["steps"]
    assert fetch["finalized"] is True and fetch["attempt"] == 1
    assert approve["finalized"] is False and approve["attempt"] == 2
    stop(second)


def test_a_cancel_while_asking_ends_the_order_cancelled_at_its_approval(markers):
    p = orders(markers, "--approval", "ask")
    p.send(m.Mail(4, 1, b'{"order": "D-4"}'))
    until(p, m.Ask, 4)
    p.send(p.mail_cancel(4, "customer left"))
    got = until(p, m.MailDone, 4)
    assert got[0] == m.MailCancelVerdict(4, m.ACKNOWLEDGED)
    assert got[-1].outcome == "cancelled"
    doc = result_of(got[-1])
    assert doc["status"] == "cancelled" and doc["stopped"]["step"] == "approve"
    assert "customer left" in doc["stopped"]["reason"]
    stop(p)


def test_an_answer_that_is_neither_yes_nor_no_fails_the_order(markers):
    p = orders(markers, "--approval", "ask")
    p.send(m.Mail(5, 1, b'{"order": "E-5"}'))
    until(p, m.Ask, 5)
    p.send(m.Answer(5, "approve", b'"yes"'))
    done = until(p, m.MailDone, 5)[-1]
    assert isinstance(done.outcome, Failed) and "is not {" in done.outcome.reason
    doc = result_of(done)
    assert doc["status"] == "failed" and doc["stopped"]["step"] == "approve"
    stop(p)


def test_the_timer_mode_is_as_it_was(markers):
    p = orders(markers)
    p.send(m.Mail(6, 1, b'{"order": "F-6"}'))
    got = until(p, m.MailDone, 6)
    assert not any(isinstance(e, m.Ask) for e in got), got
    doc = result_of(got[-1])
    assert sorted(doc) == sorted(RESULT_KEYS), "no approval key"
    assert doc["status"] == "approved" and [s["step"] for s in doc["steps"]] == ["fetch", "approve"]
    assert (markers / "6.approve").exists()
    stop(p)
