"""wfhost: write wfhost workflow children in Python.

A child started by ``wfhost supervise`` connects, says it is ready, takes
mail, runs steps that declare what a drain does to them, and obeys only
cancels signed by its supervisor::

    import wfhost

    rt = wfhost.connect()
    rt.ready()
    for mail in rt.mail():                       # ends when a drain starts
        run = f"order-{mail.id}"
        try:
            with rt.step(run, "fetch", drain="cancel") as step:
                fetch(mail.json(), step.cancelled)
            with rt.step(run, "approve", drain="wait"):
                approve()
        except wfhost.Cancelled:
            rt.run_terminal(run, "cancelled")
            mail.release()                       # the next child does it
            continue
        rt.run_terminal(run, "succeeded")
        mail.ack("succeeded")
    raise SystemExit(rt.wait_closed().exit_code)

Or, one handler call per item, whose return value is the item's result
(protocol 3), a few items at once::

    def handle(mail):
        with rt.step(f"order-{mail.id}", "fetch", drain="cancel") as step:
            return fetch(mail.json(), step.cancelled)

    rt.serve(handle, workers=4)       # cancellable=False: a cancel of one item is not supported

A handler may ask a person and wait for the answer as long as it takes,
without holding the child through a drain (``wfhost.GivenBack``: let it
pass; the item's next attempt runs the handler again and gets the stored
answer at once), and report progress::

    def handle(mail):
        mail.progress({"stage": "fetched"})
        answer = mail.ask("approve", {"order": mail.json()["order"]})
        return {"approved": answer["approved"]}

The asyncio surface is :mod:`wfhost.aio`; the producer client for the
control socket is :class:`wfhost.Client`.
"""

from ._version import __version__
from .core import CloseReason
from .errors import (
    CancelRefused,
    Cancelled,
    ChannelClosed,
    ClientError,
    ConnectError,
    GivenBack,
    MailSettled,
    NotReady,
    ProtocolViolation,
    TooLarge,
    Unreachable,
    Unsupported,
    WfhostError,
)
from .outcome import CANCELLED, SUCCEEDED, Failed
from .runtime import DEFAULT_IMPLEMENTATION, Mail, MailIterator, Runtime, Step, connect

__all__ = [
    "CANCELLED",
    "DEFAULT_IMPLEMENTATION",
    "SUCCEEDED",
    "CancelRefused",
    "Cancelled",
    "ChannelClosed",
    "Client",
    "ClientError",
    "CloseReason",
    "ConnectError",
    "Failed",
    "GivenBack",
    "Mail",
    "MailIterator",
    "MailResult",
    "MailSettled",
    "NotReady",
    "ProtocolViolation",
    "Runtime",
    "Sent",
    "Step",
    "TooLarge",
    "Unreachable",
    "Unsupported",
    "WfhostError",
    "__version__",
    "connect",
]


def __getattr__(name: str) -> object:
    """``wfhost.Client``, ``wfhost.Sent`` and ``wfhost.MailResult`` are
    imported on first use: a workflow child rarely needs them, and their
    imports (tomllib, secrets, pathlib, dataclasses) slow start-up."""
    if name in ("Client", "Sent", "MailResult"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'wfhost' has no attribute {name!r}")
