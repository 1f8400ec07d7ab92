"""``hcat-notify serve`` (the HTTP API) and ``hcat-notify hash-secret`` (a principal's
stored secret). FastAPI and uvicorn are imported only when the command runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import click

from hcat_notify.cli.common import CliContext, emit, handle_errors, output_option

__all__ = ["hash_secret", "serve"]

_MISSING_EXTRA = "the HTTP API needs the [api] extra: pip install 'hcat-notify[api]' ({error})"


@contextlib.contextmanager
def _multiprocess_metrics(workers: int) -> Iterator[None]:
    """With several workers, their request metrics go to files one scrape sums up."""
    from hcat_notify.api.metrics import MULTIPROC_ENV

    if workers == 1 or os.environ.get(MULTIPROC_ENV):
        yield
        return
    directory = tempfile.mkdtemp(prefix="hcat-notify-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def _export(obj: CliContext) -> None:
    """Hand the global options to worker processes, which load settings themselves."""
    if obj.config_file is not None:
        os.environ["HCAT_NOTIFY_CONFIG"] = str(obj.config_file)
    for name, value in obj.overrides.items():
        if value is not None:
            os.environ[f"HCAT_NOTIFY_{name.upper()}"] = str(value)


@click.command()
@click.option("--host", help="Address to bind (HCAT_NOTIFY_API_HOST).  [default: 127.0.0.1]")
@click.option(
    "--port", type=click.IntRange(0, 65_535), help="Port (HCAT_NOTIFY_API_PORT).  [default: 8080]"
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    help="Worker processes (HCAT_NOTIFY_API_WORKERS).  [default: 1]",
)
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False), help="TLS cert.")
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False), help="TLS key.")
@click.option("--access-log", is_flag=True, help="Log every request (uvicorn's access log).")
@click.pass_obj
@handle_errors
def serve(
    obj: CliContext,
    host: str | None,
    port: int | None,
    workers: int | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    access_log: bool,
) -> None:
    """Serve the HTTP API: tables, partitions, dones, events, health, metrics, status page.

    Stateless: run as many as you like behind a load balancer. SIGTERM or SIGINT stop it
    after the requests in flight; waiting long polls answer at once.
    """
    try:
        import uvicorn

        from hcat_notify.api.app import create_app
        from hcat_notify.api.protocol import ApiHttpProtocol
    except ImportError as exc:
        raise click.ClickException(_MISSING_EXTRA.format(error=exc)) from None
    settings = obj.settings
    count = workers or settings.api_workers
    options = {
        "host": host or settings.api_host,
        "port": settings.api_port if port is None else port,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
        "access_log": access_log,
        "log_level": "info" if access_log else "warning",
        # Long polls answer as the server begins to stop (ApiHttpProtocol.shutdown); this
        # bounds only the other requests still running.
        "timeout_graceful_shutdown": 5,
        "timeout_keep_alive": 5,
        "http": ApiHttpProtocol,
        "server_header": False,
    }
    click.echo(
        f"hcat-notify API on {'https' if ssl_certfile else 'http'}://{options['host']}:"
        f"{options['port']} ({count} worker(s)), catalog {settings.database_url}",
        err=True,
    )
    if count == 1:
        uvicorn.run(create_app(settings), **options)  # type: ignore[arg-type]
        return
    _export(obj)
    with _multiprocess_metrics(count):
        uvicorn.run(
            "hcat_notify.api.app:create_app",
            factory=True,
            workers=count,
            **options,  # type: ignore[arg-type]
        )


@click.command("hash-secret")
@click.option(
    "--secret-stdin", is_flag=True, help="Read the secret from standard input (one line)."
)
@output_option
@click.pass_obj
@handle_errors
def hash_secret(obj: CliContext, secret_stdin: bool) -> None:
    """Print the stored form of an API principal's secret, for [api.principals].

    Asks for the secret twice (or reads one line from stdin with --secret-stdin).
    """
    from hcat_notify.model.principals import hash_secret as make_hash

    if secret_stdin:
        secret = sys.stdin.readline().rstrip("\n")
    else:
        secret = click.prompt("secret", hide_input=True, confirmation_prompt=True)
    if not secret:
        raise click.ClickException("the secret must not be empty")
    stored = make_hash(secret)
    emit(obj, {"hash": stored}, lambda: stored)
