"""``hcat-notify serve`` (the HTTP API) and ``hcat-notify hash-secret`` (a principal's
stored secret). FastAPI and uvicorn are imported only when the command runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import click

from hcat_notify.cli.common import (
    EXIT_INTERRUPTED,
    CliContext,
    emit,
    handle_errors,
    output_option,
)
from hcat_notify.errors import ConfigError, InvalidInputError

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

    Stateless: run as many as you like behind a load balancer. SIGTERM (exit 0) or
    SIGINT (exit 130) stop it after the requests in flight; waiting long polls answer at
    once. A bad TLS file, host or busy port: one line, exit 2.
    """
    from hcat_notify.store.engine import redact

    settings = obj.settings
    count = workers or settings.api_workers
    bind_host = host or settings.api_host
    # Every start-up mistake is one line before anything is announced (and before the
    # server's imports): the TLS files are read and the socket is bound here, and
    # uvicorn serves on that socket.
    _check_tls(ssl_certfile, ssl_keyfile)
    sock = _bind(bind_host, settings.api_port if port is None else port)
    try:
        import uvicorn

        from hcat_notify.api.app import create_app
        from hcat_notify.api.protocol import ApiHttpProtocol
    except ImportError as exc:
        sock.close()
        raise click.ClickException(_MISSING_EXTRA.format(error=exc)) from None
    options: dict[str, Any] = {
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
    with contextlib.closing(sock):
        shown = f"[{bind_host}]" if ":" in bind_host else bind_host
        click.echo(
            f"hcat-notify API on {'https' if ssl_certfile else 'http'}://{shown}:"
            f"{sock.getsockname()[1]} ({count} worker(s)), catalog "
            f"{redact(settings.database_url)}",
            err=True,
        )
        if count == 1:
            config = uvicorn.Config(create_app(settings), **options)
            interrupted = _serve_one(uvicorn.Server(config), sock)
        else:
            _export(obj)
            with _multiprocess_metrics(count):
                config = uvicorn.Config(
                    "hcat_notify.api.app:create_app", factory=True, workers=count, **options
                )
                interrupted = _serve_many(config, sock)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)  # as the relay: SIGTERM exits 0, SIGINT 130


def _check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Load the TLS certificate and key as the server will, so that a bad one is one
    line (ConfigError), not a traceback after the server was announced."""
    if certfile is None:
        if keyfile is not None:
            raise ConfigError("--ssl-keyfile needs --ssl-certfile")
        return
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as exc:
        key = f"key {keyfile}" if keyfile else "no --ssl-keyfile (nor a key in the certificate)"
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(
            f"cannot use TLS certificate {certfile} with {key}: {reason} "
            "(both must be PEM files, the key matching the certificate)"
        ) from None


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: one the kernel picks), bound as
    uvicorn binds it; a bad host, an address not of this machine or a busy port is a
    ConfigError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # socket.gaierror too: a host name that does not resolve
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (--host, --port)"
        ) from None
    # Listening now: a client that connects once the banner is out waits in the
    # backlog (uvicorn's) until the server accepts, rather than being refused.
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _serve_one(server: Any, sock: socket.socket) -> bool:
    """Serve in this process until SIGTERM or SIGINT (each a graceful stop); whether it
    was SIGINT. uvicorn handles the signals while it serves and raises them again once
    it has stopped: they come here then."""
    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signum)
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started and not received:
        raise ConfigError("the API did not start (the lines above say why)")
    return signal.SIGINT in received


def _serve_many(config: Any, sock: socket.socket) -> bool:
    """Serve in ``config.workers`` processes until SIGTERM or SIGINT; whether SIGINT."""
    from uvicorn.supervisors import Multiprocess

    class Workers(Multiprocess):
        interrupted = False

        def handle_int(self) -> None:
            self.interrupted = True
            super().handle_int()

    supervisor = Workers(config, sockets=[sock])
    supervisor.run()
    return supervisor.interrupted


@click.command("hash-secret")
@click.option(
    "--secret-stdin", is_flag=True, help="Read the secret from standard input (one line)."
)
@output_option
@click.pass_obj
@handle_errors
def hash_secret(obj: CliContext, secret_stdin: bool) -> None:
    """Print the stored form of an API principal's secret, for [api.principals].

    Asks for the secret twice on a terminal (or reads one line from stdin with
    --secret-stdin).
    """
    from hcat_notify.model.principals import hash_secret as make_hash

    if secret_stdin:
        line = sys.stdin.readline()
        if not line:
            raise InvalidInputError("no secret on standard input (it ended at once)")
        secret = line.rstrip("\n")
    elif not sys.stdin.isatty():
        # getpass would warn, then read a pipe (or stop at its end as if interrupted).
        raise InvalidInputError(
            "no terminal to ask for the secret on: give it on standard input with --secret-stdin"
        )
    else:
        secret = click.prompt("secret", hide_input=True, confirmation_prompt=True)
    if not secret:
        raise click.ClickException("the secret must not be empty")
    stored = make_hash(secret)
    emit(obj, {"hash": stored}, lambda: stored)
