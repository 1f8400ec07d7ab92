"""Where a location given over the HTTP API may lie: inside a warehouse root, or inside
one of the operator's ``api_external_roots``; the command line is not bound by this
(docs/api.md, "Locations over the API"). Checked before anything is registered or
measured, from the location's text and its symlinks only, so that a refusal says
nothing of what the server's filesystem holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hcat_notify.config import Settings
from hcat_notify.errors import LocationOutsideWarehouseError
from hcat_notify.model.names import TableName
from hcat_notify.store.catalog import Catalog
from hcat_notify.warehouse import Warehouse, canonical_location

__all__ = ["check_api_location", "check_partition_locations", "check_table_location"]


def check_api_location(
    settings: Settings, location: str, *, what: str, table: bool = False
) -> None:
    """Refuse a location the API may not register (see the module's docstring).

    Args:
        settings: the server's settings (its warehouse and API external roots).
        location: the location as the request gives it.
        what: how the message names it (``location of table web.clicks``).
        table: a table's location (white space around it dropped, a relative path
            allowed, as the catalog takes one).

    Raises:
        InvalidInputError: a malformed location (see
            :func:`~hcat_notify.warehouse.canonical_location`).
        LocationOutsideWarehouseError: outside every warehouse root and API external
            root, symlinks resolved; the same answer whether it exists or not.
    """
    where = canonical_location(location, what=what, relative=table, strip=table)
    warehouse = Warehouse.of(settings)
    if warehouse.contains(where) or Warehouse(settings.api_external_roots).contains(where):
        return
    external = ", ".join(settings.api_external_roots) or "none"
    raise LocationOutsideWarehouseError(
        f"{what} {location!r} is outside the warehouse roots ({', '.join(warehouse.roots)}) "
        f"and the API's external roots ({external}), symlinks resolved: the API registers "
        "locations only inside them (the operator may list more in api_external_roots); "
        "nothing was registered"
    )


def check_table_location(settings: Settings, name: str, location: str) -> None:
    """:func:`check_api_location` for a new table's location; a malformed name or an
    empty location is left to the catalog to refuse, with its own message."""
    if not location.strip():
        return
    table = TableName.parse(name)
    check_api_location(settings, location, what=f"location of table {table}", table=True)


def check_partition_locations(
    catalog: Catalog, table: str, located: Sequence[tuple[Mapping[str, str | None], str]]
) -> None:
    """:func:`check_api_location` for partitions of ``table`` (full specs with their
    locations), after the table and each spec are checked as the catalog checks them.

    Raises:
        TableNotFoundError: no such table.
        InvalidInputError: a spec that is not a full spec of the table.
        LocationOutsideWarehouseError: see :func:`check_api_location`.
    """
    info = catalog.get_table(table)
    for spec, location in located:
        full = info.spec(spec, partial=False)
        what = f"location of partition {full.to_path()} of {info.name}"
        check_api_location(catalog.settings, location, what=what)
