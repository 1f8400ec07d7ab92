"""Exceptions raised by hcat_notify.

Every error the package raises on purpose derives from :class:`HcatNotifyError`, so a
caller (or the CLI) can catch one type. Library exceptions (SQLAlchemy, stomp.py,
pydantic) are mapped to these at one boundary each and chained with ``from``.

    HcatNotifyError
    ├── ConfigError                 settings file, environment or arguments are invalid
    ├── InvalidInputError           bad user input; nothing was changed
    │   ├── InvalidIdentifierError  malformed database, table or partition-key name
    │   ├── InvalidSpecError        malformed partition spec or value
    │   ├── UnknownPartitionKeyError  spec names a key the table does not have
    │   ├── LocationNotFoundError   a location does not exist or holds no data files
    │   ├── LocationOutsideWarehouseError  a managed location outside the warehouse roots
    │   ├── LinkInPartitionError    a partition directory holds a symbolic link
    │   ├── PartitionNotFoundError  no registered partition matches the spec (a drop)
    │   ├── HistoryGoneError    events after a position were pruned from the outbox
    │   └── InvalidRuleError        a completeness rule does not fit the table or is malformed
    ├── TableNotFoundError          no such table in the catalog
    │   └── TableDroppedError       the table was dropped (its DROP_TABLE names the event)
    ├── TableExistsError            the table is already registered
    ├── PartitionExistsError        the partition is already registered
    ├── ConflictError               a compare-and-set update lost a race
    │   ├── ConcurrentWriteError    another write claims the same partitions
    │   ├── SubscriberInUseError    another live process consumes under that name
    │   └── SubscriberTakenOverError  another process took this subscriber name over
    ├── StoreError                  the catalog database failed
    │   └── StoreUnavailableError   the catalog database cannot be reached
    ├── BrokerError                 the message broker failed
    │   ├── BrokerUnavailableError  no broker answered at the configured URL(s)
    │   ├── BrokerAuthError         the broker refused the credentials or an action
    │   │   └── BrokerCredentialsError  the login itself was refused (not transient)
    │   ├── BrokerRejectedError     the broker refused this one message (too large, ...)
    │   └── BrokerTimeoutError      the broker did not answer within the deadline
    └── ApiError                    the HTTP API failed (a client of ``hcat-notify serve``)
        ├── ApiUnavailableError     no API instance answered at the configured URL(s)
        └── ApiAuthError            the API refused the credentials (401) or the action (403)
"""

from __future__ import annotations

__all__ = [
    "ApiAuthError",
    "ApiError",
    "ApiUnavailableError",
    "BrokerAuthError",
    "BrokerCredentialsError",
    "BrokerError",
    "BrokerRejectedError",
    "BrokerTimeoutError",
    "BrokerUnavailableError",
    "ConcurrentWriteError",
    "ConfigError",
    "ConflictError",
    "HcatNotifyError",
    "HistoryGoneError",
    "InvalidIdentifierError",
    "InvalidInputError",
    "InvalidRuleError",
    "InvalidSpecError",
    "LinkInPartitionError",
    "LocationNotFoundError",
    "LocationOutsideWarehouseError",
    "PartitionExistsError",
    "PartitionNotFoundError",
    "StoreError",
    "StoreUnavailableError",
    "SubscriberInUseError",
    "SubscriberTakenOverError",
    "TableDroppedError",
    "TableExistsError",
    "TableNotFoundError",
    "UnknownPartitionKeyError",
    "UnsafeDeleteError",
    "UnsafeMoveError",
]


class HcatNotifyError(Exception):
    """Root of every error hcat_notify raises on purpose."""


class ConfigError(HcatNotifyError):
    """The settings file, an environment variable or an argument is invalid."""


class InvalidInputError(HcatNotifyError, ValueError):
    """User input was rejected; nothing was written."""


class InvalidIdentifierError(InvalidInputError):
    """A database, table or partition-key name is malformed."""


class InvalidSpecError(InvalidInputError):
    """A partition spec or one of its values is malformed."""


class UnknownPartitionKeyError(InvalidInputError):
    """A spec names a key that is not a partition key of the table."""


class LocationNotFoundError(InvalidInputError, FileNotFoundError):
    """A partition's location does not exist, is not a directory, or holds no data files."""


class LocationOutsideWarehouseError(InvalidInputError):
    """A managed table's or partition's location lies outside the warehouse roots (or
    resolves through a symlink to outside them): register it under a root, or as an
    external table."""


class LinkInPartitionError(InvalidInputError):
    """A partition's directory holds a symbolic link where data files are expected: what
    it points to may lie outside the warehouse, so it is neither counted nor copied."""


class UnsafeDeleteError(HcatNotifyError):
    """A local delete refused: the path runs through a symbolic link, is not inside its
    base, or is not the directory that was checked (docs/operations.md, "Warehouse
    roots"). The message names the path and why; the directory stays."""


class UnsafeMoveError(HcatNotifyError):
    """A local move of a write or of its recovery refused: a component of the path is a
    symbolic link, the path is not inside its base, or the directory is not the one the
    job staged (docs/operations.md, "Warehouse roots"). The message names the path and
    why; nothing was moved by that step."""


class PartitionNotFoundError(InvalidInputError, LookupError):
    """No registered partition of the table matches the spec (of a drop)."""


class HistoryGoneError(InvalidInputError):
    """Events after the position asked for were pruned from the outbox (its retention,
    docs/operations.md): reading on would skip them. ``oldest`` is the lowest position
    from which the history is still complete (None: not known, as from the HTTP API,
    whose message names it)."""

    def __init__(self, message: str, *, oldest: int | None = None) -> None:
        super().__init__(message)
        self.oldest = oldest


class InvalidRuleError(InvalidInputError):
    """A completeness rule (``table expect``) is malformed or does not fit the table."""


class TableNotFoundError(HcatNotifyError, LookupError):
    """The table is not registered in the catalog."""


class TableDroppedError(TableNotFoundError):
    """The table was dropped: it is not registered, and its DROP_TABLE event says when.

    Raised for a dropped table where a registered one is needed, and by
    :meth:`NotificationConsumer.wait_for_set_done
    <hcat_notify.consumer.NotificationConsumer.wait_for_set_done>` when the table it
    waits on is dropped meanwhile. ``event_id`` and ``topic`` (the table's own topic)
    are those of the DROP_TABLE when known (not through the HTTP API).
    """

    def __init__(
        self, message: str, *, event_id: int | None = None, topic: str | None = None
    ) -> None:
        super().__init__(message)
        self.event_id = event_id
        self.topic = topic


class TableExistsError(HcatNotifyError):
    """A table with that name is already registered."""


class PartitionExistsError(HcatNotifyError):
    """A partition with those values is already registered."""


class ConflictError(HcatNotifyError):
    """A compare-and-set update found a different version than expected.

    Another process changed the row first; re-read it and retry if that still makes sense.
    """


class ConcurrentWriteError(ConflictError):
    """Another write overwrites (or overwrote, since this one started) a partition.

    Of two jobs overwriting the same partition, the first to commit wins; run the
    other again if its data should still replace the winner's.
    """


class SubscriberInUseError(ConflictError):
    """Another live process consumes under this subscriber name (see ``--takeover``)."""


class SubscriberTakenOverError(ConflictError):
    """Another process took this subscriber name over; this consumer must stop."""


class StoreError(HcatNotifyError):
    """The catalog database failed."""


class StoreUnavailableError(StoreError):
    """The catalog database cannot be reached or opened."""


class BrokerError(HcatNotifyError):
    """The message broker failed or refused an operation."""


class BrokerUnavailableError(BrokerError):
    """No broker answered at the configured URL(s)."""


class BrokerAuthError(BrokerError):
    """The broker refused the credentials, or the principal may not do that."""


class BrokerCredentialsError(BrokerAuthError):
    """The broker refused the login: a wrong user or password, which retrying cannot fix."""


class BrokerRejectedError(BrokerError):
    """The broker refused one message for what it is (a header over its limit, ...).

    Sending it again fails the same way; the relay parks such an event after a few tries.
    """


class BrokerTimeoutError(BrokerError):
    """The broker did not answer within the deadline."""


class ApiError(HcatNotifyError):
    """The HTTP API answered with an error this package has no type for, or nonsense."""


class ApiUnavailableError(ApiError):
    """No instance of the HTTP API answered (or each answered 5xx) at the configured URLs."""


class ApiAuthError(ApiError):
    """The HTTP API refused the credentials (401) or this principal's action (403)."""
