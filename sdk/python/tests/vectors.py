"""Turns the golden vectors' JSON descriptions of messages into the SDK's
message values, so a decoded frame can be compared with what it must be."""

from __future__ import annotations

from wfhost import messages as m
from wfhost.cancel import CancelRequested, MailCancelRequested, SignedCancel, SignedMailCancel
from wfhost.outcome import CANCELLED, SUCCEEDED, Failed

ORIGIN = {"SupervisorDrain": "supervisor-drain", "Operator": "operator", "Deadline": "deadline"}


def outcome(o: dict):
    kind = o["kind"]
    if kind == "Succeeded":
        return SUCCEEDED
    if kind == "Cancelled":
        return CANCELLED
    assert kind == "Failed", o
    return Failed(o["reason"])


def signed_cancel(c: dict) -> SignedCancel:
    record = CancelRequested(
        ORIGIN[c["origin"]], c["deployment"], c["run"], c["reason"], int(c["at_ms"])
    )
    return SignedCancel(record, bytes.fromhex(c["key_id"]), bytes.fromhex(c["signature"]))


def signed_mail_cancel(c: dict) -> SignedMailCancel:
    record = MailCancelRequested(
        ORIGIN[c["origin"]], c["deployment"], int(c["id"]), c["reason"], int(c["at_ms"])
    )
    return SignedMailCancel(record, bytes.fromhex(c["key_id"]), bytes.fromhex(c["signature"]))


def verdict(v: dict):
    kind = v["kind"]
    if kind == "Acknowledged":
        return m.ACKNOWLEDGED
    if kind == "NotSupported":
        return m.NOT_SUPPORTED
    assert kind == "Refused", v
    return m.Refused(v["reason"])


def message(j: dict):
    t = j["type"]
    u64 = lambda k: int(j[k])  # noqa: E731 (u64s are decimal strings)
    hx = lambda k: bytes.fromhex(j[k])  # noqa: E731
    if t == "Welcome":
        g, lim = j["grants_snapshot"], j["limits"]
        return m.Welcome(
            j["protocol"],
            j["deployment"],
            m.Grants(int(g["read_at_ms"]), bytes.fromhex(g["digest"]), bytes.fromhex(g["body"])),
            m.Limits(
                lim["max_frame_bytes"],
                lim["max_mail_bytes"],
                int(lim["drain_timeout_ms"]),
                int(lim["liveness_timeout_ms"]),
            ),
        )
    simple = {
        "Drain": lambda: m.Drain(u64("budget_ms")),
        "Cancel": lambda: m.Cancel(signed_cancel(j["cancel"])),
        "Mail": lambda: m.Mail(u64("id"), j["attempt"], hx("payload")),
        "Ping": lambda: m.Ping(u64("nonce")),
        "Shutdown": lambda: m.Shutdown(),
        "Lease": lambda: m.Lease(u64("valid_ms")),
        "Hello": lambda: m.Hello(
            j["protocol"], j["channel_id"], j["pid"], j["takes_mail"], j["implementation"]
        ),
        "Ready": lambda: m.Ready(),
        "StepStarted": lambda: m.StepStarted(j["run"], j["step"], j["drain"].lower()),
        "StepFinished": lambda: m.StepFinished(j["run"], j["step"], outcome(j["outcome"])),
        "MailAck": lambda: m.MailAck(u64("id"), outcome(j["outcome"])),
        "Pong": lambda: m.Pong(u64("nonce")),
        "RunTerminal": lambda: m.RunTerminal(j["run"], outcome(j["outcome"])),
        "Drained": lambda: m.Drained(),
        "RecycleRequest": lambda: m.RecycleRequest(j["reason"]),
        "Custom": lambda: m.Custom(j["kind"], hx("bytes")),
        "CancelMail": lambda: m.CancelMail(signed_mail_cancel(j["cancel"])),
        "Answer": lambda: m.Answer(u64("id"), j["key"], hx("value")),
        "MailStarted": lambda: m.MailStarted(u64("id"), j["cancellable"]),
        "MailDone": lambda: m.MailDone(u64("id"), outcome(j["outcome"]), hx("result")),
        "MailCancelVerdict": lambda: m.MailCancelVerdict(u64("id"), verdict(j["verdict"])),
        "Ask": lambda: m.Ask(u64("id"), j["key"], hx("prompt")),
        "Progress": lambda: m.Progress(u64("id"), hx("data")),
        "GiveBack": lambda: m.GiveBack(u64("id"), j["awaiting_answer"]),
    }
    return simple[t]()
