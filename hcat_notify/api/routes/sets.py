"""``/v1/tables/{table}/expectation`` and ``/v1/tables/{table}/sets``: a table's
completeness rule (``hcat-notify table expect``) and where its sets stand
(``hcat-notify completeness``); docs/completeness.md."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hcat_notify.api.auth import require_reader, require_writer
from hcat_notify.api.contract import NO_RULE
from hcat_notify.api.params import query_spec, spec_openapi
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc, problem_response
from hcat_notify.api.routes.tables import SPEC_ERRORS, WRITE_ERRORS, State, TablePath
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.set_models import Rule, RuleVersion, SetList, SetReportModel
from hcat_notify.api.state import in_thread
from hcat_notify.model.principals import Principal
from hcat_notify.store.set_reports import MAX_LISTED_SETS

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/tables", tags=["completeness"], responses=PROBLEM_RESPONSES, route_class=ApiRoute
)
Writer = Annotated[Principal, Depends(require_writer)]
_RULE_ERRORS: dict[int | str, dict[str, Any]] = {
    **WRITE_ERRORS,
    400: problem_doc("The rule is malformed or does not fit the table (nothing written)."),
    404: problem_doc("No such table."),
}


@router.put("/{table}/expectation", responses=_RULE_ERRORS)
async def put_expectation(
    table: TablePath, body: Rule, state: State, principal: Writer
) -> RuleVersion:
    """Make ``body`` the table's completeness rule (a new version, announced with a
    SET_RULE): ``hcat-notify table expect``. Writers only."""

    def write() -> RuleVersion:
        catalog = state.catalog()
        catalog.sets.expect(table, body.stored(), principal=principal.name)
        return _in_force(state, table)

    return await in_thread(write)


@router.delete("/{table}/expectation", responses=_RULE_ERRORS)
async def delete_expectation(table: TablePath, state: State, principal: Writer) -> RuleVersion:
    """Remove the table's rule (a new version without one, announced):
    ``hcat-notify table expect --remove``. 400 when it has none. Writers only."""

    def remove() -> RuleVersion:
        catalog = state.catalog()
        version = catalog.sets.remove(table, principal=principal.name)
        found = [item for item in catalog.sets.history(table) if item.version == version]
        return RuleVersion.of_record(found[-1])

    return await in_thread(remove)


@router.get(
    "/{table}/expectation",
    dependencies=[Depends(require_reader)],
    response_model=RuleVersion,
    responses={404: problem_doc("No such table, or it has no completeness rule.")},
)
async def get_expectation(table: TablePath, request: Request, state: State) -> Any:
    """The table's completeness rule in force, with its version; 404 of type
    ``urn:hcat-notify:problem:no-rule`` when it has none."""
    record = await in_thread(lambda: state.catalog().sets.rule(table))
    if record is None:
        return problem_response(
            404, f"table {table} has no completeness rule", request=request, type_=NO_RULE
        )
    return RuleVersion.of_record(record)


def _in_force(state: State, table: str) -> RuleVersion:
    record = state.catalog().sets.rule(table)
    assert record is not None  # just written
    return RuleVersion.of_record(record)


@router.get(
    "/{table}/sets",
    dependencies=[Depends(require_reader)],
    responses={**SPEC_ERRORS, 400: problem_doc("The table has no rule, or a bad spec.")},
    openapi_extra=spec_openapi(
        "The set (exactly the rule's set keys, e.g. datestamp=20261126): its report; a "
        "partial spec or none: the known sets it covers, newest first. KEY=VALUE "
        "parameters, or spec=k1=v1/k2=v2."
    ),
)
async def list_sets(
    table: TablePath,
    request: Request,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED_SETS)] = 30,
    one: Annotated[
        bool, Query(description="The spec must be one set (400 when it is not).")
    ] = False,
) -> SetList:
    """Where the table's sets stand: expected, present and missing parts, the done
    (generation, reason, time) or the deadline and how late it is."""
    spec = query_spec(request, frozenset({"limit", "one", "spec"}))

    def read() -> SetList:
        sets = state.catalog().sets
        rule = sets.rule(table)
        set_keys = None if rule is None or rule.rule is None else set(rule.rule.set_keys)
        if spec is not None and (one or set(spec.keys) == set_keys):  # one set: its report
            return SetList(sets=[SetReportModel.of_report(sets.state(table, spec))])
        found = sets.list(table, spec, limit=limit)
        return SetList(sets=[SetReportModel.of_report(report) for report in found])

    return await in_thread(read)
