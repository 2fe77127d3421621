"""The runtime in a real child process, on a real socketpair, against a
scripted supervisor side (tests/peer.py): what the conformance kit cannot
script (a Lease, a deliberately small frame limit, dropped mail, the
asyncio task cancellation, SIGTERM) and the errors an application meets."""

from __future__ import annotations

import signal
import time

import pytest

from peer import Peer, child, script
from wfhost import messages as m
from wfhost.outcome import Failed

ITEM = b'{"run":"r1","steps":[{"name":"fetch","drain":"cancel","ms":5000},{"name":"approve","drain":"wait","ms":300}]}'


@pytest.fixture(params=["wfhost.conformance_child", "wfhost.aio.conformance_child"])
def conformance(request):
    peer = Peer(child(request.param))
    yield peer
    peer.kill()


def test_the_handshake_names_the_sdk_and_the_welcome_limits_apply(conformance):
    hello = conformance.ready()
    assert hello.protocol == 2 and hello.takes_mail
    assert hello.implementation == "wfhost-python/0.1.0"
    assert conformance.ping(7) < 5


def test_a_lease_that_runs_out_drains_the_child_on_its_own(conformance):
    p = conformance
    p.ready()
    p.send(m.Lease(60_000))
    p.send(m.Lease(300))  # a newer Lease replaces the deadline
    p.send(m.Mail(1, 1, ITEM))
    assert p.expect(m.StepStarted) == m.StepStarted("r1", "fetch", "cancel")
    started = time.monotonic()
    got = p.expect(m.StepFinished, timeout=5)
    assert got == m.StepFinished("r1", "fetch", "cancelled")
    assert time.monotonic() - started >= 0.2, "not before the lease ran out"
    rest = p.quiet(0.5)
    assert rest == [m.RunTerminal("r1", "cancelled"), m.MailAck(1, "cancelled"), m.Drained()], rest
    p.send(m.Mail(2, 1, b"{}"))
    p.send(m.Lease(60_000))  # undoes nothing
    assert p.quiet(0.3) == [], "no mail is taken after the expiry"
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert "lease expired (300 ms without a renewal)" in err


def test_a_drain_lets_the_wait_step_finish_and_drained_follows_the_ack(conformance):
    p = conformance
    p.ready()
    p.send(m.Mail(1, 1, b'{"steps":[{"name":"approve","drain":"wait","ms":400}]}'))
    p.expect(m.StepStarted)
    p.send(m.Drain(1000))
    p.send(m.Mail(2, 1, b"{}"))
    got = p.quiet(1.0)
    assert got == [
        m.StepFinished("mail-1", "approve", "succeeded"),
        m.RunTerminal("mail-1", "succeeded"),
        m.MailAck(1, "succeeded"),
        m.Drained(),
    ], got
    assert p.ping(1) < 5, "still answering while drained"


def test_a_verified_cancel_cascades_and_a_forged_one_changes_nothing(conformance):
    p = conformance
    p.ready()
    p.send(m.Mail(1, 1, ITEM))
    p.expect(m.StepStarted)
    forged = p.signed_cancel("r1")
    bad = (
        forged.cancel.signature[:5]
        + bytes([forged.cancel.signature[5] ^ 1])
        + forged.cancel.signature[6:]
    )
    p.send(m.Cancel(type(forged.cancel)(forged.cancel.record, forged.cancel.key_id, bad)))
    assert p.quiet(0.3) == [], "a forged cancel cancels nothing"
    p.send(p.signed_cancel("r1", "stop it"))
    got = p.quiet(0.5)
    assert got == [
        m.StepFinished("r1", "fetch", "cancelled"),
        m.RunTerminal("r1", "cancelled"),
        m.MailAck(1, "cancelled"),
    ], got
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0
    assert (
        "refused cancel of run r1 for deployment 'billing' (origin operator): signature does not verify"
        in err
    )
    assert "cancel of run r1 accepted (origin operator, reason 'stop it')" in err


@pytest.mark.parametrize("module", ["wfhost.conformance_child", "wfhost.aio.conformance_child"])
def test_a_welcome_of_another_version_is_refused_with_one_line(module):
    p = Peer(child(module))
    p.handshake(protocol=3)
    assert p.recv() is None, "no Ready"
    code, _, err = p.finish()
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Welcome speaks protocol 3 but this child's Hello said 2" in lines[0]


@pytest.mark.parametrize("module", ["wfhost.conformance_child", "wfhost.aio.conformance_child"])
def test_an_oversize_frame_ends_the_child_with_a_message_without_waiting_for_a_body(module):
    p = Peer(child(module))
    p.ready()
    p.send_raw((0xFFFFFFFF).to_bytes(4, "big"))
    code, _, err = p.finish(timeout=5)
    assert code == 1, err
    assert "frame of 4294967295 bytes exceeds max_frame_bytes 1048576" in err


def test_the_welcome_limit_is_the_read_limit_after_the_handshake():
    p = Peer(child("wfhost.conformance_child"))
    p.ready(limits=m.Limits(1000, 500, 1000, 30_000))
    p.send(m.Mail(1, 1, bytes(2000)))
    code, _, err = p.finish(timeout=5)
    assert code == 1 and "exceeds max_frame_bytes 1000" in err, err


APP = r"""
import gc, sys, wfhost
rt = wfhost.connect()
try:
    rt.custom("early")
except wfhost.NotReady as e:
    print("not ready:", e, file=sys.stderr)
rt.ready()
rt.ready()
try:
    rt.custom("big", bytes(5000))
except wfhost.TooLarge as e:
    print("too large:", e, file=sys.stderr)
import os
print("env left:", sorted(k for k in os.environ if k.startswith("WFHOST_")), file=sys.stderr)
for mail in rt.mail():
    if mail.id == 1:
        with rt.step("r", "s", "wait"):
            raise_it = True
        mail.ack(wfhost.Failed("x" * 10_000))
        try:
            mail.ack("succeeded")
        except wfhost.MailSettled as e:
            print("settled:", e, file=sys.stderr)
    elif mail.id == 2:
        try:
            with rt.step("r2", "s", "cancel") as step:
                raise ValueError("upstream said 503")
        except ValueError:
            pass
        del mail  # dropped unsettled: released, so the drain can end
        gc.collect()
    else:
        mail.ack()
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


def test_application_errors_are_clear_and_nothing_bad_reaches_the_supervisor():
    p = Peer(script(APP))
    p.ready(limits=m.Limits(4096, 1024, 1000, 30_000))
    p.send(m.Mail(1, 1, b"a"))
    assert p.expect(m.StepStarted) == m.StepStarted("r", "s", "wait")
    assert p.expect(m.StepFinished) == m.StepFinished("r", "s", "succeeded")
    ack = p.expect(m.MailAck)
    assert isinstance(ack.outcome, Failed) and ack.outcome.reason == "x" * len(ack.outcome.reason)
    assert 3000 < len(ack.outcome.reason) < 4096, "cut to fit the frame limit"
    p.send(m.Mail(2, 1, b"b"))
    p.expect(m.StepStarted)
    assert p.expect(m.StepFinished) == m.StepFinished("r2", "s", Failed("upstream said 503"))
    p.send(m.Drain(1000))
    assert p.expect(m.Drained, timeout=5) == m.Drained()
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert "not ready: custom event 'early' before rt.ready()" in err
    assert "too large: Custom event not sent" in err and "exceeds max_frame_bytes 4096" in err
    assert "env left: []" in err
    assert "settled: mail 1 was already acknowledged or released" in err
    assert "mail 2 was dropped unacknowledged; left for redelivery" in err
    assert "closed: shutdown" in err


AIO_APP = r"""
import asyncio, sys, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()
    async for mail in rt.mail():
        try:
            async with rt.step("r", "fetch", "cancel") as step:
                await asyncio.sleep(60)
        except wfhost.Cancelled as e:
            print(f"cancelled: cause={e.cause} reason={e.reason}", file=sys.stderr)
            print(f"task still cancelling: {asyncio.current_task().cancelling()}", file=sys.stderr)
        await mail.release()
        await asyncio.sleep(0.05)  # no stray cancellation reaches the task
        print("after the step", file=sys.stderr)
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


def test_an_asyncio_step_task_is_cancelled_on_drain_with_the_reason():
    p = Peer(script(AIO_APP))
    p.ready()
    p.send(m.Mail(1, 1, b""))
    p.expect(m.StepStarted)
    p.send(m.Drain(2500))
    assert p.quiet(0.5) == [m.StepFinished("r", "fetch", "cancelled"), m.Drained()]
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert (
        "cancelled: cause=drain reason=the supervisor is draining this child (budget 2500 ms)"
        in err
    )
    assert "task still cancelling: 0" in err
    assert "after the step" in err


def test_sigterm_ends_a_blocking_child_with_status_0_and_reports_its_step():
    p = Peer(
        script(r"""
import wfhost
rt = wfhost.connect()
rt.ready()
for mail in rt.mail():
    with rt.step("r", "s", "wait"):
        rt.custom("sleeping")
        import time; time.sleep(60)
""")
    )
    p.ready()
    p.send(m.Mail(1, 1, b""))
    p.expect(m.StepStarted)
    assert p.expect(m.Custom, skip=()) == m.Custom("sleeping", b"")
    time.sleep(0.2)  # into the sleep: a signal lands wherever the thread is
    p.proc.send_signal(signal.SIGTERM)
    assert p.expect(m.StepFinished) == m.StepFinished("r", "s", "cancelled")
    code, _, err = p.finish()
    assert code == 0, err


def test_without_the_supervisor_connect_names_the_missing_variable():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "wfhost.conformance_child"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "WFHOST_CONTROL_FD is not set" in out.stderr and "wfhost supervise" in out.stderr


FORKING_APP = r"""
import os, sys, wfhost
rt = wfhost.connect()
rt.ready()
pid = os.fork()
if pid == 0:
    try:
        os.fstat(3)
        print("fork: fd 3 still open", file=sys.stderr)
    except OSError:
        print("fork: fd 3 closed", file=sys.stderr)
    try:
        rt.custom("from the fork")
    except wfhost.ChannelClosed as e:
        print("fork:", e, file=sys.stderr)
    os._exit(0)
os.waitpid(pid, 0)
rt.custom("from the child")
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""


def test_a_fork_of_the_child_neither_holds_nor_speaks_on_the_channel():
    p = Peer(script(FORKING_APP))
    p.ready()
    assert p.expect(m.Custom, skip=()) == m.Custom("from the child", b"")
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    assert "fork: fd 3 closed" in err
    assert "fork: control channel is closed (this process is a fork of the workflow child" in err
    assert "closed: shutdown" in err


CUSTOM_DATA = r"""
import sys
values = [
    ("bytes", b"\x00raw"),
    ("bytearray", bytearray(b"ba")),
    ("memoryview", memoryview(b"mv")),
    ("str", "grüße"),
    ("dict", {"order": "A-17", "n": 2, "ok": True, "none": None, "items": [1.5, "ä"]}),
    ("list", [1, "two"]),
    ("int", 5),
    ("float", 2.5),
    ("bool", False),
    ("none", None),
]
refused = [
    ("object", object()),
    ("set", {1, 2}),
    ("tuple", (1, 2)),
    ("dict-with-a-set", {"a": {1}}),
    ("nan", float("nan")),
]
"""

CUSTOM_BLOCKING = CUSTOM_DATA + r"""
import wfhost
rt = wfhost.connect()
rt.ready()
for kind, data in values:
    rt.custom(kind, data)
for kind, data in refused:
    try:
        rt.custom(kind, data)
    except TypeError as e:
        print("refused:", e, file=sys.stderr)
rt.custom("end")
print("closed:", rt.wait_closed().kind, file=sys.stderr)
"""

CUSTOM_AIO = CUSTOM_DATA + r"""
import asyncio, wfhost, wfhost.aio

async def main():
    rt = await wfhost.aio.connect()
    await rt.ready()
    for kind, data in values:
        await rt.custom(kind, data)
    for kind, data in refused:
        try:
            await rt.custom(kind, data)
        except TypeError as e:
            print("refused:", e, file=sys.stderr)
    await rt.custom("end")
    print("closed:", (await rt.wait_closed()).kind, file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("app", [CUSTOM_BLOCKING, CUSTOM_AIO], ids=["blocking", "asyncio"])
def test_custom_sends_bytes_text_and_json_values_and_refuses_the_rest_at_the_call(app):
    p = Peer(script(app))
    p.ready()
    got = [p.expect(m.Custom, skip=()) for _ in range(11)]
    assert got == [
        m.Custom("bytes", b"\x00raw"),
        m.Custom("bytearray", b"ba"),
        m.Custom("memoryview", b"mv"),
        m.Custom("str", "grüße".encode()),
        m.Custom(
            "dict",
            '{"order":"A-17","n":2,"ok":true,"none":null,"items":[1.5,"ä"]}'.encode(),
        ),
        m.Custom("list", b'[1,"two"]'),
        m.Custom("int", b"5"),
        m.Custom("float", b"2.5"),
        m.Custom("bool", b"false"),
        m.Custom("none", b"null"),
        m.Custom("end", b""),
    ], "each refused value sent nothing"
    p.send(m.Shutdown())
    code, _, err = p.finish()
    assert code == 0, err
    refusals = [line for line in err.splitlines() if line.startswith("refused: ")]
    assert len(refusals) == 5, err
    for line, kind in zip(refusals, ["object", "set", "tuple", "dict-with-a-set", "nan"], strict=True):
        assert f"custom event {kind!r}" in line, line
        assert "bytes, bytearray or memoryview" in line and "str" in line, line
        assert "dict, list, int, float, bool or None" in line, line
        assert "nothing was sent" in line, line
    assert "not object" in refusals[0] and "not set" in refusals[1] and "not tuple" in refusals[2]
    assert "json cannot encode" in refusals[3] and "json cannot encode" in refusals[4]
    assert "closed: shutdown" in err
