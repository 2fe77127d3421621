"""Protocol 3 in real child processes against a scripted supervisor side
(tests/peer.py): the version a child speaks, an item started and done with
its result, the cancel of one item and its verdicts, and what a handler's
return or raise makes of its item, on both surfaces. The conformance kit's
version-3 scenarios check the same against the kit; these also cover what
it does not script (an item cancelled before it started, an Answer nobody
asked for, a version-3 message to a child of version 2, the iterator);
tests/test_questions.py covers asking, progress and give-back."""

from __future__ import annotations

import time

import pytest

from peer import Peer, child, script
from wfhost import cancel
from wfhost import messages as m
from wfhost.env import ChildEnv, negotiate
from wfhost.errors import ConnectError
from wfhost.outcome import Failed

V3 = {"WFHOST_PROTOCOL_MAX": "3"}
CHILDREN = ["wfhost.conformance_child", "wfhost.aio.conformance_child"]
LONG = b'{"steps":[{"name":"fetch","drain":"cancel","ms":5000}]}'


def v3(argv: list[str]) -> Peer:
    return Peer(argv, env=V3)


@pytest.fixture(params=CHILDREN)
def conformance(request):
    peer = v3(child(request.param))
    yield peer
    peer.kill()


def item_events(p: Peer, mail_id: int, until: type = m.MailDone, timeout: float = 10.0) -> list:
    """Every event up to and including ``until`` for ``mail_id``."""
    got = []
    while True:
        event = p.recv(timeout)
        assert event is not None, f"the channel closed; so far {got}"
        got.append(event)
        if isinstance(event, until) and getattr(event, "id", None) == mail_id:
            return got


# --- which version ------------------------------------------------------------


def env(**kw) -> dict:
    base = {
        "WFHOST_CONTROL_FD": "3",
        "WFHOST_CHANNEL_ID": "0" * 32,
        "WFHOST_PROTOCOL": "2",
        "WFHOST_DEPLOYMENT": "billing",
        "WFHOST_SUPERVISOR_KEY": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    }
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    "oldest, newest, speaks",
    [("2", None, 2), ("2", "2", 2), ("2", "3", 3), ("2", "9", 3), ("3", "3", 3), ("3", None, 3)],
)
def test_the_child_speaks_the_newest_version_both_sides_know(oldest, newest, speaks):
    got = ChildEnv.from_environ(env(WFHOST_PROTOCOL=oldest, WFHOST_PROTOCOL_MAX=newest))
    assert got.protocol == speaks


@pytest.mark.parametrize(
    "oldest, newest", [("4", None), ("4", "6"), ("1", None), ("3", "2"), ("1", "1")]
)
def test_no_shared_version_is_refused_naming_both_variables(oldest, newest):
    with pytest.raises(ConnectError) as e:
        ChildEnv.from_environ(env(WFHOST_PROTOCOL=oldest, WFHOST_PROTOCOL_MAX=newest))
    text = str(e.value)
    assert "WFHOST_PROTOCOL=" in text and "WFHOST_PROTOCOL_MAX" in text, text
    assert "this SDK speaks 2 to 3" in text, text


def test_an_unreadable_maximum_is_refused_naming_it():
    with pytest.raises(ConnectError) as e:
        ChildEnv.from_environ(env(WFHOST_PROTOCOL_MAX="three"))
    assert "WFHOST_PROTOCOL_MAX='three' is unusable" in str(e.value)


def test_negotiate():
    assert negotiate(2, 3) == 3 and negotiate(2, 2) == 2 and negotiate(4, 5) is None


def test_hello_says_3_under_a_supervisor_of_version_3(conformance):
    hello = conformance.ready(protocol=3)
    assert hello.protocol == 3 and hello.takes_mail
    assert conformance.ping(1) < 5


@pytest.mark.parametrize("module", CHILDREN)
def test_a_welcome_of_version_2_after_a_hello_of_3_is_refused(module):
    p = v3(child(module))
    hello = p.handshake(protocol=2)
    assert hello.protocol == 3
    assert p.recv() is None, "no Ready"
    code, _, err = p.finish()
    assert code != 0
    assert "Welcome speaks protocol 2 but this child's Hello said 3" in err, err


# --- an item started and done ---------------------------------------------------


def test_an_item_is_started_first_and_done_with_its_result(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(
        m.Mail(
            7,
            1,
            b'{"custom":{"kind":"k","hex":"01"},"result_hex":"00ff800a","steps":[{"name":"s","ms":1}]}',
        )
    )
    got = item_events(p, 7)
    assert got[0] == m.MailStarted(7, True), got
    assert got[1:] == [
        m.Custom("conformance.took", b'{"id":"7","attempt":1}'),
        m.Custom("k", b"\x01"),
        m.StepStarted("mail-7", "s", "cancel"),
        m.StepFinished("mail-7", "s", "succeeded"),
        m.RunTerminal("mail-7", "succeeded"),
        m.MailDone(7, "succeeded", bytes.fromhex("00ff800a")),
    ], got
    # Delivered again after its MailDone: done again, not run again.
    p.send(m.Mail(7, 2, b"{}"))
    assert p.quiet(0.3) == [m.MailDone(7, "succeeded", b"")]
    p.send(m.Mail(8, 1, b'{"fail":"no stock"}'))
    assert item_events(p, 8)[-1] == m.MailDone(8, Failed("no stock"), b"")
    p.send(m.Mail(8, 1, b"{}"))
    assert p.quiet(0.3) == [m.MailDone(8, Failed("no stock"), b"")]
    p.send(m.Shutdown())
    assert p.finish()[0] == 0


def test_a_result_too_large_for_a_frame_fails_the_item_and_the_child_goes_on(conformance):
    p = conformance
    p.ready(protocol=3, limits=m.Limits(65536, 4096, 1000, 30_000))
    p.send(m.Mail(1, 1, b'{"result_size":100000}'))
    done = item_events(p, 1)[-1]
    assert done == m.MailDone(
        1,
        Failed("result of 100000 bytes does not fit in a frame of max_frame_bytes 65536"),
        b"",
    )
    p.send(m.Mail(2, 1, b'{"result_size":1000}'))
    assert item_events(p, 2)[-1] == m.MailDone(2, "succeeded", b"r" * 1000)
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0
    assert "mail 1: result of 100000 bytes does not fit in a frame of max_frame_bytes 65536" in err


# --- a cancel of one item --------------------------------------------------------


def test_a_cancel_of_one_item_cancels_it_and_not_its_neighbour(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b'{"run":"r1","steps":[{"name":"fetch","drain":"wait","ms":5000}]}'))
    p.send(m.Mail(2, 1, b'{"run":"r2","steps":[{"name":"fetch","drain":"cancel","ms":600}]}'))
    seen = []
    while len([e for e in seen if isinstance(e, m.StepStarted)]) < 2:
        seen.append(p.recv())
    sent = time.monotonic()
    p.send(p.mail_cancel(1, "wrong address"))
    verdict = p.expect(m.MailCancelVerdict, skip=(m.Custom, m.StepStarted))
    assert verdict == m.MailCancelVerdict(1, m.ACKNOWLEDGED)
    assert time.monotonic() - sent < 1.0
    rest = []
    while not any(isinstance(e, m.MailDone) and e.id == 2 for e in rest):
        rest.append(p.recv())
    ones = [e for e in rest if getattr(e, "run", None) == "r1" or getattr(e, "id", None) == 1]
    assert ones == [
        m.StepFinished("r1", "fetch", "cancelled"),
        m.RunTerminal("r1", "cancelled"),
        m.MailDone(1, "cancelled", b""),
    ], rest
    assert rest[-1] == m.MailDone(2, "succeeded", b""), "the other item goes on"
    assert m.StepFinished("r2", "fetch", "succeeded") in rest
    # The item is done: a second cancel of it is refused, naming it.
    p.send(p.mail_cancel(1))
    refused = p.expect(m.MailCancelVerdict)
    assert refused == m.MailCancelVerdict(
        1, m.Refused("cancel is for mail item 1, which this child does not hold")
    )
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0
    assert "cancel of mail 1 accepted (origin operator, reason 'wrong address')" in err


def test_a_handler_that_cannot_be_cancelled_says_so_and_runs_to_its_end(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(3, 1, b'{"cancellable":false,"steps":[{"name":"s","ms":300}]}'))
    assert p.expect(m.MailStarted, skip=()) == m.MailStarted(3, False)
    p.expect(m.StepStarted)
    p.send(p.mail_cancel(3))
    assert p.expect(m.MailCancelVerdict) == m.MailCancelVerdict(3, m.NOT_SUPPORTED)
    rest = item_events(p, 3)
    assert rest == [
        m.StepFinished("mail-3", "s", "succeeded"),
        m.RunTerminal("mail-3", "succeeded"),
        m.MailDone(3, "succeeded", b""),
    ], rest


def test_a_cancel_of_an_item_not_held_or_forged_is_refused_and_changes_nothing(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Mail(4, 1, b'{"steps":[{"name":"s","ms":400}]}'))
    p.expect(m.StepStarted, skip=(m.Custom, m.MailStarted))
    p.send(p.mail_cancel(9))
    assert p.expect(m.MailCancelVerdict) == m.MailCancelVerdict(
        9, m.Refused("cancel is for mail item 9, which this child does not hold")
    )
    forged = p.mail_cancel(4)
    sig = bytearray(forged.cancel.signature)
    sig[5] ^= 1
    p.send(
        m.CancelMail(type(forged.cancel)(forged.cancel.record, forged.cancel.key_id, bytes(sig)))
    )
    assert p.expect(m.MailCancelVerdict) == m.MailCancelVerdict(
        4, m.Refused("signature does not verify")
    )
    record = cancel.MailCancelRequested("operator", "payroll", 4, "x", 1)
    signed = cancel.SignedMailCancel(
        record, p.key_id, p.key.sign(cancel.mail_signing_bytes(record))
    )
    p.send(m.CancelMail(signed))
    assert p.expect(m.MailCancelVerdict) == m.MailCancelVerdict(
        4, m.Refused("cancel is for deployment 'payroll', this is 'billing'")
    )
    assert item_events(p, 4)[-1] == m.MailDone(4, "succeeded", b"")
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0
    assert (
        "refused cancel of mail 4 for deployment 'billing' (origin operator): signature does not verify"
        in err
    )


SERVE_ONE = r"""
import sys, time, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    with rt.step(f"mail-{mail.id}", "s", "wait") as step:
        step.cancelled.wait(0.6)
    return "done"

rt.serve(handle)
print("served", file=sys.stderr)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

SERVE_ONE_AIO = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()

    async def handle(mail):
        async with rt.step(f"mail-{mail.id}", "s", "wait"):
            await asyncio.sleep(0.6)
        return "done"

    await rt.serve(handle)
    print("served", file=sys.stderr)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("app", [SERVE_ONE, SERVE_ONE_AIO], ids=["blocking", "asyncio"])
def test_an_item_not_started_yet_ends_cancelled_at_once_and_a_drain_leaves_the_rest(app):
    p = v3(script(app))
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    p.send(m.Mail(2, 1, b""))
    p.send(m.Mail(3, 1, b""))
    assert p.expect(m.MailStarted, skip=()) == m.MailStarted(1, True)
    p.expect(m.StepStarted, skip=())
    p.send(p.mail_cancel(2))
    assert p.quiet(0.2) == [
        m.MailCancelVerdict(2, m.ACKNOWLEDGED),
        m.MailDone(2, "cancelled", b""),
    ], "acknowledged, and done at once without a start"
    p.send(m.Drain(1000))
    got = p.quiet(1.0)
    assert got == [
        m.StepFinished("mail-1", "s", "succeeded"),
        m.MailDone(1, "succeeded", b"done"),
        m.Drained(),
    ], "item 3 was never started: neither started nor done"
    p.send(m.Mail(2, 1, b""))
    assert p.quiet(0.3) == [m.MailDone(2, "cancelled", b"")], "done again on redelivery"
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert "served" in err and "closed: shutdown" in err
    assert "not starting mail" in err or "not taking queued mail [3]" in err, err


RETURNS = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    kind = mail.text()
    if kind == "bytes": return b"\x00\xff"
    if kind == "bytearray": return bytearray(b"ba")
    if kind == "memoryview": return memoryview(b"mv")
    if kind == "str": return "grüße"
    if kind == "none": return None
    if kind == "dict": return {"total": 42, "currency": "€", "items": [1, 2.5, True, None]}
    if kind == "list": return [1, "two"]
    if kind == "int": return 7
    if kind == "failed": return wfhost.Failed("declined")
    if kind == "raise": raise ValueError("upstream said 503")
    if kind == "cancelled": raise wfhost.Cancelled("cancel", "gave up")
    if kind == "set": return {1, 2}
    if kind == "self-ack":
        mail.ack(wfhost.Failed("mine"), b"own")
        return b"ignored"
    raise AssertionError(kind)

rt.serve(handle, workers=2)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

RETURNS_AIO = (
    "import asyncio, wfhost.aio\n"
    + RETURNS.replace("rt = wfhost.connect()\nrt.ready()\n", "")
    .replace("def handle(mail):", "async def handle(mail):")
    .replace("mail.ack(", "await mail.ack(")
    .replace("rt.serve(handle, workers=2)\n", "")
    .replace('print("closed:", rt.wait_closed().kind, file=sys.stderr)\n', "")
    + r"""
async def main():
    global rt
    rt = await wfhost.aio.connect()
    await rt.ready()
    await rt.serve(handle, workers=2)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""
)

EXPECTED = [
    ("bytes", "succeeded", b"\x00\xff"),
    ("bytearray", "succeeded", b"ba"),
    ("memoryview", "succeeded", b"mv"),
    ("str", "succeeded", "grüße".encode()),
    ("none", "succeeded", b""),
    ("dict", "succeeded", '{"total":42,"currency":"€","items":[1,2.5,true,null]}'.encode()),
    ("list", "succeeded", b'[1,"two"]'),
    ("int", "succeeded", b"7"),
    ("failed", Failed("declined"), b""),
    ("raise", Failed("upstream said 503"), b""),
    ("cancelled", "cancelled", b""),
    ("set", None, b""),
    ("self-ack", Failed("mine"), b"own"),
]


@pytest.mark.parametrize("app", [RETURNS, RETURNS_AIO], ids=["blocking", "asyncio"])
def test_what_a_handler_returns_or_raises_is_how_its_item_ends(app):
    p = v3(script(app))
    p.ready(protocol=3)
    for i, (kind, _, _) in enumerate(EXPECTED, start=1):
        p.send(m.Mail(i, 1, kind.encode()))
        got = item_events(p, i)
        assert got[0] == m.MailStarted(i, True), got
        done = got[-1]
        want_outcome, want_result = EXPECTED[i - 1][1], EXPECTED[i - 1][2]
        if want_outcome is None:
            assert isinstance(done.outcome, Failed) and "json cannot encode" in done.outcome.reason
        else:
            assert done == m.MailDone(i, want_outcome, want_result), (kind, done)
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert "the handler raised ValueError: upstream said 503; it ends Failed" in err
    assert "Traceback" in err and "closed: shutdown" in err


ASYNC_OUTSIDE_A_STEP = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()

    async def handle(mail):
        try:
            await asyncio.sleep(30)          # not in a step: the task itself is cancelled
        except asyncio.CancelledError:
            print(f"cancelled: {mail.cancelled.is_set()} {mail.cancel_reason}", file=sys.stderr)
            raise
        return "late"

    await rt.serve(handle, workers=4)
    print("task cancelling after:", asyncio.current_task().cancelling(), file=sys.stderr)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""

BLOCKING_OUTSIDE_A_STEP = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()

def handle(mail):
    if mail.cancelled.wait(30):
        print(f"cancelled: True {mail.cancel_reason}", file=sys.stderr)
        mail.check()
    return "late"

rt.serve(handle, workers=4)
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "app", [BLOCKING_OUTSIDE_A_STEP, ASYNC_OUTSIDE_A_STEP], ids=["blocking", "asyncio"]
)
def test_a_handler_between_steps_learns_of_its_items_cancel(app):
    p = v3(script(app))
    p.ready(protocol=3)
    p.send(m.Mail(1, 1, b""))
    p.send(m.Mail(2, 1, b""))
    assert p.expect(m.MailStarted, skip=()) == m.MailStarted(1, True)
    assert p.expect(m.MailStarted, skip=()) == m.MailStarted(2, True)
    p.send(p.mail_cancel(2, "changed my mind"))
    assert p.quiet(0.5) == [
        m.MailCancelVerdict(2, m.ACKNOWLEDGED),
        m.MailDone(2, "cancelled", b""),
    ]
    p.send(m.Drain(1000))
    p.send(p.mail_cancel(1))
    assert p.quiet(0.5) == [
        m.MailCancelVerdict(1, m.ACKNOWLEDGED),
        m.MailDone(1, "cancelled", b""),
        m.Drained(),
    ]
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert (
        "cancelled: True cancelled by a verified operator cancel of mail 2: changed my mind" in err
    )
    assert "closed: shutdown" in err
    if app is ASYNC_OUTSIDE_A_STEP:
        assert "task cancelling after: 0" in err


ITERATOR = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()
for mail in rt.mail(cancellable=False):
    mail.ack("succeeded", {"id": mail.id})
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


def test_the_iterator_starts_an_item_as_it_hands_it_out_and_ack_carries_the_result():
    p = v3(script(ITERATOR))
    p.ready(protocol=3)
    p.send(m.Mail(5, 1, b""))
    assert p.quiet(0.5) == [m.MailStarted(5, False), m.MailDone(5, "succeeded", b'{"id":5}')]
    p.send(m.Shutdown())
    assert p.finish()[0] == 0


# --- what else may come -------------------------------------------------------------


def test_an_answer_nobody_asked_for_is_logged_and_ignored(conformance):
    p = conformance
    p.ready(protocol=3)
    p.send(m.Answer(17, "approve", b'{"approved":true}'))
    assert p.ping(3) < 5
    p.send(m.Mail(1, 1, b"{}"))
    assert item_events(p, 1)[-1] == m.MailDone(1, "succeeded", b"")
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0
    assert "ignored an Answer for mail 17, key 'approve': no handler of this child asked it" in err


@pytest.mark.parametrize("module", CHILDREN)
def test_a_version_2_child_sends_no_version_3_message_and_refuses_one(module):
    p = Peer(child(module))  # no WFHOST_PROTOCOL_MAX: a supervisor of version 2
    assert p.ready().protocol == 2
    p.send(m.Mail(1, 1, b'{"result_hex":"0102","steps":[{"name":"s","ms":1}]}'))
    got = []
    while not got or not isinstance(got[-1], m.MailAck):
        got.append(p.recv())
    assert not any(type(e) in m.SINCE_3 for e in got), got
    assert got[-1] == m.MailAck(1, "succeeded")
    p.send(p.mail_cancel(1))
    code, _, err = p.finish()
    assert code == 1
    assert "CancelMail is a protocol-3 message, and this child speaks protocol 2" in err


def test_the_protocol_variables_are_removed_for_the_programs_a_child_starts():
    p = v3(
        script(
            "import os, sys, wfhost\n"
            "rt = wfhost.connect()\n"
            "print('env left:', sorted(k for k in os.environ if k.startswith('WFHOST_')), file=sys.stderr)\n"
            "rt.ready()\n"
            "print('closed:', rt.wait_closed().kind, file=sys.stderr)\n"
        )
    )
    p.ready(protocol=3)
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0 and "env left: []" in err, err


def test_the_outbox_never_sends_a_version_3_event_on_a_channel_of_version_2():
    from wfhost.channel import Outbox

    outbox = Outbox(None, 1 << 20, 2)  # type: ignore[arg-type]
    with pytest.raises(AssertionError) as e:
        outbox.encode(m.MailStarted(1, True))
    assert "MailStarted is a protocol-3 message" in str(e.value)
    assert Outbox(None, 1 << 20, 3).encode(m.MailStarted(1, True))  # type: ignore[arg-type]


ITERATOR_CANCEL = r"""
import sys, wfhost
rt = wfhost.connect()
rt.ready()
for mail in rt.mail():
    mail.cancelled.wait(30)
    try:
        mail.check()
    except wfhost.Cancelled as e:
        print(f"cancelled: cause={e.cause} reason={e.reason}", file=sys.stderr)
        mail.ack("cancelled")
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


def test_a_cancel_of_an_item_from_the_iterator_sets_its_cancelled():
    p = v3(script(ITERATOR_CANCEL))
    p.ready(protocol=3)
    p.send(m.Mail(6, 1, b""))
    assert p.expect(m.MailStarted, skip=()) == m.MailStarted(6, True)
    p.send(p.mail_cancel(6, "stop", origin="deadline"))
    assert p.quiet(0.5) == [
        m.MailCancelVerdict(6, m.ACKNOWLEDGED),
        m.MailDone(6, "cancelled", b""),
    ]
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert (
        "cancelled: cause=cancel reason=cancelled by a verified deadline cancel of mail 6: stop"
        in err
    )
