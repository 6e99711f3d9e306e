"""The backend URL of ``iobridge chat`` and ``iobridge check``: checked before any work, and a
backend that does not answer named in one line (exit status 2), not a table of failures or a
traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
import typer

__all__ = ["BadBackend", "check_base_url", "fail", "probe_backend", "probe_port"]

EXAMPLE = "http://127.0.0.1:8000"


class BadBackend(Exception):
    """A backend URL that is malformed, or a backend that does not answer HTTP."""


def fail(exc: BadBackend) -> typer.Exit:
    """Print ``iobridge: <why>`` to stderr; raise what this returns (exit status 2)."""
    typer.echo(f"iobridge: {exc}", err=True)
    return typer.Exit(2)


def check_base_url(url: str) -> str:
    """``url`` as a backend base URL: ``http(s)://host[:port][/path]``, without credentials,
    query or fragment; returned without a trailing slash.

    Raises:
        BadBackend: anything else, saying what a good one looks like.
    """
    url = url.strip()
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise BadBackend(f"{url!r} is not a URL ({exc}); give one like {EXAMPLE}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host or any(c.isspace() for c in url):
        raise BadBackend(f"{url!r} is not an http:// or https:// URL; give one like {EXAMPLE}")
    if port is not None and not 0 < port < 65536:
        raise BadBackend(f"{url!r}: the port must be 1-65535")
    if parsed.userinfo:
        raise BadBackend(f"{parsed.host}: no credentials in the URL; use --api-key or --header")
    if parsed.query or parsed.fragment:
        raise BadBackend(f"{url!r}: the base URL takes no query or fragment; give one like "
                         f"{EXAMPLE} (and --prefix for the route prefix)")
    return url.rstrip("/")


async def probe_backend(url: str, prefix: str, headers: Mapping[str, str],
                        timeout: float) -> None:
    """One ``GET {url}{prefix}/agents``: any HTTP answer (401 and 404 too) means a server is
    there; no answer is one sentence.

    Raises:
        BadBackend: the connection is refused or reset, the name does not resolve, TLS fails,
            or no answer comes within ``timeout`` seconds.
    """
    target = f"{url}{prefix}/agents"
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=dict(headers)) as client:
            await client.get(target)
    except httpx.TimeoutException:
        raise BadBackend(f"{url} did not answer within {timeout:g} s") from None
    except httpx.ConnectError as exc:
        raise BadBackend(f"cannot connect to {url}: {_first_line(exc)} "
                         "(is the server running, and on this port?)") from None
    except httpx.HTTPError as exc:
        raise BadBackend(f"{url} does not answer HTTP: {type(exc).__name__}: "
                         f"{_first_line(exc)}") from None


async def probe_port(host: str, port: int, timeout: float) -> None:
    """A TCP connection to ``host:port`` (closed at once): is anything listening there?

    Raises:
        BadBackend: refused, unresolvable or silent for ``timeout`` seconds.
    """
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        raise BadBackend(f"{host}:{port} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise BadBackend(f"cannot connect to {host}:{port}: {exc.strerror or exc} "
                         "(is the server running, and on this port?)") from None
    writer.close()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
