"""A person in the loop (docs/protocol.md §4.12): ``mail.ask``, the
answers an item remembers, the give-back of items whose handlers wait when
a drain begins (or the lease runs out, or Shutdown comes), a cancel while
asking, and ``mail.progress``, on both surfaces, in real child processes
against a scripted supervisor side (tests/peer.py); and the bookkeeping of
wfhost.questions on its own."""

from __future__ import annotations

import threading

import pytest

from peer import Peer, child, script
from wfhost import messages as m
from wfhost import questions as q
from wfhost.errors import GivenBack, TooLarge
from wfhost.outcome import Failed

V3 = {"WFHOST_PROTOCOL_MAX": "3"}
CHILDREN = ["wfhost.conformance_child", "wfhost.aio.conformance_child"]
APPROVE = b'{"ask":{"key":"approve","prompt":{"order":"A-17","total":12.5}}}'
STEP_THEN_ASK = (
    b'{"steps":[{"name":"s","drain":"wait","ms":400}],"ask":{"key":"approve","prompt":null}}'
)


@pytest.fixture(params=CHILDREN)
def conformance(request):
    peer = Peer(child(request.param), env=V3)
    yield peer
    peer.kill()


def until(p: Peer, done, timeout: float = 10.0) -> list:
    """Every event up to and including the first for which ``done`` holds."""
    got = []
    while True:
        event = p.recv(timeout)
        assert event is not None, f"the channel closed; so far {got}"
        got.append(event)
        if done(event):
            return got


def ask_of(p: Peer, mail_id: int) -> m.Ask:
    return p.expect(m.Ask, skip=(m.Custom, m.MailStarted, m.StepStarted, m.StepFinished))


def done_of(mail_id: int):
    return lambda e: isinstance(e, m.MailDone) and e.id == mail_id


def shutdown(p: Peer) -> str:
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    return err


# --- asking ----------------------------------------------------------------------


def test_an_item_asks_and_its_answer_is_its_result(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, APPROVE))
    got = until(p, lambda e: isinstance(e, m.Ask))
    assert got == [
        m.MailStarted(1, True),
        m.Custom("conformance.took", b'{"id":"1","attempt":1}'),
        m.Ask(1, "approve", b'{"order":"A-17","total":12.5}'),
    ], got
    assert p.quiet(0.3) == [], "the handler waits for the answer"
    assert p.ping(1) < 5
    p.send(m.Answer(1, "approve", b'{ "approved": true, "note": "ok \xc3\xa9" }'))
    assert until(p, done_of(1)) == [
        m.RunTerminal("mail-1", "succeeded"),
        m.MailDone(1, "succeeded", '{"approved":true,"note":"ok é"}'.encode()),
    ]
    shutdown(p)


def test_an_answer_given_at_once_to_a_redelivered_item(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(4, 2, APPROVE))
    assert ask_of(p, 4) == m.Ask(4, "approve", b'{"order":"A-17","total":12.5}')
    p.send(m.Answer(4, "approve", b"false"))
    assert until(p, done_of(4))[-1] == m.MailDone(4, "succeeded", b"false")
    shutdown(p)


def test_an_answered_key_is_answered_again_without_a_frame_and_keys_are_asked_in_order(
    conformance,
):
    p = conformance
    p.ready(protocol=3)
    p.send(
        m.Mail(
            2,
            1,
            b'{"ask":[{"key":"a","prompt":1},{"key":"b","prompt":[2]},{"key":"a","prompt":3}]}',
        )
    )
    assert ask_of(p, 2) == m.Ask(2, "a", b"1")
    p.send(m.Answer(2, "a", b'"first"'))
    assert p.expect(m.Ask) == m.Ask(2, "b", b"[2]")
    p.send(m.Answer(2, "b", b'"second"'))
    # The third question is the first key again: answered from memory, so
    # the last answer, and the result, is the first one's.
    assert until(p, done_of(2)) == [
        m.RunTerminal("mail-2", "succeeded"),
        m.MailDone(2, "succeeded", b'"first"'),
    ]
    # The item is done: an answer for it now is ignored.
    p.send(m.Answer(2, "a", b'"late"'))
    p.send(m.Answer(99, "x", b"1"))
    assert p.ping(2) < 5
    err = shutdown(p)
    assert "ignored an Answer for mail 2, key 'a': no handler of this child asked it" in err
    assert "ignored an Answer for mail 99, key 'x'" in err


def test_an_answer_for_a_key_not_asked_is_ignored_and_the_item_waits_on(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(3, 1, APPROVE))
    ask_of(p, 3)
    p.send(m.Answer(3, "other", b"true"))
    assert p.quiet(0.3) == []
    p.send(m.Answer(3, "approve", b"true"))
    assert until(p, done_of(3))[-1] == m.MailDone(3, "succeeded", b"true")
    assert "ignored an Answer for mail 3, key 'other'" in shutdown(p)


def test_the_result_of_the_payload_wins_over_the_answer(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(5, 1, b'{"result_hex":"0102","ask":{"key":"k","prompt":{}}}'))
    assert ask_of(p, 5) == m.Ask(5, "k", b"{}")
    p.send(m.Answer(5, "k", b"1"))
    assert until(p, done_of(5))[-1] == m.MailDone(5, "succeeded", b"\x01\x02")
    shutdown(p)


# --- what the library checks -------------------------------------------------------


def test_a_key_too_long_fails_the_item_and_sends_no_ask(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(6, 1, b'{"ask":{"key":"' + b"k" * 300 + b'","prompt":1}}'))
    got = until(p, done_of(6))
    assert not any(isinstance(e, m.Ask) for e in got), got
    reason = "the key of a question is 1 to 256 bytes of UTF-8, not 300; nothing was sent"
    assert got[-2:] == [
        m.RunTerminal("mail-6", Failed(reason)),
        m.MailDone(6, Failed(reason), b""),
    ]
    p.send(m.Mail(7, 1, b'{"ask":{"key":"","prompt":1}}'))
    assert until(p, done_of(7))[-1] == m.MailDone(
        7, Failed("the key of a question is 1 to 256 bytes of UTF-8, not 0; nothing was sent"), b""
    )
    p.send(m.Mail(8, 1, b'{"ask":{"key":"' + "é".encode() * 128 + b'","prompt":1}}'))
    assert ask_of(p, 8) == m.Ask(8, "é" * 128, b"1"), "256 bytes: the longest key"
    shutdown(p)


def test_a_prompt_over_64_kib_fails_the_item_and_sends_no_ask(conformance):
    p = conformance
    p.ready(protocol=3)
    prompt = b'"' + b"p" * 65535 + b'"'  # 65537 bytes of JSON
    p.send(m.Mail(9, 1, b'{"ask":{"key":"k","prompt":' + prompt + b"}}"))
    got = until(p, done_of(9))
    assert not any(isinstance(e, m.Ask) for e in got), got
    assert got[-1] == m.MailDone(
        9,
        Failed(
            "the prompt of question 'k' is 65537 bytes of JSON, over the limit of 65536; "
            "nothing was sent"
        ),
        b"",
    )
    shutdown(p)


# --- progress -------------------------------------------------------------------------


def test_progress_is_sent_in_order_before_the_steps_with_the_exact_bytes(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(
        m.Mail(
            10,
            1,
            b'{"progress":[{"done":1,"of":3},"half",[],null,0.5],"progress_bytes":65536,'
            b'"steps":[{"name":"s","ms":1}]}',
        )
    )
    got = until(p, done_of(10))
    assert got[2:8] == [
        m.Progress(10, b'{"done":1,"of":3}'),
        m.Progress(10, b'"half"'),
        m.Progress(10, b"[]"),
        m.Progress(10, b"null"),
        m.Progress(10, b"0.5"),
        m.Progress(10, b'"' + b"p" * 65534 + b'"'),
    ], got[:8]
    assert got[8] == m.StepStarted("mail-10", "s", "cancel")
    assert got[-1] == m.MailDone(10, "succeeded", b"")
    shutdown(p)


def test_progress_over_64_kib_fails_the_item_and_sends_no_progress(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(11, 1, b'{"progress_bytes":70000,"steps":[{"name":"s","ms":1}]}'))
    got = until(p, done_of(11))
    assert not any(isinstance(e, (m.Progress, m.StepStarted)) for e in got), got
    assert got[-1] == m.MailDone(
        11,
        Failed(
            "mail 11's progress is 70000 bytes of JSON, over the limit of 65536; nothing was sent"
        ),
        b"",
    )
    shutdown(p)


@pytest.mark.parametrize("module", CHILDREN)
def test_under_protocol_2_ask_and_progress_fail_naming_the_version(module):
    p = Peer(child(module))  # a supervisor of version 2
    assert p.ready().protocol == 2
    p.send(m.Mail(1, 1, b'{"progress":[1]}'))
    assert until(p, lambda e: isinstance(e, m.MailAck))[-1] == m.MailAck(
        1,
        Failed(
            "mail.progress() needs protocol 3, and this child speaks protocol 2 with its "
            "supervisor (a supervisor of version 2); nothing was sent"
        ),
    )
    p.send(m.Mail(2, 1, APPROVE))
    got = until(p, lambda e: isinstance(e, m.MailAck))
    assert not any(type(e) in m.SINCE_3 for e in got), got
    assert got[-1] == m.MailAck(
        2,
        Failed(
            "mail.ask() needs protocol 3, and this child speaks protocol 2 with its "
            "supervisor (a supervisor of version 2); nothing was sent"
        ),
    )
    shutdown(p)


# --- give-back ---------------------------------------------------------------------------


def test_a_drain_gives_back_the_items_that_ask_and_waits_for_the_others(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b'{"ask":{"key":"approve","prompt":1}}'))
    p.send(m.Mail(2, 1, b'{"ask":{"key":"approve","prompt":2}}'))
    p.send(m.Mail(3, 1, b'{"steps":[{"name":"short","drain":"wait","ms":500}]}'))
    seen = until(p, lambda e: isinstance(e, m.StepStarted))
    while sum(isinstance(e, m.Ask) for e in seen) < 2:
        seen.append(p.recv())
    p.send(m.Drain(10_000))
    got = until(p, lambda e: isinstance(e, m.Drained))
    assert got[:2] == [m.GiveBack(1, True), m.GiveBack(2, True)], got
    assert got[2:] == [
        m.StepFinished("mail-3", "short", "succeeded"),
        m.RunTerminal("mail-3", "succeeded"),
        m.MailDone(3, "succeeded", b""),
        m.Drained(),
    ], got
    # Forgotten: an answer for them is ignored, nothing more is sent.
    p.send(m.Answer(1, "approve", b"true"))
    assert p.quiet(0.5) == []
    # Delivered again to this child (after the drain), they are not taken.
    p.send(m.Mail(1, 2, b'{"ask":{"key":"approve","prompt":1}}'))
    assert p.quiet(0.3) == []
    err = shutdown(p)
    assert (
        "mail 1 given back to the supervisor (a drain began): its handler waits for an answer"
        in err
    )
    assert "Traceback" not in err, err


def test_drained_follows_at_once_when_every_item_in_hand_was_given_back(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, APPROVE))
    ask_of(p, 1)
    p.send(m.Drain(10_000))
    assert p.quiet(0.5) == [m.GiveBack(1, True), m.Drained()]
    shutdown(p)


def test_an_ask_after_the_drain_began_gives_its_item_back_at_once(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, STEP_THEN_ASK))
    p.expect(m.StepStarted, skip=(m.Custom, m.MailStarted))
    p.send(m.Drain(10_000))
    got = until(p, lambda e: isinstance(e, m.Drained))
    assert got == [
        m.StepFinished("mail-1", "s", "succeeded"),
        m.GiveBack(1, True),
        m.Drained(),
    ], "the wait step runs to its end, then the ask gives the item back: no Ask, no MailDone"
    assert "(it asked 'approve' after the drain began)" in shutdown(p)


def test_a_lease_that_runs_out_gives_back_the_items_that_ask(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, APPROVE))
    ask_of(p, 1)
    p.send(m.Lease(300))
    assert until(p, lambda e: isinstance(e, m.Drained), timeout=5) == [
        m.GiveBack(1, True),
        m.Drained(),
    ]
    assert "mail 1 given back to the supervisor (the lease ran out)" in shutdown(p)


def test_shutdown_gives_back_the_items_that_ask(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, APPROVE))
    ask_of(p, 1)
    p.send(m.Shutdown())
    assert p.recv() == m.GiveBack(1, True)
    code, _, err = p.finish()
    assert code == 0, err
    assert "(the supervisor sent Shutdown)" in err


# --- cancel while asking -------------------------------------------------------------------


def test_a_cancel_while_asking_is_acknowledged_and_ends_the_item_cancelled(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, APPROVE))
    ask_of(p, 1)
    p.send(p.mail_cancel(1, "no longer needed"))
    assert until(p, done_of(1)) == [
        m.MailCancelVerdict(1, m.ACKNOWLEDGED),
        m.RunTerminal("mail-1", "cancelled"),
        m.MailDone(1, "cancelled", b""),
    ]
    # The answer that comes later is for an item no longer held.
    p.send(m.Answer(1, "approve", b"true"))
    assert p.ping(3) < 5
    shutdown(p)


def test_a_handler_that_cannot_be_cancelled_asks_on(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b'{"cancellable":false,"ask":{"key":"k","prompt":1}}'))
    ask_of(p, 1)
    p.send(p.mail_cancel(1))
    assert p.expect(m.MailCancelVerdict) == m.MailCancelVerdict(1, m.NOT_SUPPORTED)
    p.send(m.Answer(1, "k", b"2"))
    assert until(p, done_of(1))[-1] == m.MailDone(1, "succeeded", b"2")
    shutdown(p)


# --- handlers of their own ------------------------------------------------------------------

SHARED = r"""
import sys, threading, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    got = []
    def ask():
        got.append(mail.ask("approve", {"who": "second"}))
    other = threading.Thread(target=ask)
    other.start()
    got.append(mail.ask("approve", {"who": "first"}))
    other.join()
    mail.progress({"answers": len(got)})
    again = mail.ask("approve", "never sent")
    return {"same": got[0] == got[1] == again, "answer": again}

rt.serve(handle, workers=2)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

SHARED_AIO = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()

    async def handle(mail):
        first, second = await asyncio.gather(
            mail.ask("approve", {"who": "first"}), mail.ask("approve", {"who": "second"})
        )
        await mail.progress({"answers": 2})
        again = await mail.ask("approve", "never sent")
        return {"same": first == second == again, "answer": again}

    await rt.serve(handle, workers=2)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("app", [SHARED, SHARED_AIO], ids=["blocking", "asyncio"])
def test_several_asks_of_one_key_share_one_question_and_its_one_answer(app):
    p = Peer(script(app), env=V3)
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    ask = p.expect(m.Ask, skip=(m.MailStarted,))
    assert ask.id == 1 and ask.key == "approve"
    assert p.quiet(0.4) == [], "one Ask for both"
    p.send(m.Answer(1, "approve", b'{"approved":true}'))
    assert p.quiet(0.5) == [
        m.Progress(1, b'{"answers":2}'),
        m.MailDone(1, "succeeded", b'{"same":true,"answer":{"approved":true}}'),
    ]
    shutdown(p)


GIVEN_BACK = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    try:
        with rt.step(f"mail-{mail.id}", "approve", "wait"):
            mail.ask("approve", None)
    except wfhost.GivenBack as e:
        print(f"given back: id={e.id} key={e.key} given_back={mail.given_back}", file=sys.stderr)
        try:
            mail.progress("after")
        except wfhost.GivenBack:
            print("progress refused", file=sys.stderr)
        if mail.id == 1:
            mail.ack("succeeded", b"discarded")
            return b"discarded too"
        raise ValueError("discarded as well")
    return b"not reached"

rt.serve(handle, workers=2)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

GIVEN_BACK_AIO = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()

    async def handle(mail):
        try:
            async with rt.step(f"mail-{mail.id}", "approve", "wait"):
                await mail.ask("approve", None)
        except wfhost.GivenBack as e:
            print(f"given back: id={e.id} key={e.key} given_back={mail.given_back}", file=sys.stderr)
            try:
                await mail.progress("after")
            except wfhost.GivenBack:
                print("progress refused", file=sys.stderr)
            if mail.id == 1:
                await mail.ack("succeeded", b"discarded")
                return b"discarded too"
            raise ValueError("discarded as well")
        return b"not reached"

    await rt.serve(handle, workers=2)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("app", [GIVEN_BACK, GIVEN_BACK_AIO], ids=["blocking", "asyncio"])
def test_what_a_given_back_handler_does_next_is_discarded_and_its_step_ends_cancelled(app):
    p = Peer(script(app), env=V3)
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    p.send(m.Mail(2, 1, b""))
    seen = []
    while sum(isinstance(e, m.Ask) for e in seen) < 2:
        seen.append(p.recv())
    p.send(m.Drain(10_000))
    got = p.quiet(0.6)
    # A wait step does not hold the drain: Drained follows the give-backs.
    assert got[:3] == [m.GiveBack(1, True), m.GiveBack(2, True), m.Drained()], got
    assert sorted(got[3:], key=repr) == [
        m.StepFinished("mail-1", "approve", "cancelled"),
        m.StepFinished("mail-2", "approve", "cancelled"),
    ], "no Progress, no MailDone"
    err = shutdown(p)
    assert "given back: id=1 key=approve given_back=True" in err
    assert err.count("progress refused") == 2, err
    assert "mail 1 was given back; its ack is discarded" in err
    assert "Traceback" not in err and "ends Failed" not in err, err


ITERATOR = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()
for mail in rt.mail():
    try:
        mail.ack("succeeded", {"answer": mail.ask("k", mail.id)})
    except wfhost.Cancelled as e:
        print(f"cancelled: {e.cause}", file=sys.stderr)
        mail.ack("cancelled")
    except wfhost.GivenBack:
        print("given back", file=sys.stderr)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

ITERATOR_AIO = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()
    async for mail in rt.mail():
        try:
            await mail.ack("succeeded", {"answer": await mail.ask("k", mail.id)})
        except wfhost.Cancelled as e:
            print(f"cancelled: {e.cause}", file=sys.stderr)
            await mail.ack("cancelled")
        except wfhost.GivenBack:
            print("given back", file=sys.stderr)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("app", [ITERATOR, ITERATOR_AIO], ids=["blocking", "asyncio"])
def test_with_the_iterator_a_cancel_makes_ask_raise_cancelled_and_a_drain_gives_back(app):
    p = Peer(script(app), env=V3)
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    assert p.expect(m.Ask, skip=(m.MailStarted,)) == m.Ask(1, "k", b"1")
    p.send(m.Answer(1, "k", b"true"))
    assert p.expect(m.MailDone) == m.MailDone(1, "succeeded", b'{"answer":true}')
    p.send(m.Mail(2, 1, b""))
    assert p.expect(m.Ask, skip=(m.MailStarted,)) == m.Ask(2, "k", b"2")
    p.send(p.mail_cancel(2))
    assert p.quiet(0.5) == [
        m.MailCancelVerdict(2, m.ACKNOWLEDGED),
        m.MailDone(2, "cancelled", b""),
    ]
    p.send(m.Mail(3, 1, b""))
    assert p.expect(m.Ask, skip=(m.MailStarted,)) == m.Ask(3, "k", b"3")
    p.send(m.Drain(1000))
    assert p.quiet(0.5) == [m.GiveBack(3, True), m.Drained()]
    err = shutdown(p)
    assert "cancelled: cancel" in err and "given back" in err, err


TIMEOUT_AIO = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()

    async def handle(mail):
        try:
            await asyncio.wait_for(mail.ask("k", 1), 0.2)
        except TimeoutError:
            print("timed out", file=sys.stderr)
        await mail.progress("waiting")
        await rt.draining.wait()          # not in ask: the drain waits for this item
        await asyncio.sleep(0.3)
        return {"answer": await mail.ask("k", 1)}   # answered meanwhile: remembered

    await rt.serve(handle)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""

TIMEOUT = r"""
import sys, threading, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    # A thread of its own asks and never gets its answer before the drain.
    threading.Thread(target=lambda: print("other:", mail.ask("k", 1), file=sys.stderr), daemon=True).start()
    rt.draining.wait()
    return "not given back"

rt.serve(handle)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


def test_an_ask_that_stopped_waiting_does_not_give_its_item_back_and_its_answer_is_kept():
    p = Peer(script(TIMEOUT_AIO), env=V3)
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    assert p.expect(m.Ask, skip=(m.MailStarted,)) == m.Ask(1, "k", b"1")
    assert p.expect(m.Progress) == m.Progress(1, b'"waiting"')
    p.send(m.Answer(1, "k", b'"kept"'))
    p.send(m.Drain(1000))
    assert p.quiet(0.8) == [m.MailDone(1, "succeeded", b'{"answer":"kept"}'), m.Drained()]
    assert "timed out" in shutdown(p)


def test_an_item_whose_other_thread_asks_is_given_back_whatever_the_handler_returns():
    p = Peer(script(TIMEOUT), env=V3)
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    assert p.expect(m.Ask, skip=(m.MailStarted,)) == m.Ask(1, "k", b"1")
    p.send(m.Drain(1000))
    assert p.quiet(0.5) == [m.GiveBack(1, True), m.Drained()]
    shutdown(p)


# --- the bookkeeping on its own ---------------------------------------------------------------


def test_keys_and_json_are_checked_before_anything_is_sent():
    assert q.check_key("k") == "k" and q.check_key("é" * 128) == "é" * 128
    for bad, kind in (
        ("", ValueError),
        ("x" * 257, ValueError),
        (b"k", TypeError),
        (None, TypeError),
    ):
        with pytest.raises(kind):
            q.check_key(bad)
    with pytest.raises(ValueError, match="must be UTF-8"):
        q.check_key("\ud800")
    assert q.json_bytes("p", {"a": [1, "é", None]}) == '{"a":[1,"é",null]}'.encode()
    assert q.json_bytes("p", "p" * 65534) == b'"' + b"p" * 65534 + b'"'
    with pytest.raises(TooLarge, match="65537 bytes of JSON, over the limit of 65536"):
        q.json_bytes("p", "p" * 65535)
    for bad in ({1, 2}, float("nan"), object(), b"bytes"):
        with pytest.raises(TypeError, match="must be a JSON value"):
            q.json_bytes("the prompt", bad)


def test_questions_share_one_ask_per_key_remember_answers_and_fail_waiters():
    qs = q.Questions()
    first, second, other = q.Waiter(), q.Waiter(), q.Waiter()
    assert qs.wait("a", first) is True, "the first ask of a key sends the Ask"
    assert qs.wait("a", second) is False, "the second shares it"
    assert qs.wait("b", other) is True and qs.asking()
    assert qs.answer("nope", b"1") is False, "a key not asked is ignored"
    assert qs.answer("a", b'{"x":1}') is True
    assert first.done and second.done and first.result() == {"x": 1} == second.result()
    assert first.result() is not second.result(), "each waiter parses its own copy"
    assert qs.answers == {"a": b'{"x":1}'} and qs.answer("a", b"2") is True
    assert qs.answers["a"] == b'{"x":1}', "the first answer stays"
    qs.forget("b", other)
    assert not qs.asking() and "b" in qs.open, "the question stays open"
    assert qs.wait("b", other) is False, "an open question is not asked again"
    qs.fail_all(lambda key: GivenBack(1, key, f"given back {key}"))
    with pytest.raises(GivenBack, match="given back b"):
        other.result()
    assert not qs.asking()


def test_an_item_asks_at_most_64_distinct_questions():
    qs = q.Questions()
    for i in range(64):
        qs.check_room(str(i), 7)
        qs.wait(str(i), q.Waiter())
    qs.check_room("0", 7)  # asked already: no new question
    with pytest.raises(ValueError, match="mail 7 already asked 64 distinct questions"):
        qs.check_room("64", 7)


def test_a_waiter_notifies_once_when_settled():
    calls = []
    w = q.Waiter(lambda: calls.append(1))
    w.resolve(b"1")
    w.fail(RuntimeError("late"))
    w.resolve(b"2")
    assert calls == [1] and w.result() == 1

    done = threading.Event()
    w = q.Waiter(done.set)
    w.fail(GivenBack(1, "k", "back"))
    assert done.is_set() and w.error is not None
