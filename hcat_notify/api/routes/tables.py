"""``/v1/tables``: tables, their partitions, and whether a spec is done."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from hcat_notify.api.auth import require_reader, require_writer
from hcat_notify.api.contract import MAX_PAGE, NOT_DONE
from hcat_notify.api.datamodels import (
    CoveringDone,
    CreateTable,
    DoneRecorded,
    MarkDone,
    NewPartitions,
    Partition,
    PartitionList,
    PartitionPage,
    Table,
    TableList,
)
from hcat_notify.api.params import query_spec, spec_openapi, wait_query
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc, problem_response
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.errors import InvalidSpecError
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.records import NewPartition, RetainedDone

__all__ = ["router"]

State = Annotated[ApiState, Depends(state_of)]
TablePath = Annotated[str, Path(description="db.table, e.g. web.clicks")]

router = APIRouter(prefix="/v1/tables", tags=["tables"], responses=PROBLEM_RESPONSES)
_TABLE_ERRORS: dict[int | str, dict[str, Any]] = {404: problem_doc("No such table.")}
_SPEC_ERRORS: dict[int | str, dict[str, Any]] = {
    **_TABLE_ERRORS,
    422: problem_doc("A key is not a partition key of the table."),
}
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: problem_doc("The principal is a reader."),
    413: problem_doc("The body is over 1 MiB."),
}


@router.get("", dependencies=[Depends(require_reader)])
async def list_tables(state: State, db: str | None = None) -> TableList:
    """Every registered table (of one database if ``db`` is given), by name."""
    tables = await in_thread(lambda: state.catalog().list_tables(db))
    return TableList(tables=[Table.of_table(info) for info in tables])


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={**_WRITE_ERRORS, 409: problem_doc("The table exists.")},
)
async def create_table(body: CreateTable, state: State, response: Response) -> Table:
    """Register a partitioned table (``hcat-notify table create``)."""
    info = await in_thread(
        lambda: state.catalog().create_table(
            body.name,
            location=body.location,
            partition_keys=body.partition_keys,
            storage_format=body.format,
            table_type=body.table_type,
            properties=body.properties,
            retention=body.retention,
            topic=body.topic,
        )
    )
    response.headers["Location"] = f"/v1/tables/{info.name}"
    return Table.of_table(info)


@router.get("/{table}", dependencies=[Depends(require_reader)], responses=_TABLE_ERRORS)
async def get_table(table: TablePath, state: State) -> Table:
    """A table, with its topic and STOMP destination."""
    return Table.of_table(await in_thread(lambda: state.catalog().get_table(table)))


@router.get(
    "/{table}/partitions",
    dependencies=[Depends(require_reader)],
    responses=_SPEC_ERRORS,
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
    responses={**_SPEC_ERRORS, **_WRITE_ERRORS, 409: problem_doc("A partition exists.")},
)
async def add_partitions(table: TablePath, body: NewPartitions, state: State) -> PartitionList:
    """Register new partitions and announce each (ADD_PARTITION), all or none."""
    new = [
        NewPartition(
            spec=item.spec,
            location=item.location,
            file_count=item.file_count,
            total_bytes=item.total_bytes,
        )
        for item in body.partitions
    ]
    added = await in_thread(lambda: state.catalog().add_partitions(table, new, job_id=body.job_id))
    return PartitionList(partitions=[Partition.of_partition(p) for p in added])


@router.post(
    "/{table}/done",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={**_SPEC_ERRORS, **_WRITE_ERRORS},
)
async def mark_done(table: TablePath, body: MarkDone, state: State) -> DoneRecorded:
    """Announce that every partition matching ``spec`` is complete (MARK_SET_DONE):
    ``send_mark_set_done`` over HTTP."""

    def record() -> DoneRecorded:
        catalog = state.catalog()
        info = catalog.get_table(table)
        canonical = info.spec(body.spec, partial=True).sorted()
        event_id = catalog.mark_set_done(info.name, canonical)
        return DoneRecorded(
            event_id=event_id,
            table=str(info.name),
            spec=canonical.to_path(),
            partition_spec=canonical.as_strings(),
        )

    return await in_thread(record)


@router.get(
    "/{table}/done",
    response_model=CoveringDone,
    dependencies=[Depends(require_reader)],
    responses={
        **_SPEC_ERRORS,
        404: problem_doc("No such table, or no retained mark-set-done covers the spec."),
    },
    openapi_extra=spec_openapi(),
)
async def covering_done(
    table: TablePath,
    request: Request,
    state: State,
    wait: Annotated[float, wait_query("a covering done")] = 0,
) -> Any:
    """The retained MARK_SET_DONE that covers the spec, or 404: ``curl --fail`` is a
    complete scheduler check. A done for ``datestamp=X`` covers ``datestamp=X/region=us``."""
    spec = query_spec(request, frozenset({"wait", "spec"}))
    if spec is None:
        raise InvalidSpecError("give the spec to check, e.g. ?datestamp=20110228")
    wanted: PartitionSpec = spec

    async def check() -> RetainedDone | None:
        return await in_thread(lambda: state.catalog().find_covering_done(table, wanted))

    done = await state.feed.poll(check, wait)
    if done is None:
        return problem_response(
            404,
            f"no retained mark-set-done of {table} covers {wanted.canonical()}",
            request=request,
            type_=NOT_DONE,
        )
    return JSONResponse(CoveringDone.of_done(done).model_dump(mode="json", by_alias=True))
