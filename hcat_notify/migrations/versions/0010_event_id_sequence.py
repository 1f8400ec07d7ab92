"""PostgreSQL: event ids from a sequence, visible to readers up to a horizon.

Until now every writer of events updated the one row of ``hcat_event_counter`` and
held its lock to commit: events became visible in id order, and concurrent writers ran
one after another. On PostgreSQL ids now come from ``hcat_event_id_seq`` through
``hcat_allocate_event_ids(n)``, and readers that must see events in id order (the
relays, catch-up, the API's event feed) read only up to ``hcat_event_horizon()``: the
highest id at or below which every id is committed or rolled back. How the two
functions use advisory locks is in docs/architecture.md ("Event ids").

SQLite keeps the counter (it has one writer at a time anyway).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Advisory lock keys. The gate: (GATE, 0) in the two-integer form. The id locks: one
# bigint key per transaction, ID_SPACE in its top 16 bits and the transaction's lowest
# event id below (ids stay under 2^48).
GATE = 0x48434E54  # "HCNT"
ID_SPACE = 0x4843  # "HC"

_ALLOCATE = f"""
CREATE FUNCTION hcat_allocate_event_ids(n integer) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    lowest bigint;
    highest bigint;
BEGIN
    IF n IS NULL OR n < 1 THEN
        RAISE EXCEPTION 'hcat_allocate_event_ids: count must be at least 1, got %', n;
    END IF;
    -- The gate is a session lock: taken and released inside the guarded block, so that
    -- a cancel arriving between any two statements cannot leave it held.
    BEGIN
        -- Shared: writers do not wait for each other; a reader computing the horizon
        -- takes it exclusively, so it never sees an id handed out but not locked yet.
        PERFORM pg_advisory_lock_shared({GATE}, 0);
        SELECT array_agg(nextval('hcat_event_id_seq') ORDER BY g) INTO ids
          FROM generate_series(1, n) AS g;
        SELECT min(v), max(v) INTO lowest, highest FROM unnest(ids) AS v;
        IF highest >= (1::bigint << 48) THEN
            RAISE EXCEPTION 'hcat_allocate_event_ids: event id % is past 2^48', highest;
        END IF;
        -- Held to the end of the transaction: the horizon stays below this id until the
        -- transaction has committed (or rolled back). One lock per transaction: its
        -- first ids are its lowest, and a lock per call would fill the lock table.
        IF coalesce(current_setting('hcat.event_id_locked', true), '') = '' THEN
            PERFORM pg_advisory_xact_lock(({ID_SPACE}::bigint << 48) | lowest);
            PERFORM set_config('hcat.event_id_locked', lowest::text, true);
        END IF;
        PERFORM pg_advisory_unlock_shared({GATE}, 0);
    EXCEPTION WHEN query_canceled OR others THEN
        PERFORM pg_advisory_unlock_shared({GATE}, 0);
        RAISE;
    END;
    RETURN ids;
END
$$
"""

_HORIZON = f"""
CREATE FUNCTION hcat_event_horizon() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    handed_out bigint;
    oldest bigint;
BEGIN
    BEGIN
        PERFORM pg_advisory_lock({GATE}, 0);
        SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END
          INTO handed_out FROM hcat_event_id_seq;
        SELECT min(((l.classid::bigint & 65535) << 32) | l.objid::bigint)
          INTO oldest
          FROM pg_locks l
         WHERE l.locktype = 'advisory'
           AND l.objsubid = 1
           AND (l.classid::bigint >> 16) = {ID_SPACE}
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());
        PERFORM pg_advisory_unlock({GATE}, 0);
    EXCEPTION WHEN query_canceled OR others THEN
        PERFORM pg_advisory_unlock({GATE}, 0);
        RAISE;
    END;
    IF oldest IS NULL THEN
        RETURN handed_out;
    END IF;
    RETURN least(handed_out, oldest - 1);
END
$$
"""


# A process of an older version still running would go on taking ids from the counter,
# the same ids as the sequence's: it fails instead, saying why.
_RETIRED = """
CREATE FUNCTION hcat_event_counter_retired() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'event ids come from hcat_allocate_event_ids() since catalog migration '
        '0010, not from hcat_event_counter: this process runs an older hcat-notify; '
        'restart it with the version that migrated the catalog';
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Wait for, then hold off, older writers still updating the counter: the sequence
    # starts after their ids (the trigger below then refuses theirs).
    op.execute("LOCK TABLE hcat_event_counter IN SHARE ROW EXCLUSIVE MODE")
    op.execute("CREATE SEQUENCE hcat_event_id_seq AS bigint MINVALUE 1 START 1 CACHE 1")
    op.execute(
        "SELECT setval('hcat_event_id_seq', greatest(last_event_id, 1), last_event_id > 0) "
        "FROM hcat_event_counter WHERE id = 1"
    )
    op.execute(_ALLOCATE)
    op.execute(_HORIZON)
    op.execute(_RETIRED)
    op.execute(
        "CREATE TRIGGER hcat_event_counter_retired BEFORE UPDATE ON hcat_event_counter "
        "FOR EACH ROW EXECUTE FUNCTION hcat_event_counter_retired()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER hcat_event_counter_retired ON hcat_event_counter")
    op.execute("DROP FUNCTION hcat_event_counter_retired()")
    op.execute(
        "UPDATE hcat_event_counter SET last_event_id = "
        "(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM hcat_event_id_seq) "
        "WHERE id = 1"
    )
    op.execute("DROP FUNCTION hcat_event_horizon()")
    op.execute("DROP FUNCTION hcat_allocate_event_ids(integer)")
    op.execute("DROP SEQUENCE hcat_event_id_seq")
