"""Command line: ``iobridge serve``, ``iobridge db upgrade``, ``iobridge npamp ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from iobridge.npamp_server.cli import app as npamp_app

app = typer.Typer(help="iobridge: io.Intelligence Agent Protocol backend.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """iobridge: io.Intelligence Agent Protocol backend (AG-UI over SSE and N-PAMP)."""


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [env IOBRIDGE_HOST]")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port [env IOBRIDGE_PORT]")] = None,
    prefix: Annotated[str | None, typer.Option(help="Route prefix [env IOBRIDGE_PREFIX]")] = None,
    config: Annotated[
        Path | None, typer.Option(help="TOML config file [env IOBRIDGE_CONFIG]")
    ] = None,
    npamp_port: Annotated[
        int | None,
        typer.Option(help="Also serve AG-UI over N-PAMP on this port [env IOBRIDGE_NPAMP__PORT]"),
    ] = None,
) -> None:
    """Serve the bridge over HTTP, and over N-PAMP when a port is set (one process, one loop)."""
    import uvicorn

    from iobridge.config import Settings
    from iobridge.http.app import create_app
    from iobridge.npamp_server.server import install

    npamp = {"port": npamp_port} if npamp_port is not None else None
    settings = Settings.load(config, host=host, port=port, prefix=prefix, npamp=npamp)
    application = create_app(settings)
    install(application, application.state.bridge)
    uvicorn.run(
        application,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
    )


db_app = typer.Typer(help="Thread store maintenance.", no_args_is_help=True)
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

    from iobridge.config import Settings
    from iobridge.store.migrate import upgrade

    settings = Settings.load(config, database_url=database_url)
    asyncio.run(upgrade(settings.database_url))
    typer.echo("database is at the latest schema")


app.add_typer(npamp_app, name="npamp")


def main() -> None:
    """Entry point of the ``iobridge`` script."""
    app()


if __name__ == "__main__":
    main()
