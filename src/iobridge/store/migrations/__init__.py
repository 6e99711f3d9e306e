"""Alembic migrations of the iobridge store (run through ``iobridge.store.migrate``)."""
