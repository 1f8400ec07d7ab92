"""A client of ``hcat-notify serve``, failing over between its instances.

:class:`ApiClient` reads the catalog through the HTTP API with the same methods and
records as :class:`~hcat_notify.store.Catalog`, so a :class:`~hcat_notify.consumer.
NotificationConsumer` (a :class:`~hcat_notify.consumer.CatalogReader` user) catches up
through it instead of the database. Writers without database credentials call
:meth:`ApiClient.mark_set_done`, :meth:`~ApiClient.create_table`,
:meth:`~ApiClient.register_partitions`, :meth:`~ApiClient.discover_partitions`,
:meth:`~ApiClient.drop_partitions` and :meth:`~ApiClient.drop_table`, which return the
records the library's own functions return.

Failover: given several URLs, a call goes to the instance that answered last; a
connection that fails, or an answer of 502/503/504, moves the call on to the next
instance. A read is safe to send again; a write is sent again only when it never
reached an instance (the connection was refused), so a write is never applied twice.
Errors come back as the server's problem documents name them: the same
:mod:`hcat_notify.errors` type the catalog would have raised (``TableNotFoundError``,
``UnknownPartitionKeyError``, ...), :class:`ApiAuthError` for 401/403, and
:class:`ApiUnavailableError` when no instance answered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from hcat_notify import errors
from hcat_notify.api.contract import (
    CURSOR_HEADER,
    MAX_PAGE,
    MORE_HEADER,
    NEXT_HEADER,
    NO_RULE,
    NOT_DONE,
)
from hcat_notify.api.datamodels import (
    CoveringDone,
    Discovery,
    EventPage,
    EventRecorded,
    LastEvent,
    PartitionPage,
    PartitionsDropped,
    Registered,
    Table,
    TableDropped,
    TableList,
)
from hcat_notify.api.set_models import RuleVersion, SetList
from hcat_notify.config import DEFAULT_API_TIMEOUT, Settings, parse_api_urls
from hcat_notify.errors import (
    ApiAuthError,
    ApiError,
    ApiUnavailableError,
    HcatNotifyError,
    InvalidInputError,
)
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.cloudevents import CLOUDEVENTS_BATCH_JSON
from hcat_notify.model.completeness import SetRule
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import DEFAULT_TABLE_TYPE
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
    as_table_name,
)
from hcat_notify.store.set_records import RuleRecord, SetReport

if TYPE_CHECKING:
    # The lifecycle results (sqlalchemy, pyarrow) are imported when a method returns one.
    from hcat_notify import lifecycle
    from hcat_notify.store.table_changes import DroppedPartitions, DroppedTable, Registration

__all__ = ["ApiClient", "CloudEventPage", "RemoteSets", "error_of"]

logger = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({502, 503, 504})

SpecLike = PartitionSpec | Mapping[str, str | None]
Params = list[tuple[str, str | int | float | bool | None]]
Model = TypeVar("Model", bound=BaseModel)


def _spec_of(spec: SpecLike | str) -> PartitionSpec:
    if isinstance(spec, PartitionSpec):
        return spec
    return PartitionSpec.parse(spec) if isinstance(spec, str) else PartitionSpec.from_mapping(spec)


def _spec_params(spec: SpecLike) -> Params:
    return [("spec", _spec_of(spec).to_path())]


def _decode(model: type[Model], response: httpx.Response) -> Model:
    """The response's body as the API's own model of it."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ApiError(
            f"{response.request.url} answered {response.status_code} with a body that is no "
            f"{model.__name__}: {exc}"
        ) from exc


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def error_of(response: httpx.Response) -> HcatNotifyError:
    """The exception a problem document names (a plain :class:`ApiError` for others)."""
    problem = _problem(response)
    detail = str(problem.get("detail") or response.text[:200] or response.reason_phrase)
    name = problem.get("error")
    found = getattr(errors, name, None) if name in errors.__all__ else None
    if isinstance(found, type) and issubclass(found, HcatNotifyError):
        return found(detail)
    if response.status_code in (401, 403):
        return ApiAuthError(detail)
    return ApiError(f"{response.request.url} answered {response.status_code}: {detail}")


@dataclass(frozen=True)
class CloudEventPage:
    """One page of the event feed as CloudEvents (:meth:`ApiClient.cloudevents`)."""

    events: list[dict[str, Any]]
    """Structured-mode CloudEvents (JSON objects), in event-id order."""
    cursor: str
    """Where these events leave you: give it as ``cursor`` next time."""
    more: bool
    """The page is full: ask again at once for the rest."""
    next: int | None = None
    """Read without a cursor, a full page of retained dones: give it as ``after``, again
    without a cursor, next time to read the rest of them."""


class ApiClient:
    """The catalog, read (and written) through ``hcat-notify serve``.

    Args:
        urls: the API's instances, in failover order: a sequence, or one string of
            comma-separated URLs (``http://a:8080,http://b:8080``).
        auth: ``(principal, secret)`` for HTTP Basic.
        timeout: seconds for each request (a long poll gets its wait on top).
        transport: an httpx transport (tests pass a double).

    Raises:
        InvalidInputError: no URL, or a malformed one.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        auth: tuple[str, str] | None = None,
        timeout: float = DEFAULT_API_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        try:
            given = parse_api_urls(urls if isinstance(urls, str) else ",".join(urls))
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        self._urls = given
        self._principal = auth[0] if auth is not None else None
        self._credentials_from = ""  # where the settings took the credentials from
        self._timeout = timeout
        self._current = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(
            auth=auth,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            transport=transport,
            headers={"Accept": "application/json"},
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, urls: str | Sequence[str] | None = None, *, writer: bool = False
    ) -> ApiClient:
        """A client of ``urls`` (default: the settings' ``api_url``) with the settings'
        consumer principal, or its publisher principal when ``writer``."""
        auth = (
            (settings.broker_user, settings.broker_password)
            if writer
            else (settings.consumer_user, settings.consumer_password)
        )
        chosen = urls if urls else settings.api_urls
        client = cls(chosen, auth=auth, timeout=settings.api_timeout)
        client._credentials_from = (
            "the publisher principal, HCAT_NOTIFY_BROKER_USER / HCAT_NOTIFY_BROKER_PASSWORD"
            if writer
            else "the consumer principal, HCAT_NOTIFY_CONSUMER_USER / HCAT_NOTIFY_CONSUMER_PASSWORD"
        )
        return client

    @property
    def urls(self) -> tuple[str, ...]:
        return self._urls

    # -- transport ------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        wait: float = 0.0,
        accept: str | None = None,
    ) -> httpx.Response:
        """Send to the current instance, then to the others in turn; the first answer
        that is not 502/503/504 (or the last answer if every instance gave one)."""
        reads = method == "GET"
        failures: list[str] = []
        last: httpx.Response | None = None
        start = self._current
        timeout = httpx.Timeout(self._timeout + wait, connect=min(self._timeout, 5.0))
        headers = {"Accept": accept} if accept is not None else None
        for step in range(len(self._urls)):
            index = (start + step) % len(self._urls)
            base = self._urls[index]
            try:
                response = self._http.request(
                    method, base + path, params=params, json=body, timeout=timeout, headers=headers
                )
            except httpx.TransportError as exc:
                if not reads and not isinstance(exc, httpx.ConnectError):
                    # It may have been applied: never send a write twice.
                    raise ApiUnavailableError(
                        f"{method} {base}{path} failed after sending ({type(exc).__name__}); "
                        "it may or may not have been applied"
                    ) from exc
                failures.append(f"{base}: {type(exc).__name__}: {exc}")
                logger.info("api %s unreachable (%s); trying the next", base, exc)
                continue
            if response.status_code in _RETRY_STATUS and reads:
                last = response
                failures.append(f"{base}: {response.status_code}")
                continue
            with self._lock:
                self._current = index
            return response
        if last is not None:
            return last
        raise ApiUnavailableError("no HTTP API instance answered: " + "; ".join(failures))

    def _error(self, response: httpx.Response) -> HcatNotifyError:
        """:func:`error_of`; a 401 names the principal refused, and where the settings
        took it from."""
        found = error_of(response)
        if response.status_code != 401:
            return found
        url = response.request.url
        who = "no credentials" if self._principal is None else f"API principal {self._principal!r}"
        hint = f" ({self._credentials_from})" if self._credentials_from else ""
        return ApiAuthError(
            f"the API at {url.scheme}://{url.netloc.decode()} refused {who}{hint}: {found}"
        )

    def _get(self, model: type[Model], path: str, params: Params | None = None) -> Model:
        response = self._send("GET", path, params=params)
        if response.status_code != 200:
            raise self._error(response)
        return _decode(model, response)

    def _post(self, model: type[Model], path: str, body: Any) -> Model:
        response = self._send("POST", path, body=body)
        if response.status_code not in (200, 201):
            raise self._error(response)
        return _decode(model, response)

    def _delete(self, model: type[Model], path: str, params: Params) -> Model:
        response = self._send("DELETE", path, params=params)
        if response.status_code != 200:
            raise self._error(response)
        return _decode(model, response)

    def _put(self, model: type[Model], path: str, body: Any) -> Model:
        response = self._send("PUT", path, body=body)
        if response.status_code != 200:
            raise self._error(response)
        return _decode(model, response)

    @property
    def sets(self) -> RemoteSets:
        """Completeness rules and sets through the API, as ``catalog.sets`` has them:
        expect, remove, rule, state, list (docs/completeness.md)."""
        return RemoteSets(self)

    # -- the CatalogReader methods ----------------------------------------------------------

    def get_table(self, table: TableName | str) -> TableInfo:
        """A registered table.

        Raises:
            TableNotFoundError: no such table.
        """
        return self._get(Table, f"/v1/tables/{as_table_name(table)}").to_table()

    def list_tables(self, db: str | None = None) -> list[TableInfo]:
        """All registered tables (of one database if given), by name, every page."""
        found: list[TableInfo] = []
        after: str | None = None
        while True:
            params: Params = [("limit", MAX_PAGE)]
            if db is not None:
                params.append(("db", db))
            if after is not None:
                params.append(("after", after))
            page = self._get(TableList, "/v1/tables", params)
            found += [item.to_table() for item in page.tables]
            after = page.next
            if after is None:
                return found

    def list_partitions(
        self, table: TableName | str, spec: SpecLike | None = None
    ) -> list[PartitionInfo]:
        """A table's partitions in path order (those ``spec`` covers), every page."""
        name = as_table_name(table)
        found: list[PartitionInfo] = []
        after: str | None = None
        while True:
            params: Params = [("limit", MAX_PAGE)]
            if spec is not None:
                params += _spec_params(spec)
            if after is not None:
                params.append(("after", after))
            page = self._get(PartitionPage, f"/v1/tables/{name}/partitions", params)
            found += [item.to_partition(name) for item in page.partitions]
            after = page.next
            if after is None:
                return found

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> list[OutboxEvent]:
        """What :meth:`Catalog.catch_up <hcat_notify.store.Catalog.catch_up>` returns,
        read through ``GET /v1/events``."""
        position = cursor if isinstance(cursor, Cursor) else Cursor.parse(cursor)
        names = [str(as_table_name(table)) for table in tables]
        found: list[OutboxEvent] = []
        after = page_after
        while limit is None or len(found) < limit:
            size = MAX_PAGE if limit is None else min(MAX_PAGE, limit - len(found))
            params: Params = [("table", name) for name in names]
            params += [("after", after), ("limit", size)]
            if position:
                params.append(("cursor", str(position)))
            page = self._get(EventPage, "/v1/events", params)
            events = [item.to_event() for item in page.events]
            found += events
            if not page.more or not events:
                break
            after = events[-1].event_id
        return found

    def cloudevents(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        after: int = 0,
        limit: int = MAX_PAGE,
        wait: float = 0.0,
    ) -> CloudEventPage:
        """One page of ``GET /v1/events`` as a CloudEvents batch
        (``Accept: application/cloudevents-batch+json``; docs/api.md): the events after
        ``cursor``, as :meth:`catch_up` reads them, and the cursor after them; with
        ``wait``, the server's long poll for the first event.

        Raises:
            ApiError: the answer is not a CloudEvents batch with a cursor.
        """
        position = cursor if isinstance(cursor, Cursor) else Cursor.parse(cursor)
        params: Params = [("table", str(as_table_name(table))) for table in tables]
        params += [("after", after), ("limit", limit)]
        if position:
            params.append(("cursor", str(position)))
        if wait > 0:
            params.append(("wait", wait))
        response = self._send(
            "GET", "/v1/events", params=params, wait=wait, accept=CLOUDEVENTS_BATCH_JSON
        )
        if response.status_code != 200:
            raise self._error(response)
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        found = response.headers.get(CURSOR_HEADER)
        events = response.json() if kind == CLOUDEVENTS_BATCH_JSON else None
        if found is None or not isinstance(events, list):
            raise ApiError(
                f"{response.request.url} answered {kind or 'no content type'} where a "
                f"CloudEvents batch with a {CURSOR_HEADER} header was asked for"
            )
        following = response.headers.get(NEXT_HEADER)
        return CloudEventPage(
            events,
            found,
            response.headers.get(MORE_HEADER) == "true",
            int(following) if following and following.isdigit() else None,
        )

    def find_covering_done(
        self,
        table: TableName | str,
        spec: SpecLike,
        *,
        wait: float = 0.0,
        min_generation: int | None = None,
    ) -> RetainedDone | None:
        """The retained mark-set-done covering ``spec`` (of set generation
        ``min_generation`` or later, if given), or None; with ``wait``, wait up to that
        many seconds for one (the server's long poll, at most 300)."""
        params = _spec_params(spec)
        if min_generation is not None:
            params.append(("min_generation", min_generation))
        if wait > 0:
            params.append(("wait", wait))
        response = self._send(
            "GET", f"/v1/tables/{as_table_name(table)}/done", params=params, wait=wait
        )
        if response.status_code == 200:
            return _decode(CoveringDone, response).to_done()
        if response.status_code == 404 and _problem(response).get("type") == NOT_DONE:
            return None
        raise self._error(response)

    def last_event_id(self) -> int:
        """The highest event id handed out so far."""
        return self._get(LastEvent, "/v1/events/last").event_id

    # -- writes ---------------------------------------------------------------------------

    def mark_set_done(self, table: TableName | str, spec: SpecLike) -> int:
        """Record a MARK_SET_DONE (needs a writer principal); its event id."""
        parsed = _spec_of(spec)
        path = f"/v1/tables/{as_table_name(table)}/done"
        return self._post(EventRecorded, path, {"spec": parsed.as_dict()}).event_id

    def create_table(
        self,
        table: TableName | str,
        *,
        location: str,
        partition_keys: Sequence[str],
        storage_format: str = "parquet",
        table_type: str = DEFAULT_TABLE_TYPE,
        properties: Mapping[str, str] | None = None,
        retention: timedelta = DEFAULT_RETENTION,
        topic: str | None = None,
        announce: AnnounceMode | None = None,
    ) -> TableInfo:
        """Register a table and announce it (CREATE_TABLE), as
        :meth:`Catalog.create_table <hcat_notify.store.Catalog.create_table>` does;
        ``announce`` (``partition`` or ``write``) sets its announce mode."""
        body: dict[str, Any] = {
            "name": str(as_table_name(table)),
            "location": location,
            "partitionKeys": list(partition_keys),
            "format": storage_format,
            "tableType": table_type,
            "properties": dict(properties or {}),
            "retentionSeconds": retention.total_seconds(),
            "topic": topic,
            "announce": announce,
        }
        return self._post(Table, "/v1/tables", body).to_table()

    def register_partitions(
        self,
        table: TableName | str,
        locations: Mapping[str, str] | Sequence[tuple[SpecLike | str, str]],
        *,
        mark_set_done: SpecLike | None = None,
        announce: AnnounceMode | None = None,
        job_id: str | None = None,
    ) -> Registration:
        """Register partitions whose files are in place (the server measures them) and
        announce them, with the done if given, in one transaction: what
        :func:`hcat_notify.register_partitions`
        does. ``locations``: full spec (path form, spec or mapping) -> location."""
        pairs = list(locations.items()) if isinstance(locations, Mapping) else list(locations)
        body = {
            "partitions": [
                {"spec": _spec_of(spec).as_dict(), "location": location} for spec, location in pairs
            ],
            "markSetDone": None if mark_set_done is None else _spec_of(mark_set_done).as_dict(),
            "announce": announce,
            "jobId": job_id,
        }
        path = f"/v1/tables/{as_table_name(table)}/partitions:register"
        return self._post(Registered, path, body).to_registration()

    def discover_partitions(
        self,
        table: TableName | str,
        *,
        dry_run: bool = False,
        skip_foreign: bool = False,
        announce: AnnounceMode | None = None,
    ) -> lifecycle.Discovery:
        """Hive's MSCK REPAIR TABLE on the server: what
        :func:`hcat_notify.discover_partitions` returns."""
        body = {"dryRun": dry_run, "skipForeign": skip_foreign, "announce": announce}
        path = f"/v1/tables/{as_table_name(table)}/partitions:discover"
        return self._post(Discovery, path, body).to_discovery()

    def drop_partitions(
        self, table: TableName | str, spec: SpecLike, *, purge: bool = False
    ) -> tuple[DroppedPartitions, lifecycle.Purge]:
        """Drop every partition ``spec`` matches and announce each (DROP_PARTITION); with
        ``purge`` the server then deletes their files. What
        :func:`hcat_notify.drop_partitions` returns.

        Raises:
            PartitionNotFoundError: no partition matches.
        """
        params = [*_spec_params(spec), ("purge", purge)]
        path = f"/v1/tables/{as_table_name(table)}/partitions"
        dropped = self._delete(PartitionsDropped, path, params)
        return dropped.to_dropped(), dropped.to_purge()

    def drop_table(
        self, table: TableName | str, *, purge: bool = False
    ) -> tuple[DroppedTable, lifecycle.Purge]:
        """Drop a table with its partitions and retained dones and announce DROP_TABLE;
        with ``purge`` the server then deletes its files. What
        :func:`hcat_notify.drop_table` returns."""
        path = f"/v1/tables/{as_table_name(table)}"
        dropped = self._delete(TableDropped, path, [("purge", purge)])
        return dropped.to_dropped_table(), dropped.to_purge()

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RemoteSets:
    """``catalog.sets`` through the HTTP API (:attr:`ApiClient.sets`): the same methods
    and records as :class:`hcat_notify.store.sets_view.Sets` (writes need a writer
    principal)."""

    def __init__(self, client: ApiClient) -> None:
        self._client = client

    def expect(self, table: TableName | str, rule: SetRule | Mapping[str, Any]) -> int:
        """Make ``rule`` (a :class:`SetRule` or its stored form) the table's rule; its
        version.

        Raises:
            InvalidRuleError: the rule does not fit the table (nothing is written).
        """
        stored = rule.as_json() if isinstance(rule, SetRule) else dict(rule)
        path = f"/v1/tables/{as_table_name(table)}/expectation"
        return self._client._put(RuleVersion, path, stored).version

    def remove(self, table: TableName | str) -> int:
        """Remove the table's rule (a new version without one); the version."""
        path = f"/v1/tables/{as_table_name(table)}/expectation"
        return self._client._delete(RuleVersion, path, []).version

    def rule(self, table: TableName | str) -> RuleRecord | None:
        """The table's rule in force, or None."""
        path = f"/v1/tables/{as_table_name(table)}/expectation"
        response = self._client._send("GET", path)
        if response.status_code == 200:
            return _decode(RuleVersion, response).to_record()
        if response.status_code == 404 and _problem(response).get("type") == NO_RULE:
            return None
        raise self._client._error(response)

    def state(self, table: TableName | str, spec: SpecLike) -> SetReport:
        """Where the set ``spec`` (exactly the rule's set keys) stands.

        Raises:
            InvalidInputError: the table has no rule, or ``spec`` is not one of its sets.
        """
        params: Params = [("one", True), *_spec_params(spec)]
        page = self._client._get(SetList, f"/v1/tables/{as_table_name(table)}/sets", params)
        if len(page.sets) != 1:  # pragma: no cover - the server answers one report
            raise ApiError(f"the API answered {len(page.sets)} reports for one set")
        return page.sets[0].to_report()

    def list(
        self, table: TableName | str, spec: SpecLike | None = None, *, limit: int = 100
    ) -> list[SetReport]:
        """The table's known sets, newest first (the one set, if ``spec`` is one)."""
        params: Params = [("limit", limit)]
        if spec is not None:
            params += _spec_params(spec)
        page = self._client._get(SetList, f"/v1/tables/{as_table_name(table)}/sets", params)
        return [item.to_report() for item in page.sets]
