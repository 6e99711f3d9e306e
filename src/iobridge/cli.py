"""Command line: ``iobridge serve``, ``iobridge db upgrade``, ``iobridge npamp ...``."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
import typer

from iobridge.npamp_server.cli import app as npamp_app

if TYPE_CHECKING:
    from iobridge.config import Settings

app = typer.Typer(help="iobridge: io.Intelligence Agent Protocol backend.", no_args_is_help=True)


def load_settings(config: Path | None, **overrides: Any) -> Settings:
    """Settings for a command; a bad file or value is one clear line and exit status 2."""
    from iobridge.config import Settings

    try:
        return Settings.load(config, **overrides)
    except FileNotFoundError as exc:
        message = f"config file not found: {exc.filename}"
    except tomllib.TOMLDecodeError as exc:
        message = f"config file is not valid TOML: {exc}"
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        message = f"invalid configuration: {problems}"
    typer.echo(f"iobridge: {message}", err=True)
    raise typer.Exit(2)


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

    from iobridge.http.app import create_app
    from iobridge.npamp_server.server import install

    npamp = {"port": npamp_port} if npamp_port is not None else None
    settings = load_settings(config, host=host, port=port, prefix=prefix, npamp=npamp)
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

    from iobridge.store.migrate import upgrade

    settings = load_settings(config, database_url=database_url)
    asyncio.run(upgrade(settings.database_url))
    typer.echo("database is at the latest schema")


app.add_typer(npamp_app, name="npamp")


def main() -> None:
    """Entry point of the ``iobridge`` script."""
    app()


if __name__ == "__main__":
    main()
