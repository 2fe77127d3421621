"""wfhost.Client against a real `wfhost supervise` (send, status, events,
refusals with the supervisor's own message and code), and the lost-answer
retry against a socket that drops the first connection."""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from pathlib import Path

import pytest

import wfhost
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
    ids = [
        client.send("orders", json.dumps({"steps": [{"name": "s", "drain": "wait", "ms": 10}]}))
        for _ in range(3)
    ]
    assert ids == sorted(ids) and len(set(ids)) == 3
    d = wait_for(
        "three items done", lambda: (x := deployment(client, "orders"))["mail"]["done"] >= 3 and x
    )
    assert d["implementation"] == "wfhost-python/0.1.0" and d["takes_mail"] is True


def test_an_idempotency_key_enqueues_once_and_another_payload_is_refused(sup):
    client = wfhost.Client(socket=sup.socket)
    first = client.send("orders", b"{}", key="order-42")
    assert client.send("orders", b"{}", key="order-42") == first
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
    mail_id = client.send("quiet", b"{}")
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


def test_a_send_whose_answer_was_lost_is_repeated_under_the_same_key():
    """A socket server that hangs up after reading the first request, then
    answers the second: the client repeats it with the same key."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = Path(d) / "s.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen()
        seen: list = []

        def serve() -> None:
            for attempt in range(2):
                conn, _ = server.accept()
                with conn:
                    n = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
                    request = json.loads(conn.recv(n, socket.MSG_WAITALL))
                    payload = conn.recv(request["payload_bytes"], socket.MSG_WAITALL)
                    seen.append((request, payload))
                    if attempt == 1:
                        answer = json.dumps(
                            {"ok": True, "data": {"deployment": "orders", "id": 17, "new": True}}
                        ).encode()
                        conn.sendall(len(answer).to_bytes(4, "big") + answer)

        t = threading.Thread(target=serve)
        t.start()
        assert wfhost.Client(socket=path).send("orders", b"hello") == 17
        t.join()
        server.close()
        (first, p1), (second, p2) = seen
        assert first["key"] == second["key"] and first["key"].startswith("auto-")
        assert first["v"] == 2 and first["cmd"] == "send" and p1 == p2 == b"hello"
