"""Disposable catalog databases for the scale benchmarks' rows: SQLite files in the run's
directory, or PostgreSQL databases on a server (a private cluster from
``deploy/local/postgres.sh`` unless an admin URL is given), dropped at the end."""

from __future__ import annotations

import contextlib
import resource
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from _support import HOST, free_port, postgres
from sqlalchemy import URL, create_engine, make_url, text


@contextlib.contextmanager
def admin_connection(server: URL) -> Iterator[Any]:
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@contextlib.contextmanager
def catalog_urls(
    backend: str, workdir: Path, names: Sequence[str], admin_url: str | None = None
) -> Iterator[list[str]]:
    """One empty catalog URL per name on ``backend`` (``sqlite`` or ``postgresql``)."""
    if backend == "sqlite":
        yield [f"sqlite:///{workdir}/{name}.db" for name in names]
        return
    if backend != "postgresql":
        raise SystemExit(f"unknown backend {backend!r}")
    port = free_port()
    if admin_url is None:
        postgres(workdir, port, "start")
    server = make_url(admin_url or f"postgresql+psycopg://postgres@{HOST}:{port}/postgres")
    databases = [f"scale_{name}_{uuid.uuid4().hex[:8]}" for name in names]
    try:
        with admin_connection(server) as conn:
            for database in databases:
                conn.execute(text(f"CREATE DATABASE {database}"))
        yield [server.set(database=d).render_as_string(hide_password=False) for d in databases]
    finally:
        if admin_url is None:
            postgres(workdir, port, "destroy")
        else:
            with admin_connection(server) as conn:
                for database in databases:
                    conn.execute(text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit of open files towards ``wanted`` (children
    inherit it); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, wanted)) if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def rss_bytes(pid: int) -> int:
    """A process's resident set size, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
