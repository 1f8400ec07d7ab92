"""What an ActiveMQ ERROR frame means: one table, most specific match first.

ActiveMQ's STOMP ERROR frames carry no error code: a refusal by the authorization plugin
is only text in the ``message`` header (``User x is not authorized to write to:
topic://...``), while protocol errors name their Java exception in the body's first line.
Every place that needs to know what went wrong asks :func:`classify`; nothing else reads
the text of an ERROR frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["BrokerFault", "Refusal", "classify"]


class BrokerFault(StrEnum):
    """Kinds of ERROR frame, by what the sender should do about them."""

    CREDENTIALS = "credentials"  # login refused: not transient, fix the configuration
    NOT_AUTHORIZED = "not-authorized"  # this principal may not use this destination
    MESSAGE_REJECTED = "message-rejected"  # this frame can never be accepted (too large)
    ROLLED_BACK = "rolled-back"  # a transaction failed because one of its frames did
    OTHER = "other"  # anything else: treat as a broker failure and retry


@dataclass(frozen=True)
class Refusal:
    """One row of the table: an ERROR frame whose message or body matches ``pattern``."""

    fault: BrokerFault
    pattern: re.Pattern[str]


_TABLE = (
    Refusal(BrokerFault.CREDENTIALS, re.compile(r"user name \[.*\] or password is invalid", re.I)),
    Refusal(BrokerFault.NOT_AUTHORIZED, re.compile(r"is not authorized to", re.I)),
    Refusal(
        BrokerFault.MESSAGE_REJECTED,
        re.compile(r"maximum (header|command|frame|data) (length|size)|ProtocolException", re.I),
    ),
    Refusal(
        BrokerFault.ROLLED_BACK, re.compile(r"marked rollback only|TransactionRolledBack", re.I)
    ),
)


def classify(message: str, body: str = "") -> BrokerFault:
    """The kind of an ERROR frame from its ``message`` header and body."""
    text = f"{message}\n{body.splitlines()[0] if body else ''}"
    for row in _TABLE:
        if row.pattern.search(text):
            return row.fault
    return BrokerFault.OTHER
