"""``/v1/tables/{table}/done``: "is this spec done?" (a scheduler's check, the API's
hottest route) and ``send_mark_set_done`` over HTTP. Included before the other table
routes, so that the check is matched first."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fastapi import APIRouter, Depends, Request, Response
from starlette.routing import Match, Route
from starlette.types import Scope

from hcat_notify.api.auth import BASIC_SECURITY, authorize, require_writer
from hcat_notify.api.contract import NOT_DONE
from hcat_notify.api.datamodels import CoveringDone, DoneRecorded, MarkDone
from hcat_notify.api.feed import Batch
from hcat_notify.api.params import (
    min_generation_openapi,
    query_min_generation,
    query_spec,
    query_wait,
    spec_openapi,
    wait_openapi,
)
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc, problem_response
from hcat_notify.api.routes.tables import (
    SPEC_ERRORS,
    TABLE_PARAMETER,
    WRITE_ERRORS,
    State,
    TablePath,
)
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.errors import InvalidSpecError
from hcat_notify.model.principals import Role
from hcat_notify.model.specs import PartitionSpec

__all__ = ["DONE_PATH", "DoneQuery", "check_route", "done_query", "router"]

DONE_PATH = "/v1/tables/{table}/done"
"""The check's route template (its requests' metrics label)."""

router = APIRouter(
    prefix="/v1/tables", tags=["tables"], responses=PROBLEM_RESPONSES, route_class=ApiRoute
)


@router.get(
    DONE_PATH.removeprefix("/v1/tables"),
    response_model=CoveringDone,
    responses={
        **SPEC_ERRORS,
        404: problem_doc("No such table, or no retained mark-set-done covers the spec."),
    },
    openapi_extra={
        **BASIC_SECURITY,
        "parameters": [
            TABLE_PARAMETER,
            wait_openapi("a covering done"),
            min_generation_openapi(),
            *spec_openapi()["parameters"],
        ],
    },
)
async def covering_done(request: Request) -> Any:
    """The retained MARK_SET_DONE that covers the spec, or 404: ``curl --fail`` is a
    complete scheduler check. A done for ``datestamp=X`` covers ``datestamp=X/region=us``.
    With ``min_generation``, only a done of that set generation or a later one counts."""
    query = await done_query(request)
    body = await query.state.feed.poll(query.check, query.wait, key=query.key, batch=query.batch)
    if body is None:
        return query.not_done(request.url.path)
    return Response(body, media_type="application/json")


@dataclass(frozen=True, slots=True)
class DoneQuery:
    """One scheduler's check, read from its request: what it asks and how long it waits."""

    state: ApiState
    table: str
    spec: PartitionSpec
    minimum: int | None
    wait: float

    @property
    def key(self) -> tuple[str, str, int | None]:
        """Equal for the checks that read the same (the waiters that share a read)."""
        return (self.table, self.spec.canonical(), self.minimum)

    async def check(self) -> str | None:
        """The covering done's JSON, or None: rendered once per read, for every waiter
        of the key."""
        table, spec, minimum = self.table, self.spec, self.minimum
        done = await self.state.read(
            lambda catalog: catalog.find_covering_done(table, spec, min_generation=minimum)
        )
        return None if done is None else CoveringDone.of_done(done).model_dump_json(by_alias=True)

    @property
    def batch(self) -> Batch:
        """The checks of one table are read together (:meth:`check_each`)."""
        return ("done", self.table), self.check_each

    async def check_each(self, keys: Sequence[Hashable]) -> list[object]:
        """:meth:`check` of each :attr:`key` of this table, in one read: per key the
        covering done's JSON, None, or the error its own check would raise."""
        ours = cast("Sequence[tuple[str, str, int | None]]", keys)  # our :attr:`key`s
        wanted = [(PartitionSpec.parse(canonical), minimum) for _, canonical, minimum in ours]
        table = self.table
        found = await self.state.read(lambda catalog: catalog.find_covering_dones(table, wanted))
        return [
            done
            if done is None or isinstance(done, Exception)
            else CoveringDone.of_done(done).model_dump_json(by_alias=True)
            for done in found
        ]

    def not_done(self, path: str) -> Response:
        """The 404 of a check that found no covering done (within its wait)."""
        return problem_response(
            404,
            f"no retained mark-set-done of {self.table} covers {self.spec.canonical()}"
            + (f" at generation {self.minimum} or later" if self.minimum is not None else ""),
            instance=path,
            type_=NOT_DONE,
        )


async def done_query(request: Request) -> DoneQuery:
    """The check a request asks for, its credentials checked first.

    Raises:
        HTTPException: 401 or 403 (no, unknown or insufficient credentials).
        InvalidInputError: a malformed ``wait`` or ``min_generation``.
        InvalidSpecError: no spec, or a malformed one.
    """
    # The scheduler's hot path: it checks its credentials and reads its parameters itself
    # (FastAPI's dependency solving cost more than the catalog read).
    await authorize(request, Role.READER)
    state = await state_of(request)
    wait = query_wait(request)
    minimum = query_min_generation(request)
    spec = query_spec(request, frozenset({"wait", "spec", "min_generation"}))
    if spec is None:
        raise InvalidSpecError("give the spec to check, e.g. ?datestamp=20110228")
    return DoneQuery(state, request.path_params["table"], spec, minimum, wait)


@router.post(
    "/{table}/done",
    status_code=201,
    dependencies=[Depends(require_writer)],
    responses={**SPEC_ERRORS, **WRITE_ERRORS},
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


class _CheckRoute(Route):
    """A plain Starlette route (no dependency solving) that names itself in the scope
    as FastAPI's routes do, so request metrics label it by its template."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def check_route() -> Route:
    """The scheduler's check as a plain route, for the front of the application's
    routes: matched before every other route, answered without FastAPI's per-request
    dependency work. The FastAPI route above stays for the OpenAPI document (and
    answers the same way)."""
    return _CheckRoute(DONE_PATH, covering_done, methods=["GET"], include_in_schema=False)
