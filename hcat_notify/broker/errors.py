"""What an ActiveMQ ERROR frame means: one table, most specific match first.

ActiveMQ's STOMP ERROR frames carry no error code: a refusal by the authorization plugin
is only text in the ``message`` header (``User x is not authorized to write to:
topic://...``), while protocol errors name their Java exception in the body's first line.
Every place that needs to know what went wrong asks :func:`classify`; nothing else reads
the text of an ERROR frame.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from hcat_notify.errors import (
    BrokerAuthError,
    BrokerCredentialsError,
    BrokerError,
    BrokerRejectedError,
)

__all__ = ["FAULT_ERRORS", "BrokerFault", "Refusal", "classify", "error_for"]


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


FAULT_ERRORS: dict[BrokerFault, type[BrokerError]] = {
    BrokerFault.CREDENTIALS: BrokerCredentialsError,
    BrokerFault.NOT_AUTHORIZED: BrokerAuthError,
    BrokerFault.MESSAGE_REJECTED: BrokerRejectedError,
    BrokerFault.ROLLED_BACK: BrokerError,
    BrokerFault.OTHER: BrokerError,
}
"""What an ERROR frame answering one of our frames raises, by its kind."""


def error_for(errors: Sequence[str], what: str) -> BrokerError | None:
    """The exception for ERROR frames received during ``what``, most specific first.

    Returns:
        None when ``errors`` is empty.
    """
    if not errors:
        return None
    by_fault = {classify(message): message for message in reversed(errors)}
    for fault in BrokerFault:  # declared most specific first
        if fault in by_fault:
            return FAULT_ERRORS[fault](f"{what}: {by_fault[fault]}")
    return None  # pragma: no cover - every message has a fault
