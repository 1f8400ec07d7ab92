"""``/v1/tables``: tables and their partitions; what the command line's ``table`` and
``partitions`` commands write (create, register, discover, drop). Whether a spec is
done, and marking it so: :mod:`hcat_notify.api.routes.dones`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from hcat_notify import lifecycle
from hcat_notify.api.auth import require_reader, require_writer
from hcat_notify.api.contract import MAX_PAGE
from hcat_notify.api.datamodels import (
    CreateTable,
    Discover,
    Discovery,
    NewPartitions,
    Partition,
    PartitionList,
    PartitionPage,
    PartitionsDropped,
    Registered,
    RegisterPartitions,
    Table,
    TableDropped,
    TableList,
    announce_mode_of,
)
from hcat_notify.api.locations import check_partition_locations, check_table_location
from hcat_notify.api.params import query_spec, spec_openapi
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.errors import InvalidSpecError
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.records import NewPartition, PartitionInfo, TableInfo
from hcat_notify.store.table_changes import Registration

__all__ = ["SPEC_ERRORS", "TABLE_PARAMETER", "WRITE_ERRORS", "State", "TablePath", "router"]

State = Annotated[ApiState, Depends(state_of)]
_TABLE_DOC = "db.table, e.g. web.clicks"
TablePath = Annotated[str, Path(description=_TABLE_DOC)]
TABLE_PARAMETER = {  # TablePath's OpenAPI form, for a route that reads it itself
    "name": "table",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "description": _TABLE_DOC, "title": "Table"},
    "description": _TABLE_DOC,
}

router = APIRouter(
    prefix="/v1/tables", tags=["tables"], responses=PROBLEM_RESPONSES, route_class=ApiRoute
)
_TABLE_ERRORS: dict[int | str, dict[str, Any]] = {404: problem_doc("No such table.")}
SPEC_ERRORS: dict[int | str, dict[str, Any]] = {
    **_TABLE_ERRORS,
    422: problem_doc("A key is not a partition key of the table."),
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: problem_doc("The principal is a reader."),
    413: problem_doc("The body is over 1 MiB."),
    415: problem_doc("The body is not JSON sent as application/json (UTF-8)."),
}
_LOCATION_ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem_doc(
        "Malformed input, or a location outside the warehouse roots and the API's external "
        "roots (location-outside-warehouse; the same answer whether it exists or not)."
    ),
}
_DROP_ERRORS: dict[int | str, dict[str, Any]] = {
    403: problem_doc("The principal is a reader."),
    409: problem_doc("A pending write claims the partitions (see hcat-notify recover)."),
}
PurgeQuery = Annotated[
    bool,
    Query(
        description="Also delete the files, after the drop is committed (refused for an "
        "EXTERNAL_TABLE); what could not be deleted is listed in errors."
    ),
]


@router.get("", dependencies=[Depends(require_reader)])
async def list_tables(
    state: State,
    db: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    after: Annotated[
        str | None, Query(description="The next of the previous page (a db.table).")
    ] = None,
) -> TableList:
    """Registered tables (of one database if ``db`` is given) by name, a page at a time."""
    found = await in_thread(lambda: state.catalog().list_tables(db, after=after, limit=limit + 1))
    page = found[:limit]
    return TableList(
        tables=[Table.of_table(info) for info in page],
        next=str(page[-1].name) if len(found) > limit else None,
    )


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={**WRITE_ERRORS, **_LOCATION_ERRORS, 409: problem_doc("The table exists.")},
)
async def create_table(body: CreateTable, state: State, response: Response) -> Table:
    """Register a partitioned table and announce it (CREATE_TABLE on the prefix topic):
    ``hcat-notify table create``. Its location, also an external table's, must lie inside
    a warehouse root or an API external root (400 otherwise)."""

    def create() -> TableInfo:
        check_table_location(state.settings, body.name, body.location)
        return state.catalog().create_table(
            body.name,
            location=body.location,
            partition_keys=body.partition_keys,
            storage_format=body.format,
            table_type=body.table_type,
            retention=body.retention,
            topic=body.topic,
            properties=body.table_properties,
        )

    info = await in_thread(create)
    response.headers["Location"] = f"/v1/tables/{info.name}"
    return Table.of_table(info)


@router.get("/{table}", dependencies=[Depends(require_reader)], responses=_TABLE_ERRORS)
async def get_table(table: TablePath, state: State) -> Table:
    """A table, with its topic and STOMP destination."""
    return Table.of_table(await in_thread(lambda: state.catalog().get_table(table)))


@router.get(
    "/{table}/partitions",
    dependencies=[Depends(require_reader)],
    responses=SPEC_ERRORS,
    openapi_extra=spec_openapi(),
)
async def list_partitions(
    table: TablePath,
    request: Request,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    after: Annotated[str | None, Query(description="The next of the previous page.")] = None,
) -> PartitionPage:
    """Registered partitions in path order, those a partial spec covers if one is given."""
    spec = query_spec(request, frozenset({"limit", "after", "spec"}))
    found = await in_thread(
        lambda: state.catalog().list_partitions(table, spec, after=after, limit=limit + 1)
    )
    page = found[:limit]
    more = len(found) > limit
    return PartitionPage(
        partitions=[Partition.of_partition(p) for p in page],
        next=page[-1].spec.to_path() if more else None,
    )


@router.post(
    "/{table}/partitions",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={
        **SPEC_ERRORS,
        **WRITE_ERRORS,
        **_LOCATION_ERRORS,
        409: problem_doc("A partition exists."),
    },
)
async def add_partitions(table: TablePath, body: NewPartitions, state: State) -> PartitionList:
    """Register new partitions with the sizes given and announce them (ADD_PARTITION: one
    each, or batched for a table with announce mode write), all or none. Each location
    must lie inside a warehouse root or an API external root (400 otherwise)."""
    new = [
        NewPartition(
            spec=item.spec,
            location=item.location,
            file_count=item.file_count,
            total_bytes=item.total_bytes,
        )
        for item in body.partitions
    ]

    def add() -> list[PartitionInfo]:
        catalog = state.catalog()
        check_partition_locations(catalog, table, [(i.spec, i.location) for i in body.partitions])
        return catalog.add_partitions(table, new, job_id=body.job_id)

    added = await in_thread(add)
    return PartitionList(partitions=[Partition.of_partition(p) for p in added])


@router.delete(
    "/{table}",
    dependencies=[Depends(require_writer)],
    responses={**_TABLE_ERRORS, **_DROP_ERRORS},
)
async def drop_table(table: TablePath, state: State, purge: PurgeQuery = False) -> TableDropped:
    """Drop a table with its partitions and retained dones and announce DROP_TABLE (on
    the prefix topic and the table's own): ``hcat-notify table drop``."""

    dropped, purged = await in_thread(
        lambda: lifecycle.drop_table(state.catalog(), table, purge=purge)
    )
    return TableDropped.of_drop(
        str(dropped.table.name),
        dropped.partitions,
        dropped.event_ids,
        purged if purge else None,
        definition=Table.of_table(dropped.table),
    )


@router.post(
    "/{table}/partitions:register",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={
        **SPEC_ERRORS,
        **WRITE_ERRORS,
        **_LOCATION_ERRORS,
        409: problem_doc("A partition exists."),
        422: problem_doc(
            "A key is not a partition key of the table, or a location does not exist or "
            "holds no data files."
        ),
    },
)
async def register_partitions(
    table: TablePath, body: RegisterPartitions, state: State
) -> Registered:
    """Register partitions whose files are already in place and announce them, with the
    mark-set-done if given, in one transaction (``hcat-notify partitions add``). The
    server counts and measures each location's data files (HDFS and S3 URIs work), once
    each location is found inside a warehouse root or an API external root (400
    otherwise, nothing measured)."""
    pairs = [(item.spec, item.location) for item in body.partitions]

    def register() -> Registration:
        catalog = state.catalog()
        check_partition_locations(catalog, table, pairs)
        return lifecycle.register_partitions(
            catalog,
            table,
            pairs,
            mark_set_done=body.mark_set_done,
            announce=announce_mode_of(body.announce),
            job_id=body.job_id,
        )

    registration = await in_thread(register)
    return Registered.of_registration(str(registration.partitions[0].table), registration)


@router.post(
    "/{table}/partitions:discover",
    dependencies=[Depends(require_writer)],
    responses={**_TABLE_ERRORS, **WRITE_ERRORS},
)
async def discover_partitions(
    table: TablePath, state: State, body: Annotated[Discover | None, Body()] = None
) -> Discovery:
    """Hive's MSCK REPAIR TABLE (``hcat-notify partitions discover``): register and
    announce the ``k=v/...`` directories of the table's location that hold data files
    and are not registered. A directory that is not a partition of the table refuses
    the whole run (400, nothing registered) unless ``skipForeign``."""

    given = body or Discover.model_validate({})
    found = await in_thread(
        lambda: lifecycle.discover_partitions(
            state.catalog(),
            table,
            dry_run=given.dry_run,
            skip_foreign=given.skip_foreign,
            announce=announce_mode_of(given.announce),
        )
    )
    return Discovery.of_discovery(found)


@router.delete(
    "/{table}/partitions",
    dependencies=[Depends(require_writer)],
    responses={
        **SPEC_ERRORS,
        **_DROP_ERRORS,
        404: problem_doc("No such table, or no partition matches the spec."),
    },
    openapi_extra=spec_openapi(),
)
async def drop_partitions(
    table: TablePath, request: Request, state: State, purge: PurgeQuery = False
) -> PartitionsDropped:
    """Drop every partition the (partial) spec matches and announce each drop
    (DROP_PARTITION, batched for a table with announce mode write):
    ``hcat-notify partitions drop``. A spec is required."""

    spec = query_spec(request, frozenset({"purge", "spec"}))
    if spec is None:
        raise InvalidSpecError(
            "give the partitions to drop, e.g. ?datestamp=20110228 (to drop them all, "
            "drop the table)"
        )
    wanted: PartitionSpec = spec
    dropped, purged = await in_thread(
        lambda: lifecycle.drop_partitions(state.catalog(), table, wanted, purge=purge)
    )
    return PartitionsDropped.of_drop(
        str(dropped.partitions[0].table),
        dropped.partitions,
        dropped.event_ids,
        purged if purge else None,
    )
