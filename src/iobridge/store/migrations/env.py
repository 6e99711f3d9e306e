"""Alembic environment for the iobridge store.

``iobridge.store.migrate`` passes an open connection in ``config.attributes["connection"]``
(the normal path: ``iobridge db upgrade`` and store start-up). Running the ``alembic`` CLI
directly also works: it reads ``sqlalchemy.url`` from the config and opens its own engine.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from iobridge.store.records import metadata

VERSION_TABLE = "iobridge_alembic_version"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_from_url(url: str) -> None:
    from sqlalchemy.engine import Engine

    from iobridge.store.sqlalchemy_store import make_engine

    engine = make_engine(url)
    if isinstance(engine, Engine):
        try:
            with engine.begin() as conn:
                _run(conn)
        finally:
            engine.dispose()
        return

    async def run_async() -> None:
        try:
            async with engine.begin() as conn:
                await conn.run_sync(_run)
        finally:
            await engine.dispose()

    asyncio.run(run_async())


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    _run_from_url(context.config.get_main_option("sqlalchemy.url") or "")
