"""Which mail ids are with the application and which are acknowledged
(``child/src/mail.rs``, ported). Mail is delivered at least once: an id is
handed to the application once; a redelivery of an id already acknowledged
is answered again from memory, never processed twice."""

from __future__ import annotations

from collections import OrderedDict

from .outcome import Outcome

# Acknowledged ids (and outcomes) remembered for answering redeliveries.
REMEMBERED_ACKS = 4096

DELIVER = "deliver"  # new mail: hand it to the application
REACK = "reack"  # already acknowledged: send the remembered ack again
DUPLICATE = "duplicate"  # already with the application: ignore it
DECLINED = "declined"  # new mail while no mail is taken: leave it for the next child


class MailLedger:
    def __init__(self) -> None:
        self.in_flight: set[int] = set()
        self.acked: OrderedDict[int, Outcome] = OrderedDict()

    def receive(self, mail_id: int, taking: bool) -> tuple[str, Outcome | None]:
        """Classifies a delivery, marking new mail in flight when this child
        is ``taking`` mail; with ``REACK`` comes the remembered outcome."""
        outcome = self.acked.get(mail_id)
        if outcome is not None:
            return REACK, outcome
        if mail_id in self.in_flight:
            return DUPLICATE, None
        if not taking:
            return DECLINED, None
        self.in_flight.add(mail_id)
        return DELIVER, None

    def ack(self, mail_id: int, outcome: Outcome) -> None:
        self.in_flight.discard(mail_id)
        if mail_id not in self.acked:
            self.acked[mail_id] = outcome
            while len(self.acked) > REMEMBERED_ACKS:
                self.acked.popitem(last=False)

    def abandon(self, mail_id: int) -> None:
        """Forgets mail left unacknowledged, so a redelivery reaches the
        application again."""
        self.in_flight.discard(mail_id)
