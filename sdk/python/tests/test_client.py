"""wfhost.Client against a real `wfhost supervise` (send, status, events,
refusals with the supervisor's own message and code), and the repeats of a
send whose answer was lost or whose outcome was unknown against a fake
control socket that answers as scripted."""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

import wfhost
import wfhost.client
from supervisor import Supervisor, python_child, wait_for


@pytest.fixture(scope="module")
def sup():
    s = Supervisor(python_child("orders") + python_child("quiet", extra='drain_timeout = "1s"'))
    yield s
    s.stop()


def deployment(client: wfhost.Client, name: str) -> dict:
    return next(d for d in client.status()["deployments"] if d["id"] == name)


def test_send_is_durable_and_processed_and_status_names_the_sdk(sup):
    client = wfhost.Client(config=sup.config)
    assert client.socket_path == sup.socket
    wait_for("orders ready", lambda: deployment(client, "orders")["state"] == "ready")
    sent = [
        client.send("orders", json.dumps({"steps": [{"name": "s", "drain": "wait", "ms": 10}]}))
        for _ in range(3)
    ]
    assert all(isinstance(s, wfhost.Sent) and s.new is True for s in sent), sent
    ids = [s.id for s in sent]
    assert ids == sorted(ids) and len(set(ids)) == 3
    d = wait_for(
        "three items done", lambda: (x := deployment(client, "orders"))["mail"]["done"] >= 3 and x
    )
    assert d["implementation"] == "wfhost-python/0.1.0" and d["takes_mail"] is True


def test_an_idempotency_key_enqueues_once_and_another_payload_is_refused(sup):
    client = wfhost.Client(socket=sup.socket)
    first = client.send("orders", b"{}", key="order-42")
    assert first.new is True
    assert client.send("orders", b"{}", key="order-42") == wfhost.Sent(first.id, False)
    with pytest.raises(wfhost.ClientError) as e:
        client.send("orders", b'{"fail":"other"}', key="order-42")
    assert e.value.code == 1 and "order-42" in e.value.message


def test_refusals_carry_the_supervisors_message_and_code(sup):
    client = wfhost.Client(config=sup.config)
    with pytest.raises(wfhost.ClientError) as e:
        client.send("nosuch", b"x")
    assert e.value.code == 1
    assert "nosuch" in str(e.value) and "orders" in str(e.value), "names the known deployments"
    with pytest.raises(wfhost.ClientError) as e:
        client.send("orders", b"x", key="")
    assert e.value.code == 2


def test_events_stream_the_backlog_then_follow_live(sup):
    client = wfhost.Client(config=sup.config)
    backlog = list(client.events())
    assert backlog and [e["seq"] for e in backlog] == sorted(e["seq"] for e in backlog)
    kinds = {e["kind"] for e in backlog}
    assert {"spawned", "ready", "mail_accepted", "mail_done"} <= kinds
    last = backlog[-1]["seq"]
    later = list(client.events(after=last))
    assert all(e["seq"] > last for e in later)
    follow = client.events(after=last, follow=True)
    got: list = []

    def read() -> None:
        for event in follow:
            got.append(event)
            if event["kind"] == "mail_accepted" and event["deployment"] == "quiet":
                return

    reader = threading.Thread(target=read)
    reader.start()
    mail_id = client.send("quiet", b"{}").id
    reader.join(timeout=30)
    follow.close()
    assert got and got[-1]["kind"] == "mail_accepted" and got[-1]["body"]["id"] == mail_id
    assert [e["seq"] for e in got] == list(range(last + 1, last + 1 + len(got))), (
        "no gap, no duplicate"
    )


def test_drain_and_resume_through_the_client(sup):
    client = wfhost.Client(config=sup.config)
    wait_for("quiet ready", lambda: deployment(client, "quiet")["state"] == "ready")
    assert client.drain("quiet")["deployment"] == "quiet"
    wait_for("quiet drained", lambda: deployment(client, "quiet")["state"] == "drained")
    with pytest.raises(wfhost.ClientError) as e:
        client.drain("nosuch")
    assert e.value.code == 1 and "known deployments" in str(e.value)
    client.resume("quiet")
    wait_for("quiet ready again", lambda: deployment(client, "quiet")["state"] == "ready")


def test_an_unreachable_supervisor_is_code_3_and_says_what_to_check():
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        config = Path(d) / "wfhost.toml"
        config.write_text('[supervisor]\nstate_dir = "nowhere"\n')
        client = wfhost.Client(config=config)
        assert client.socket_path == Path(d).resolve() / "nowhere" / "wfhost.sock"
        with pytest.raises(wfhost.Unreachable) as e:
            client.status()
        assert e.value.code == 3 and "is `wfhost supervise` running" in str(e.value)
        config.write_text("[supervisor\n")
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(config=config)
        assert e.value.code == 2 and "not valid TOML" in str(e.value)
    with pytest.raises(wfhost.ClientError):
        wfhost.Client()


class FakeSupervisor:
    """A control socket in a thread that reads one request (and a send's
    payload) per connection and answers the next of ``answers``: a dict is
    written as the answer, None hangs up without one, a pair (seconds,
    dict) is written after that pause, a list is written message by message
    (a stream: the answer, then its events), and the connection closed."""

    def __init__(self, answers: list) -> None:
        self.dir = tempfile.TemporaryDirectory(dir="/tmp")
        self.path = Path(self.dir.name) / "s.sock"
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.server.listen()
        self.answers = answers
        self.seen: list = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        for answer in self.answers:
            conn, _ = self.server.accept()
            with conn:
                n = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
                request = json.loads(conn.recv(n, socket.MSG_WAITALL))
                payload = conn.recv(request.get("payload_bytes", 0), socket.MSG_WAITALL)
                self.seen.append((request, payload))
                if isinstance(answer, tuple):
                    pause, answer = answer
                    time.sleep(pause)
                try:
                    for message in answer if isinstance(answer, list) else [answer]:
                        if message is not None:
                            data = json.dumps(message).encode()
                            conn.sendall(len(data).to_bytes(4, "big") + data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up first (a follow that saw its item's end)

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.server.close()
        self.dir.cleanup()

    def keys(self) -> list:
        return [request["key"] for request, _ in self.seen]


def accepted(new: bool) -> dict:
    return {"ok": True, "data": {"deployment": "orders", "id": 17, "new": new}}


UNKNOWN = {
    "ok": False,
    "code": 1,
    "outcome": "unknown",
    "error": "the store failed while committing mail for orders: disk I/O error",
}


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(wfhost.client, "SEND_RETRY_PAUSE", 0.01)


def test_a_send_whose_answer_was_lost_is_repeated_under_the_same_key():
    """A socket server that hangs up after reading the first request, then
    answers the second: the client repeats it with the same key."""
    fake = FakeSupervisor([None, accepted(True)])
    try:
        assert wfhost.Client(socket=fake.path).send("orders", b"hello") == wfhost.Sent(17, True)
    finally:
        fake.close()
    (first, p1), (second, p2) = fake.seen
    assert first["key"] == second["key"] and first["key"].startswith("auto-")
    assert first["v"] == 2 and first["cmd"] == "send" and p1 == p2 == b"hello"


def test_a_lost_answer_then_not_new_under_the_clients_own_key_is_this_calls_mail():
    fake = FakeSupervisor([None, accepted(False)])
    try:
        sent = wfhost.Client(socket=fake.path).send("orders", b"hello")
    finally:
        fake.close()
    assert sent == wfhost.Sent(17, True), "only this call knew its random key"
    assert len(set(fake.keys())) == 1


def test_an_unknown_outcome_is_repeated_under_the_same_key_and_reported_new():
    """The supervisor cannot tell whether the first try was committed; the
    repeat finds the key's item (new: false). The key was the client's own
    random one, so the item is this call's: the caller sees new=True."""
    fake = FakeSupervisor([UNKNOWN, accepted(False)])
    try:
        sent = wfhost.Client(socket=fake.path).send("orders", b"hello")
    finally:
        fake.close()
    assert sent == wfhost.Sent(17, True)
    (first, p1), (second, p2) = fake.seen
    assert first == second and first["key"].startswith("auto-"), "the same request, same key"
    assert p1 == p2 == b"hello"


def test_an_unknown_outcome_with_the_callers_key_is_reported_as_answered():
    fake = FakeSupervisor([UNKNOWN, accepted(False)])
    try:
        sent = wfhost.Client(socket=fake.path).send("orders", b"hello", key="order-9")
    finally:
        fake.close()
    assert sent == wfhost.Sent(17, False), "an earlier send of the caller's may have enqueued it"
    assert fake.keys() == ["order-9", "order-9"]


def test_a_send_unknown_on_every_try_says_so_and_names_the_key_to_send_again_with(fast_retries):
    fake = FakeSupervisor([UNKNOWN] * wfhost.client.SEND_TRIES)
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).send("orders", b"hello")
    finally:
        fake.close()
    keys = fake.keys()
    assert len(keys) == wfhost.client.SEND_TRIES and len(set(keys)) == 1
    err = e.value
    assert err.outcome_unknown is True and err.key == keys[0] and err.code == 1
    assert not isinstance(err, wfhost.Unreachable)
    message = str(err)
    assert "outcome of sending to 'orders' is unknown" in message
    assert UNKNOWN["error"] in message, "the supervisor's own words"
    assert f"key={keys[0]!r}" in message and "at most once" in message


def test_a_send_whose_every_answer_was_lost_is_unreachable_with_an_unknown_outcome(fast_retries):
    fake = FakeSupervisor([UNKNOWN] + [None] * (wfhost.client.SEND_TRIES - 1))
    try:
        with pytest.raises(wfhost.Unreachable) as e:
            wfhost.Client(socket=fake.path).send("orders", b"hello", key="order-9")
    finally:
        fake.close()
    err = e.value
    assert err.code == 3 and err.answer_lost and err.outcome_unknown and err.key == "order-9"
    assert "key='order-9'" in str(err) and UNKNOWN["error"] in str(err)


def test_a_plain_refusal_is_not_repeated():
    refusal = {"ok": False, "code": 1, "error": "the inbox of orders is full (max_inbox 10)"}
    fake = FakeSupervisor([refusal])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).send("orders", b"hello")
    finally:
        fake.close()
    assert len(fake.seen) == 1
    assert e.value.outcome_unknown is False and str(e.value) == refusal["error"]


# --- mail-result and call ------------------------------------------------------


def result(ended: bool = True, **kw) -> dict:
    data = {
        "id": 17,
        "deployment": "orders",
        "ended": ended,
        "state": "done" if ended else "processing",
        "outcome": "succeeded" if ended else None,
        "reason": None,
        "result": "AP+ACg==" if ended else None,
        "result_bytes": 4 if ended else None,
    }
    data.update(kw)
    return {"ok": True, "data": data}


def test_mail_result_asks_with_its_wait_and_decodes_the_result():
    fake = FakeSupervisor([result(), result()])
    try:
        client = wfhost.Client(socket=fake.path)
        got = client.mail_result(17, wait=30)
        now = client.mail_result(17)
    finally:
        fake.close()
    assert got == wfhost.MailResult(
        17, "orders", True, "done", "succeeded", None, bytes.fromhex("00ff800a"), 4
    )
    assert got.new is None and now == got
    (first, body), (second, _) = fake.seen
    assert first == {"v": 2, "cmd": "mail-result", "id": 17, "wait_ms": 30000} and body == b""
    assert second == {"v": 2, "cmd": "mail-result", "id": 17}, "no wait: answered at once"


def test_mail_result_of_an_item_not_ended_and_of_a_failed_one():
    fake = FakeSupervisor(
        [
            result(ended=False, state="inbox"),
            result(outcome="failed", reason="card declined", result=None, result_bytes=0),
            result(outcome="dead", reason="3 attempts", result=""),
        ]
    )
    try:
        client = wfhost.Client(socket=fake.path)
        waiting = client.mail_result(17, wait=0.001)
        failed = client.mail_result(17)
        dead = client.mail_result(17)
    finally:
        fake.close()
    assert (waiting.ended, waiting.state, waiting.outcome, waiting.result) == (
        False,
        "inbox",
        None,
        None,
    )
    assert fake.seen[0][0]["wait_ms"] == 1, "a wait is rounded up to whole milliseconds"
    assert (failed.outcome, failed.reason, failed.result) == ("failed", "card declined", None)
    assert (dead.outcome, dead.result) == ("dead", b"")


def test_a_long_wait_is_not_cut_short_by_the_clients_timeout():
    fake = FakeSupervisor([(0.5, result())])
    try:
        got = wfhost.Client(socket=fake.path, timeout=0.3).mail_result(17, wait=0.5)
    finally:
        fake.close()
    assert got.ended


@pytest.mark.parametrize(
    "bad",
    [
        {
            "id": "17",
            "deployment": "orders",
            "ended": True,
            "state": "done",
            "outcome": "succeeded",
        },
        {"id": 17, "deployment": "orders", "ended": True, "state": "done"},
        {
            "id": 17,
            "deployment": "orders",
            "ended": True,
            "state": "done",
            "outcome": "succeeded",
            "result": "%%%",
        },
        [17],
    ],
)
def test_a_malformed_mail_result_answer_is_an_error_naming_it(bad):
    fake = FakeSupervisor([{"ok": True, "data": bad}])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).mail_result(17)
    finally:
        fake.close()
    assert e.value.code == 1 and "mail-result" in str(e.value)


def test_an_unknown_item_is_the_supervisors_refusal():
    refusal = {"ok": False, "code": 1, "error": "no mail item 99"}
    fake = FakeSupervisor([refusal])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).mail_result(99)
    finally:
        fake.close()
    assert str(e.value) == "no mail item 99"
    with pytest.raises(wfhost.ClientError) as e:
        wfhost.Client(socket=fake.path).mail_result(-1)
    assert e.value.code == 2


def test_call_sends_then_waits_for_the_result_for_the_rest_of_its_timeout():
    fake = FakeSupervisor([accepted(True), result()])
    try:
        got = wfhost.Client(socket=fake.path).call("orders", b"hello", key="k-1", timeout=30)
    finally:
        fake.close()
    assert got.new is True and got.ended and got.result == bytes.fromhex("00ff800a")
    (send, payload), (ask, _) = fake.seen
    assert send["cmd"] == "send" and send["key"] == "k-1" and payload == b"hello"
    assert ask["cmd"] == "mail-result" and ask["id"] == 17
    assert 29_000 < ask["wait_ms"] <= 30_000, "the rest of the timeout"


def test_call_repeats_a_send_of_unknown_outcome_then_waits():
    fake = FakeSupervisor([UNKNOWN, accepted(False), result(outcome="cancelled", result="")])
    try:
        got = wfhost.Client(socket=fake.path).call("orders", b"hello")
    finally:
        fake.close()
    assert (got.new, got.outcome, got.result) == (True, "cancelled", b""), "its own key: new"
    assert fake.seen[0][0]["key"] == fake.seen[1][0]["key"]


def test_call_without_a_timeout_asks_again_until_the_item_ends(monkeypatch):
    monkeypatch.setattr(wfhost.client, "CALL_POLL", 0.05)
    fake = FakeSupervisor(
        [accepted(True), result(ended=False, state="inbox"), result(ended=False), result()]
    )
    try:
        got = wfhost.Client(socket=fake.path).call("orders", b"x")
    finally:
        fake.close()
    assert got.ended and [r["wait_ms"] for r, _ in fake.seen[1:]] == [50, 50, 50]


def test_call_whose_timeout_passes_returns_the_item_not_ended():
    fake = FakeSupervisor([accepted(False), (0.25, result(ended=False))])
    try:
        got = wfhost.Client(socket=fake.path).call("orders", b"x", key="k-2", timeout=0.2)
    finally:
        fake.close()
    assert (got.ended, got.state, got.new, got.outcome) == (False, "processing", False, None)
    assert len(fake.seen) == 2


# --- questions, answer and follow ------------------------------------------------


QUESTION = {
    "deployment": "orders",
    "id": 17,
    "key": "approve",
    "prompt": {"order": "A-17", "total": 12.5},
    "attempt": 1,
    "asked_at_ms": 1764650000000,
    "age_ms": 4200,
}


def test_questions_lists_the_open_questions_of_one_deployment_or_all():
    fake = FakeSupervisor(
        [{"ok": True, "data": {"questions": [QUESTION]}}, {"ok": True, "data": {"questions": []}}]
    )
    try:
        client = wfhost.Client(socket=fake.path)
        assert client.questions("orders") == [QUESTION]
        assert client.questions() == []
    finally:
        fake.close()
    assert [r for r, _ in fake.seen] == [
        {"v": 2, "cmd": "questions", "deployment": "orders"},
        {"v": 2, "cmd": "questions"},
    ]


@pytest.mark.parametrize("bad", [{}, {"questions": {"id": 1}}, {"questions": [1]}, [QUESTION]])
def test_a_malformed_questions_answer_is_an_error_naming_it(bad):
    fake = FakeSupervisor([{"ok": True, "data": bad}])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).questions()
    finally:
        fake.close()
    assert e.value.code == 1 and "questions" in str(e.value)


ANSWERED = {
    "answered_at_ms": 1764650000123,
    "by": {"label": "ana", "uid": 1000, "user": "ana"},
    "deployment": "orders",
    "id": 17,
    "journal_seq": 58,
    "key": "approve",
    "new": True,
}


def test_answer_sends_the_value_as_json_and_returns_the_supervisors_data():
    fake = FakeSupervisor([{"ok": True, "data": ANSWERED}, {"ok": True, "data": ANSWERED}])
    try:
        client = wfhost.Client(socket=fake.path)
        assert client.answer(17, "approve", {"approved": True}, by="ana") == ANSWERED
        client.answer(17, "approve", None)
    finally:
        fake.close()
    (first, body), (second, _) = fake.seen
    assert first == {
        "v": 2,
        "cmd": "answer",
        "id": 17,
        "key": "approve",
        "value": {"approved": True},
        "by": "ana",
    }
    assert body == b""
    assert second == {"v": 2, "cmd": "answer", "id": 17, "key": "approve", "value": None}


def test_a_refused_answer_raises_with_the_supervisors_text_and_is_not_repeated():
    refusal = {
        "ok": False,
        "code": 1,
        "error": "question 'approve' of mail 17 was answered {\"approved\":false} at "
        "2026-12-02T04:00:00Z by ana; an answer is given once",
    }
    fake = FakeSupervisor([refusal])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            wfhost.Client(socket=fake.path).answer(17, "approve", {"approved": True})
    finally:
        fake.close()
    assert len(fake.seen) == 1
    assert str(e.value) == refusal["error"] and e.value.code == 1


def test_an_answer_whose_reply_was_lost_is_given_again(fast_retries):
    fake = FakeSupervisor([None, {"ok": True, "data": {**ANSWERED, "new": False}}])
    try:
        got = wfhost.Client(socket=fake.path).answer(17, "approve", True)
    finally:
        fake.close()
    assert got["new"] is False
    (first, _), (second, _) = fake.seen
    assert first == second and first["value"] is True


def test_an_answer_lost_every_time_is_unreachable_and_says_giving_it_again_is_safe(fast_retries):
    fake = FakeSupervisor([None] * wfhost.client.ANSWER_TRIES)
    try:
        with pytest.raises(wfhost.Unreachable) as e:
            wfhost.Client(socket=fake.path).answer(17, "approve", True)
    finally:
        fake.close()
    assert len(fake.seen) == wfhost.client.ANSWER_TRIES
    assert e.value.answer_lost and "giving the same value again is safe" in str(e.value)


def test_an_answer_that_is_not_json_is_refused_before_anything_is_sent():
    client = wfhost.Client(socket="/nonexistent/s.sock")
    for value in ({1, 2}, float("nan"), object()):
        with pytest.raises(wfhost.ClientError) as e:
            client.answer(17, "approve", value)
        assert e.value.code == 2 and "nothing was sent" in str(e.value)
    with pytest.raises(wfhost.ClientError) as e:
        client.answer(-1, "approve", True)
    assert e.value.code == 2
    with pytest.raises(wfhost.ClientError) as e:
        client.answer(17, b"approve", True)  # type: ignore[arg-type]
    assert e.value.code == 2


STREAMING = {"ok": True, "data": {"streaming": True}}


def event(seq: int, kind: str, **body) -> dict:
    return {
        "seq": seq,
        "at_ms": 1764650000000 + seq,
        "deployment": "orders",
        "kind": kind,
        "body": body,
    }


@pytest.fixture
def fast_follow(monkeypatch):
    monkeypatch.setattr(wfhost.client, "FOLLOW_RETRY_PAUSE", 0.01)


def test_follow_yields_an_items_events_and_ends_after_its_end():
    fake = FakeSupervisor(
        [
            [
                STREAMING,
                event(3, "mail_accepted", id=17),
                event(5, "mail_started", id=17, attempt=1),
                event(8, "question_asked", id=17, key="approve"),
                event(9, "mail_done", id=17, outcome="succeeded"),
                event(10, "never_read", id=17),
            ]
        ]
    )
    try:
        got = list(wfhost.Client(socket=fake.path).follow(17))
    finally:
        fake.close()
    assert [e["seq"] for e in got] == [3, 5, 8, 9] and got[-1]["kind"] == "mail_done"
    ((request, _),) = fake.seen
    assert request == {"v": 2, "cmd": "events", "mail": 17, "follow": True, "after": 0}


def test_follow_reconnects_after_the_last_seq_it_saw_with_no_gap_and_no_duplicate(fast_follow):
    fake = FakeSupervisor(
        [
            [STREAMING, event(4, "mail_accepted", id=17), event(6, "mail_started", id=17)],
            None,  # the supervisor is restarting: no answer
            [
                STREAMING,
                event(6, "mail_started", id=17),  # again: skipped
                event(7, "mail_progress", id=17, data={"done": 1}),
                event(12, "mail_dead", id=17, reason="3 attempts"),
            ],
        ]
    )
    try:
        got = list(wfhost.Client(socket=fake.path).follow(17, after=2))
    finally:
        fake.close()
    assert [e["seq"] for e in got] == [4, 6, 7, 12] and got[-1]["kind"] == "mail_dead"
    assert [r["after"] for r, _ in fake.seen] == [2, 6, 6]


def test_follow_gives_up_after_a_few_broken_connections_in_a_row(fast_follow):
    tries = wfhost.client.FOLLOW_TRIES
    fake = FakeSupervisor([[STREAMING, event(3, "mail_accepted", id=17)]] + [None] * (tries - 1))
    got: list = []
    try:
        with pytest.raises(wfhost.Unreachable) as e:
            for ev in wfhost.Client(socket=fake.path).follow(17):
                got.append(ev)
    finally:
        fake.close()
    assert [ev["seq"] for ev in got] == [3]
    assert len(fake.seen) == tries and [r["after"] for r, _ in fake.seen[1:]] == [3] * (tries - 1)
    message = str(e.value)
    assert f"following mail 17 failed {tries} times in a row, the last after event 3" in message
    assert "follow(17, after=3)" in message


def test_follow_of_an_unknown_item_is_the_supervisors_refusal_at_once():
    refusal = {"ok": False, "code": 1, "error": "no mail item 99"}
    fake = FakeSupervisor([refusal])
    try:
        with pytest.raises(wfhost.ClientError) as e:
            list(wfhost.Client(socket=fake.path).follow(99))
    finally:
        fake.close()
    assert str(e.value) == "no mail item 99" and len(fake.seen) == 1
    with pytest.raises(wfhost.ClientError) as e:
        wfhost.Client(socket=fake.path).follow(-3)
    assert e.value.code == 2


def test_events_of_one_item_or_one_deployment():
    fake = FakeSupervisor([[STREAMING, event(1, "mail_accepted", id=17)]])
    try:
        got = list(wfhost.Client(socket=fake.path).events(mail=17, deployment="orders"))
    finally:
        fake.close()
    assert [e["seq"] for e in got] == [1]
    assert fake.seen[0][0] == {
        "v": 2,
        "cmd": "events",
        "after": 0,
        "follow": False,
        "mail": 17,
        "deployment": "orders",
    }


def test_a_producer_keeps_one_connection_for_many_requests(sup):
    """The supervisor serves request after request on one connection: the
    client keeps it, and a refused send's connection is not used again."""
    with wfhost.Client(socket=sup.socket) as client:
        first = client.send("orders", b"{}")
        (kept, _), = client._idle
        for _ in range(20):
            client.send("orders", b"{}")
        client.mail_result(first.id)
        assert [s for s, _ in client._idle] == [kept], "every request went on one connection"
        with pytest.raises(wfhost.ClientError):
            client.send("nowhere", b"{}")
        assert client._idle == [] and kept.fileno() == -1, "the refused send's connection is closed"
        client.send("orders", b"{}")
        (again, _), = client._idle
    assert client._idle == [] and again.fileno() == -1, "closed with the client"
