"""``iobridge check URL``: grade a backend and print the verdict (exit 1 on any failure)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from iobridge.client.base_url import (
    BadBackend,
    check_base_url,
    fail,
    probe_backend,
    probe_port,
)
from iobridge.client.header_option import parse_headers

if TYPE_CHECKING:
    from iobridge.conformance.check.report import Report

__all__ = ["check_command"]


def check_command(
    url: Annotated[str, typer.Argument(help="http(s)://HOST:PORT of the backend, or "
                                            "npamp://HOST:PORT for the NPAMP-MAP-AGUI clauses")],
    prefix: Annotated[str, typer.Option(help="Route prefix of the backend")] = "/io-bridge",
    agent: Annotated[
        str | None, typer.Option(help="forwardedProps.agentId of every run (default: the "
                                      "backend's default agent)")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="Extra request header NAME:VALUE (repeatable), "
                                            "e.g. 'X-API-Key: ...'")
    ] = None,
    level: Annotated[int, typer.Option(min=1, max=4, help="Highest level to grade (1-4)")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
    junit: Annotated[Path | None, typer.Option(help="Also write a JUnit XML report here")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per request or run")] = 30.0,
    server_tool_prompt: Annotated[
        str | None, typer.Option(help="User message that makes the agent call a server tool "
                                      "(L2; default asks for current_time)")
    ] = None,
    resource: Annotated[
        list[str] | None, typer.Option(help="Two resourceIds for the ownership check (L3; "
                                            "give twice)")
    ] = None,
    pin: Annotated[
        list[str] | None, typer.Option(help="npamp: the server key fingerprint (repeatable)")
    ] = None,
    identity: Annotated[
        Path | None, typer.Option(help="npamp: our private key (default: a fresh one)")
    ] = None,
) -> None:
    """Grade a backend against the io.Intelligence Agent Protocol, level by level (L1-L4), or
    an N-PAMP peer against NPAMP-MAP-AGUI; see docs/check.md. Exit status 1 on any failure.

    --prefix, --header, --level, --server-tool-prompt and --resource apply to HTTP;
    --pin and --identity to npamp://.
    """
    from iobridge.conformance.check.report import render_table, to_json, to_junit

    url = url.strip()
    resources = resource or []
    if resources and len(resources) != 2:
        raise typer.BadParameter("give --resource exactly twice", param_hint="--resource")
    report: Report
    if url.startswith("npamp://"):
        report = _npamp(url, pin or [], identity, agent, timeout)
    elif url.startswith(("http://", "https://")):
        from iobridge.conformance.check.http_checks import HttpTarget, check_http

        headers = parse_headers(header or [])
        try:
            url = check_base_url(url)
            asyncio.run(probe_backend(url, prefix, headers, timeout))
        except BadBackend as exc:
            raise fail(exc) from None
        options: dict[str, Any] = {}
        if server_tool_prompt:
            options["server_tool_prompt"] = server_tool_prompt
        if resources:
            options["resources"] = (resources[0], resources[1])
        target = HttpTarget(url=url, prefix=prefix, agent=agent, headers=headers, level=level,
                            timeout=timeout, **options)
        report = asyncio.run(check_http(target))
    else:
        raise fail(BadBackend(f"{url!r} is not an http://, https:// or npamp:// URL; give one "
                              "like http://127.0.0.1:8000 or npamp://127.0.0.1:7443"))
    if junit is not None:
        junit.write_bytes(to_junit(report))
    if as_json:
        typer.echo(json.dumps(to_json(report), ensure_ascii=False, indent=2, default=str))
    else:
        from rich.console import Console

        Console().print(render_table(report))
    raise typer.Exit(0 if report.ok else 1)


def _npamp(url: str, pins: list[str], identity: Path | None, agent: str | None,
           timeout: float) -> Report:
    from iobridge.extras import MissingExtra, require_extra

    try:
        require_extra("npamp", "npamp://")
    except MissingExtra as exc:
        raise typer.BadParameter(str(exc), param_hint="URL") from None
    from iobridge.conformance.check.npamp_checks import NpampTarget, check_npamp
    from iobridge.npamp.handshake import IdentityKey, SignatureScheme, load_identity

    host, _, port = url.removeprefix("npamp://").rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise fail(BadBackend(f"{url!r} is not an npamp://HOST:PORT URL; give one like "
                              "npamp://127.0.0.1:7443"))
    if not pins:
        raise typer.BadParameter("give the server's key fingerprint", param_hint="--pin")
    try:
        key = load_identity(identity) if identity else IdentityKey.generate(SignatureScheme.ED25519)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--identity") from None
    try:
        asyncio.run(probe_port(host.strip("[]"), int(port), timeout))
    except BadBackend as exc:
        raise fail(exc) from None
    target = NpampTarget(host=host.strip("[]"), port=int(port), identity=key, pinned=pins,
                         agent=agent, timeout=timeout)
    return asyncio.run(check_npamp(target))
