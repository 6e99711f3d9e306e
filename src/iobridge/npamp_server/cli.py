"""``iobridge npamp ...``: identity keys, and a one-shot AG-UI run over N-PAMP."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from iobridge.eventloop import LoopKind, LoopUnavailable
from iobridge.eventloop import run as run_on_loop
from iobridge.extras import MissingExtra, require_extra

if TYPE_CHECKING:
    from iobridge.npamp.bridge import Effect
    from iobridge.npamp.handshake import IdentityKey
    from iobridge.npamp_server.client import RunRefused

app = typer.Typer(
    help="AG-UI over N-PAMP: keys and a command-line client.", no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as ``iobridge``'s (wraps at 80 columns, cuts nothing)
)


@app.command("keygen")
def keygen_command(
    path: Annotated[Path, typer.Argument(help="Private key file to create (public: PATH.pub)")],
    scheme: Annotated[str, typer.Option(help="ed25519 or ml-dsa-87")] = "ed25519",
) -> None:
    """Create an identity key pair and print its fingerprint (what peers pin and map)."""
    _require_npamp()
    from iobridge.npamp.handshake import keygen, load_identity

    try:
        written = keygen(path, scheme)
    except (ValueError, OSError) as exc:  # unknown scheme, file exists, folder missing
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(load_identity(written).fingerprint)


def _require_npamp() -> None:
    """Stop with one line (exit 2) when the npamp extra is not installed."""
    try:
        require_extra("npamp", "iobridge npamp")
    except MissingExtra as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _client_identity(path: Path) -> IdentityKey:
    """Load ``--identity``; every way it can be unusable is a one-line error, exit 2."""
    from iobridge.npamp.handshake import SignatureScheme, load_identity

    try:
        key = load_identity(path)
    except (ValueError, OSError) as exc:
        typer.echo(f"error: --identity {exc}", err=True)
        raise typer.Exit(2) from None
    if key.scheme is not SignatureScheme.ED25519:
        # The client offers the Standard profile, whose only signature scheme is Ed25519;
        # ML-DSA-87 keys belong to the High and Sovereign profiles.
        typer.echo(
            f"error: --identity {path} is an {key.scheme.name} key; the Standard profile this "
            "client speaks needs an Ed25519 key (iobridge npamp keygen KEY)",
            err=True,
        )
        raise typer.Exit(2)
    return key


def _refusal(exc: RunRefused) -> str:
    """The refusal as the spec names it (NPAMP-BRIDGE §6), with what to do about the usual one."""
    from iobridge.npamp.bridge import TransportErrorCode

    code = exc.transport_code
    name = "foreign error" if code is None else code.name.title().replace("_", "")
    line = f"the server refused the run: {name}" + (f" ({exc.reason})" if exc.reason else "")
    if code is TransportErrorCode.PROTOCOL_UNSUPPORTED:
        line += "; the server must list this key's fingerprint in [npamp] agui_peers"
    return line


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter("expected HOST:PORT")
    return host, int(port)


@app.command("run")
def run_command(
    connect: Annotated[str, typer.Option("--connect", help="Server HOST:PORT")],
    message: Annotated[str, typer.Option("--message", "-m", help="User message")],
    pin: Annotated[
        list[str] | None,
        typer.Option(help="Server key fingerprint or public key file (repeatable)"),
    ] = None,
    identity: Annotated[
        Path | None, typer.Option(help="Our private key (default: a fresh one)")
    ] = None,
    thread_id: Annotated[str | None, typer.Option(help="AG-UI threadId")] = None,
    agent: Annotated[str | None, typer.Option(help="forwardedProps.agentId")] = None,
    destructive: Annotated[
        bool, typer.Option(help="Label the run destructive (default non_idempotent_write)")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the whole run")] = 120.0,
    event_loop: Annotated[
        LoopKind,
        typer.Option(
            envvar="IOBRIDGE_EVENT_LOOP",
            help="auto (uvloop when installed, as iobridge serve), asyncio or uvloop",
        ),
    ] = "auto",
) -> None:
    """Send one message as an AG-UI run and print each event as it arrives (JSON lines)."""
    _require_npamp()
    from iobridge.npamp.bridge import Effect
    from iobridge.npamp.handshake import IdentityKey, SignatureScheme

    host, port = _address(connect)
    if not pin:
        typer.echo("error: give --pin with the server's key fingerprint", err=True)
        raise typer.Exit(2)
    if identity is not None:
        key = _client_identity(identity)
    else:
        key = IdentityKey.generate(SignatureScheme.ED25519)
        typer.echo(f"using a fresh identity key {key.fingerprint}", err=True)
    props = {"agentId": agent} if agent else {}
    run_input: dict[str, object] = {
        "threadId": thread_id or str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": message}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": props,
    }
    safety = Effect.DESTRUCTIVE if destructive else Effect.NON_IDEMPOTENT_WRITE
    try:
        code = run_on_loop(_run(host, port, key, pin, run_input, safety, timeout), event_loop)
    except LoopUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


async def _run(
    host: str,
    port: int,
    key: IdentityKey,
    pins: list[str],
    run_input: dict[str, object],
    safety: Effect,
    timeout: float,
) -> int:
    from iobridge.npamp.errors import NpampError
    from iobridge.npamp_server.client import RunRefused, connect

    try:
        async with asyncio.timeout(timeout):
            async with connect(host, port, identity=key, pinned=pins, safety=safety) as client:
                async for event in client.run(run_input):
                    typer.echo(event.raw.decode("utf-8"))
    except RunRefused as exc:
        typer.echo(f"error: {_refusal(exc)}", err=True)
        return 1
    except (NpampError, TimeoutError) as exc:
        typer.echo(f"error: {exc or 'timed out'}", err=True)
        return 1
    return 0
