"""Catalog rows as an older version left them: locations it stored without today's
checks (an overlap, a path in a table's job directories) or unresolved, keyed as
migration 0023 keys what it keeps: the catalog of an operator who upgrades."""

from __future__ import annotations

from sqlalchemy import create_engine, select, update

from hcat_notify.store import Catalog
from hcat_notify.store.models import PartitionRow, TableRow
from hcat_notify.warehouse import key_outside, location_key


def as_an_older_version_stored(catalog: Catalog, table: str, location: str, path: str = "") -> None:
    """Write a location as a version without the overlap check (or that stored locations
    unresolved) left it, keyed as migration 0023 keys what it keeps: the catalog of an
    operator who upgrades."""
    db, name = table.split(".")
    engine = create_engine(catalog.settings.database_url)
    try:
        with engine.begin() as connection:
            table_id = connection.execute(
                TableRow.__table__.select().where(
                    TableRow.db_name == db, TableRow.table_name == name
                )
            ).one()[0]
            table_key = connection.execute(
                select(TableRow.location_key).where(TableRow.id == table_id)
            ).scalar_one()
            if path:
                statement = update(PartitionRow).where(
                    PartitionRow.table_id == table_id, PartitionRow.path_spec == path
                )
                keyed = {"outside_key": key_outside(location_key(location).text, table_key)}
            else:
                statement = update(TableRow).where(TableRow.id == table_id)
                keyed = {"location_key": location_key(location).text}
            connection.execute(statement.values(location=location, **keyed))
    finally:
        engine.dispose()
