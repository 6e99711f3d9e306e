"""Command line: ``iobridge serve``, ``iobridge db upgrade``, ``iobridge npamp ...``,
``iobridge chat``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
import typer

from iobridge.client.chat import chat
from iobridge.conformance.check.cli import check_command
from iobridge.npamp_server.cli import app as npamp_app

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from iobridge.config import Settings

#: Plain help text (click's, no rich panels): it wraps at 80 columns without cutting a word.
HELP_STYLE: dict[str, Any] = {"rich_markup_mode": None}
app = typer.Typer(
    help="iobridge: io.Intelligence Agent Protocol backend.", no_args_is_help=True, **HELP_STYLE
)


def load_settings(config: Path | None, **overrides: Any) -> Settings:
    """Settings for a command; a bad file or value is one clear line and exit status 2."""
    from pydantic_settings import SettingsError

    from iobridge.config import Settings, UnknownSettings

    try:
        return Settings.load(config, **overrides)
    except FileNotFoundError as exc:
        message = f"config file not found: {exc.filename}"
    except tomllib.TOMLDecodeError as exc:
        message = f"config file is not valid TOML: {exc}"
    except UnknownSettings as exc:
        message = str(exc)
    except SettingsError as exc:
        message = _env_problem(exc)
    except pydantic.ValidationError as exc:
        problems = "; ".join(_setting_problem(err) for err in exc.errors(include_url=False))
        message = f"invalid configuration: {problems}"
    typer.echo(f"iobridge: {message}", err=True)
    raise typer.Exit(2)


def _setting_problem(err: Any) -> str:
    """One invalid setting, with a suggestion when a table holds a misspelt key."""
    from iobridge.config import keys_at
    from iobridge.typos import did_you_mean

    location = err["loc"]
    hint = ""
    if err["type"] == "extra_forbidden" and location:
        hint = did_you_mean(str(location[-1]), keys_at(location[:-1]))
    return f"{'.'.join(str(p) for p in location) or 'settings'}: {err['msg']}{hint}"


def _version(show: bool) -> None:
    if show:
        from iobridge import __version__

        typer.echo(f"iobridge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """iobridge: io.Intelligence Agent Protocol backend (AG-UI over SSE and N-PAMP)."""


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default 127.0.0.1; env IOBRIDGE_HOST)")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="HTTP port (default 8000; env IOBRIDGE_PORT)")
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(help="Route prefix (default /io-bridge; env IOBRIDGE_PREFIX)")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="TOML config file (default ./iobridge.toml; env IOBRIDGE_CONFIG)"),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="debug, info, warning or error (default info; env IOBRIDGE_LOG_LEVEL)"),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            help="text, or json: one object per line with runId/threadId "
            "(default text; env IOBRIDGE_LOG_FORMAT)"
        ),
    ] = None,
    npamp_port: Annotated[
        int | None,
        typer.Option(
            help="Also serve AG-UI over N-PAMP on this port (default off; env IOBRIDGE_NPAMP__PORT)"
        ),
    ] = None,
    npamp_key: Annotated[
        Path | None,
        typer.Option(
            help="N-PAMP identity private key (default: a fresh key per start; "
            "env IOBRIDGE_NPAMP__IDENTITY_KEY)"
        ),
    ] = None,
    npamp_agree: Annotated[
        bool,
        typer.Option(
            "--npamp-agree",
            help="Development: trust every peer key and agree AG-UI's protocol_id with it "
            "(refused unless bound to loopback)",
        ),
    ] = False,
    http: Annotated[
        bool, typer.Option("--http/--no-http", help="Serve HTTP (--no-http: N-PAMP only)")
    ] = True,
    workers: Annotated[
        int,
        typer.Option(min=1, max=64, help="HTTP worker processes on one port (N > 1 needs "
                     "redis_url; see docs/deployment.md)"),
    ] = 1,
) -> None:
    """Serve the backend over HTTP and/or N-PAMP (one loop and one Backend per process)."""
    npamp: dict[str, Any] = {}
    if npamp_port is not None:
        npamp["port"] = npamp_port
    if npamp_key is not None:
        npamp["identity_key"] = npamp_key
    if npamp_agree:
        npamp.update(trusted_peers="*", agui_peers="*")
    settings = load_settings(
        config,
        host=host,
        port=port,
        prefix=prefix,
        log_level=log_level,
        log_format=log_format,
        npamp=npamp or None,
    )
    if not http and settings.npamp.port is None:
        _fail("--no-http needs an N-PAMP port (--npamp-port)")
    from iobridge.config import is_loopback

    if npamp_agree and not is_loopback(settings.npamp.host or settings.host):
        _fail("--npamp-agree is for development: bind N-PAMP to a loopback address")
    if settings.npamp.identity_key is not None and not settings.npamp.identity_key.is_file():
        _fail(f"npamp.identity_key: no key file at {settings.npamp.identity_key} "
              "(make one with: iobridge npamp keygen PATH)")
    if workers > 1:
        _check_workers(settings, http=http)
    from iobridge.startup import check_settings, explain

    try:
        check_settings(settings, http=http)
        if workers > 1:
            from iobridge.workers import serve_workers

            raise typer.Exit(serve_workers(settings, workers, _serve_worker))
        run_loop(_serve(settings, http=http), settings.event_loop)
    except Exception as exc:  # database drivers raise their own classes: explain() knows them
        message = explain(exc, settings)
        if message is None:
            raise
        _fail(message)


def _check_workers(settings: Settings, *, http: bool) -> None:
    """Workers are replicas on one machine: they need what replicas need."""
    if settings.redis_url is None:
        _fail("--workers N (N > 1) needs redis_url (IOBRIDGE_REDIS_URL): workers share "
              "runs through Redis")
    if settings.database_url.startswith("memory"):
        _fail("--workers N (N > 1) needs a shared database_url (SQLite file or PostgreSQL), "
              "not memory://")
    if not http or settings.npamp.port is not None:
        _fail("--workers serves HTTP only: run N-PAMP in a process of its own")
    if settings.metrics.enabled and settings.metrics.port is not None:
        _fail("--workers N (N > 1) cannot share metrics.port: each worker has its own "
              "registry; remove metrics.port (each worker then answers /metrics on the HTTP port)")


def _serve_worker(settings: Settings, sock: Any) -> None:
    """One worker process: one Backend, HTTP on the socket the parent bound."""
    run_loop(_serve(settings, http=True, sock=sock), settings.event_loop)


def run_loop(main: Coroutine[Any, Any, None], kind: str) -> None:
    """Run the server's coroutine on the chosen loop (``auto``: uvloop when installed)."""
    from iobridge.eventloop import LoopUnavailable, run

    try:
        run(main, kind)
    except LoopUnavailable as exc:
        _fail(str(exc))


def _env_problem(exc: Exception) -> str:
    """A setting from the environment that did not parse, named as the variable to fix."""
    field = re.search(r'field "(\w+)"', str(exc))
    if field is None:
        return f"invalid environment variable: {exc}"
    name = f"IOBRIDGE_{field.group(1).upper()}"
    cause = f" ({exc.__cause__})" if exc.__cause__ else ""
    return (
        f"{name}: not valid JSON{cause}; list and table settings take JSON, "
        f"e.g. {name}='[\"https://app.example\"]'"
    )

def _fail(message: str) -> None:
    typer.echo(f"iobridge: {message}", err=True)
    raise typer.Exit(2)


#: Collector thresholds while serving: a young generation of 50,000 objects instead of 700.
#: A server allocates in bursts of short-lived objects (a request, a run), which reference
#: counting frees (a run leaves no cycles: ``tests/runtime/test_reference_cycles.py``); a
#: young collection only walks the requests still in flight. At 700, collections ran every few
#: requests and a teardown of 10,000 open runs cost 4.2 s of CPU instead of 1.6 s
#: (``bench/idle_runs.py``); at 20,000, a burst of 200 chat turns still took two collections
#: (8-9 % of the server's CPU, ``bench/load_runs.py`` 200 x 5), at 50,000 about one in ten
#: bursts does.
SERVING_GC_THRESHOLDS = (50_000, 20, 100)


def tune_collector_for_serving() -> None:
    """Tune this process's cycle collector for serving (``iobridge serve`` only: a Backend
    mounted into someone else's app changes nothing process-wide).

    What the process built at startup (modules, the app, agents, models) lives as long as
    the process: it is moved out of the collector's view, or every full collection under
    load walks it again (tens of milliseconds each, seen in ``bench/load_runs.py``); and
    the thresholds become :data:`SERVING_GC_THRESHOLDS`.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_GC_THRESHOLDS)


async def _serve(settings: Settings, *, http: bool, sock: Any = None) -> None:
    """Open one Backend and serve it until SIGINT/SIGTERM, then exit cleanly (status 0)."""
    import asyncio
    import contextlib
    import signal

    from iobridge.app import Backend
    from iobridge.observability.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Backend(settings) as backend, contextlib.AsyncExitStack() as stack:
        tune_collector_for_serving()
        for line in _banner(settings, backend):
            typer.echo(f"iobridge: {line}")
        metrics = settings.metrics
        if metrics.enabled and metrics.port is not None:
            listener = backend.metrics.serve(metrics.host or settings.host, metrics.port)
            stack.callback(listener.server_close)
            stack.callback(listener.shutdown)
            typer.echo(f"iobridge: metrics on http://{metrics.host or settings.host}:"
                       f"{listener.server_port}/metrics")
        if settings.npamp.port is not None:
            from iobridge.npamp_server.server import serving

            npamp = await stack.enter_async_context(serving(backend))
            typer.echo(
                f"iobridge: N-PAMP on {npamp.address}, identity {npamp.identity.fingerprint}"
            )
        if http and sock is None:
            if settings.port == 0:  # bound here, so the banner names the port the kernel chose
                sock = stack.enter_context(_listening_socket(settings.host))
            port = settings.port if sock is None else sock.getsockname()[1]
            base = f"http://{settings.host}:{port}"
            typer.echo(f"iobridge: HTTP on {base}{settings.prefix}, docs {base}/docs"
                       + (f", playground {base}/playground" if settings.playground else ""))
        if http:
            from iobridge.http.server import serve_http

            await serve_http(backend, stop, before_exit=backend.shutdown, sock=sock)
        else:
            await stop.wait()
            await backend.shutdown()


def _listening_socket(host: str) -> Any:
    """A TCP socket listening on ``host`` at a port the kernel picks (``--port 0``)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=2048)


def _banner(settings: Settings, backend: Any) -> list[str]:
    """What a server starts with: where threads are kept, each agent and whether it can run,
    and the ``IOBRIDGE_*`` variables that name no setting (likely typos)."""
    import os

    from iobridge.config import unknown_environment
    from iobridge.startup import describe_database

    lines = [f"database: {describe_database(settings.database_url)}"]
    default = backend.catalog.default_id
    for agent in backend.list_agents():
        mark = " (default)" if agent["id"] == default else ""
        state = ("available" if agent.get("status") != "unavailable"
                 else f"unavailable: {agent.get('reason') or 'no reason given'}")
        lines.append(f"agent {agent['id']}{mark}: {state}")
    lines.extend(f"warning: {problem}" for problem in unknown_environment(os.environ))
    return lines


db_app = typer.Typer(help="Thread store maintenance.", no_args_is_help=True, **HELP_STYLE)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    config: Annotated[Path | None, typer.Option(help="TOML config file")] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database URL [env IOBRIDGE_DATABASE_URL]")
    ] = None,
) -> None:
    """Apply the schema migrations to the configured database."""
    import asyncio

    from iobridge.startup import check_database_url, explain
    from iobridge.store.migrate import upgrade

    settings = load_settings(config, database_url=database_url)
    try:
        check_database_url(settings.database_url)
        asyncio.run(upgrade(settings.database_url))
    except Exception as exc:
        message = explain(exc, settings)
        if message is None:
            raise
        _fail(message)
    typer.echo("database is at the latest schema")


app.add_typer(npamp_app, name="npamp")
app.command("check")(check_command)
app.command("chat")(chat)


def main() -> None:
    """Entry point of the ``iobridge`` script."""
    app()


if __name__ == "__main__":
    main()
