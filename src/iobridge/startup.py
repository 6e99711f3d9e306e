"""Startup failures as one clear line: what failed, which setting, and the fix.

``iobridge serve`` and ``iobridge db upgrade`` check what they can before starting
(``check_settings``) and translate what can only fail while starting (``explain``): a port in
use, a database that does not answer or refuses the password, an API key variable that is not
set. Passwords in database URLs are never printed.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from iobridge.config import Settings
from iobridge.extras import MissingExtra, require_extra

__all__ = [
    "StartupError",
    "check_database_url",
    "check_extras",
    "check_port",
    "check_settings",
    "describe_database",
    "explain",
]

#: The drivers iobridge ships (``memory://`` aside): SQLite through the standard library
#: (``sqlite+aiosqlite`` is the older name of the same), PostgreSQL through asyncpg.
_DRIVERS = {"sqlite", "sqlite+pysqlite", "sqlite+aiosqlite", "postgresql+asyncpg"}
_SUGGEST = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
}


class StartupError(Exception):
    """A failure to report as one line (the message names the setting and the fix)."""


def safe_url(url: str) -> str:
    """``url`` with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


def describe_database(url: str) -> str:
    """Where the threads are kept, for the startup banner (an absolute path for a SQLite
    file; a URL without its password otherwise)."""
    if url.startswith("memory"):
        return "in memory (nothing is kept after exit)"
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "<unparsable URL>"
    if parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:"):
        return f"SQLite file {Path(str(parsed.database)).expanduser().resolve()}"
    return safe_url(url)


def check_database_url(url: str) -> None:
    """Refuse a database URL iobridge cannot open, before anything connects.

    Raises:
        StartupError: an unknown scheme or driver, or a SQLite file in a missing folder.
    """
    if url == "memory://":
        return
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StartupError(
            "database_url is not a database URL; use sqlite:///path/to/file.db "
            "or postgresql+asyncpg://user:password@host/db"
        ) from None
    driver = parsed.drivername
    if driver not in _DRIVERS:
        better = _SUGGEST.get(driver)
        hint = (
            f"write {better}://… instead of {driver}://…"
            if better
            else "use sqlite:///path/to/file.db or postgresql+asyncpg://user@host/db"
        )
        raise StartupError(f"database_url: the driver {driver!r} is not supported; {hint}")
    if driver.startswith("sqlite") and parsed.database and parsed.database != ":memory:":
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise StartupError(
                f"database_url: the folder {folder} of the SQLite file does not exist "
                "(create it, or point database_url elsewhere)"
            )
    if driver.startswith("postgresql"):
        _require("postgres", "database_url (PostgreSQL)")


def check_extras(settings: Settings) -> None:
    """Refuse a setting whose extra is not installed (one line naming the pip command).

    Raises:
        StartupError: N-PAMP or JWT authentication turned on without its extra.
    """
    if settings.npamp.port is not None:
        _require("npamp", "npamp.port (N-PAMP)")
    if settings.auth.mode == "jwt":
        _require("jwt", 'auth.mode = "jwt"')


def _require(extra: str, needed_by: str) -> None:
    try:
        require_extra(extra, needed_by)
    except MissingExtra as exc:
        raise StartupError(str(exc)) from None


def check_port(host: str, port: int, setting: str) -> None:
    """Refuse a port another process holds, before the server starts.

    Raises:
        StartupError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise StartupError(_bind_problem(host, port, setting, exc)) from None


def check_settings(settings: Settings, *, http: bool) -> None:
    """Everything ``serve`` can check before it starts.

    Raises:
        StartupError: the first problem found.
    """
    check_database_url(settings.database_url)
    check_extras(settings)
    if http and settings.port:
        check_port(settings.host, settings.port, "port")
    npamp = settings.npamp
    if npamp.port:
        check_port(npamp.host or settings.host, npamp.port, "npamp.port")
    metrics = settings.metrics
    if metrics.enabled and metrics.port:
        check_port(metrics.host or settings.host, metrics.port, "metrics.port")
    token_env = settings.metrics.token_env
    if http and settings.metrics.enabled and token_env and not os.environ.get(token_env):
        raise StartupError(
            f"metrics.token_env: the environment variable {token_env} is not set "
            "(set it to the scrape token, or remove metrics.token_env)"
        )


def explain(exc: BaseException, settings: Settings) -> str | None:
    """The one-line explanation of a failure while starting, or ``None`` if it is a bug."""
    text = str(exc)
    where = safe_url(settings.database_url)
    if isinstance(exc, StartupError | MissingExtra) or type(exc).__name__ == "TracingUnavailable":
        return text
    if type(exc).__module__.startswith("redis.") and settings.redis_url is not None:
        return (f"redis_url: cannot connect to Redis ({safe_url(settings.redis_url)}): "
                "is it running?")
    if type(exc).__name__ == "InvalidPasswordError" or "password authentication failed" in text:
        return f"database_url: the database refused the user or password ({where})"
    if type(exc).__name__ == "InvalidCatalogNameError":
        return f"database_url: the database does not exist ({where})"
    if isinstance(exc, ConnectionRefusedError | TimeoutError) or (
        isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH)
    ):
        return f"database_url: cannot connect to the database ({where}): is it running?"
    if isinstance(exc, ValueError) and "environment variable" in text:
        return f"auth: {text}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"a port is already in use: {exc.strerror}"
    if type(exc).__name__ == "OperationalError" and "unable to open database file" in text:
        return f"database_url: cannot open the SQLite file ({where})"
    return None


def _bind_problem(host: str, port: int, setting: str, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{setting}: {host}:{port} is already in use "
            "(stop the other server or pick another port)"
        )
    if exc.errno == errno.EACCES:
        return f"{setting}: not allowed to listen on {host}:{port} (ports below 1024 need root)"
    return f"{setting}: cannot listen on {host}:{port} ({exc.strerror})"
