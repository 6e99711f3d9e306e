"""Loopback TCP + TLS 1.3 tests of the asyncio shell (127.0.0.1 only, every wait bounded).

Each test runs on the stock asyncio loop and on uvloop (``conftest.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

from iobridge.npamp.aio import (
    ALPN,
    Association,
    Handler,
    NpampServer,
    TransportConfig,
    client_ssl_context,
    connect,
    self_signed_certificate,
    serve,
    server_ssl_context,
)
from iobridge.npamp.association import AssociationState, FrameReceived, NpampConnection
from iobridge.npamp.errors import (
    AeadFailure,
    CrcMismatch,
    HandshakeTimeout,
    NpampError,
    RemoteProtocolError,
    ReplayedSequence,
    SequenceGap,
    TransportError,
)
from iobridge.npamp.handshake import ClientHandshake, Profile, ServerHandshake
from iobridge.npamp.wire import FrameReader, FrameType, push_frame

from .test_connection import handshake_configs

pytestmark = pytest.mark.timeout(30)
BRIDGE, INTERACTION = 0x000D, 0x000F


async def test_each_test_runs_on_the_loop_its_id_names(request: pytest.FixtureRequest) -> None:
    """The loop factories of ``conftest.py`` are really used (the ids are not labels only)."""
    expected = "uvloop" if "[uvloop" in request.node.name else "asyncio"
    assert "[" in request.node.name
    assert type(asyncio.get_running_loop()).__module__.split(".")[0] == expected


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


def _configs(
    profile: Profile = Profile.STANDARD, *, trust_client: bool = True, timeout: float = 5.0
) -> tuple[TransportConfig, TransportConfig]:
    c_hs, s_hs = handshake_configs(profile, trust_client=trust_client)
    return (
        TransportConfig(handshake=c_hs, handshake_timeout=timeout, close_timeout=2.0),
        TransportConfig(handshake=s_hs, handshake_timeout=timeout, close_timeout=2.0),
    )


@contextlib.asynccontextmanager
async def _start(
    certs: tuple[Path, Path], config: TransportConfig, handler: Handler
) -> AsyncIterator[NpampServer]:
    server = await serve("127.0.0.1", 0, server_ssl_context(*certs), config, handler)
    try:
        yield server
    finally:
        async with asyncio.timeout(5):
            await server.wait_closed()


async def echo(assoc: Association) -> None:
    """Echo every frame back on its channel with frame type + 1."""
    async for frame in assoc:
        await assoc.send(frame.channel, frame.frame_type + 1, b"echo:" + frame.payload)


@pytest.mark.parametrize("profile", list(Profile), ids=lambda p: p.name)
async def test_echo_on_several_channels_with_key_update_and_close(
    certs: tuple[Path, Path], profile: Profile
) -> None:
    client_cfg, server_cfg = _configs(profile)
    async with _start(certs, server_cfg, echo) as srv:
        async with (
            asyncio.timeout(10),
            connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
        ):
            assert assoc.handshake.profile is profile
            assert assoc.peer_identity == server_cfg.handshake.identities[0].public_key
            for channel in (0x0000, BRIDGE, INTERACTION):
                await assoc.send(channel, 0x0200, b"hi %d" % channel)
            got = [await assoc.receive(ch) for ch in (INTERACTION, 0x0000, BRIDGE)]
            assert [(f.channel, f.frame_type, f.payload) for f in got] == [
                (INTERACTION, 0x0201, b"echo:hi 15"),
                (0x0000, 0x0201, b"echo:hi 0"),
                (BRIDGE, 0x0201, b"echo:hi 13"),
            ]
            await assoc.key_update(BRIDGE)
            assert 0 <= await assoc.ping(INTERACTION) < 5
            await assoc.send(BRIDGE, 0x0200, b"after rekey")
            frame = await assoc.receive(BRIDGE)
            assert frame.payload == b"echo:after rekey" and frame.seq == 2  # after the ACK
        assert assoc.terminated is not None and assoc.terminated.error is None


async def test_server_handler_closes_gracefully(certs: tuple[Path, Path]) -> None:
    client_cfg, server_cfg = _configs()
    received: list[FrameReceived] = []

    async def one_shot(assoc: Association) -> None:
        received.append(await assoc.receive(BRIDGE))
        await assoc.send(BRIDGE, 0x0201, b"bye")

    async with (
        _start(certs, server_cfg, one_shot) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        await assoc.send(BRIDGE, 0x0200, b"hello")
        assert (await assoc.receive()).payload == b"bye"
        async with asyncio.timeout(5):
            while assoc.terminated is None:
                await asyncio.sleep(0.01)
        assert assoc.terminated.error is None  # server's CLOSE, answered by us
        with pytest.raises(TransportError):
            await assoc.receive()
    assert [f.payload for f in received] == [b"hello"]


async def test_client_auth_goes_out_with_the_first_frame(certs: tuple[Path, Path]) -> None:
    """A client that sends at once writes CLIENT_AUTH and its first frame together; the
    server completes the handshake and takes the frame from the same read."""
    client_cfg, server_cfg = _configs()
    async with (
        _start(certs, server_cfg, echo) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        writes: list[bytes] = []
        real = assoc._shell.write

        def spy(data: bytes) -> None:
            writes.append(data)
            real(data)

        assoc._shell.write = spy
        await assoc.send(BRIDGE, 0x0200, b"first")
        assert (await assoc.receive(BRIDGE)).payload == b"echo:first"
        assert len(writes[0]) > 36 + 80 + len(b"first")  # CLIENT_AUTH and the frame, one write


async def test_a_silent_client_still_sends_client_auth(certs: tuple[Path, Path]) -> None:
    """The server's handler runs only once CLIENT_AUTH verified: here it speaks first, and the
    client, which never sends, receives."""
    client_cfg, server_cfg = _configs()

    async def greet(assoc: Association) -> None:
        await assoc.send(BRIDGE, 0x0201, b"hello")
        with contextlib.suppress(NpampError):
            await assoc.receive()

    async with (
        _start(certs, server_cfg, greet) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        assert (await assoc.receive(BRIDGE)).payload == b"hello"


async def test_untrusted_client_refused(certs: tuple[Path, Path]) -> None:
    client_cfg, server_cfg = _configs(trust_client=False)
    called = False

    async def handler(assoc: Association) -> None:
        nonlocal called
        called = True

    async with (
        _start(certs, server_cfg, handler) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        # The client is established first; the server then drops the stream.
        with pytest.raises(TransportError):
            await assoc.receive()
    assert not called


async def _reply_to_a_valid_client_hello(port: int, ctx: ssl.SSLContext) -> tuple[Any, bytes]:
    """Open TLS with ``ctx``, send a well-formed CLIENT_HELLO, return (ALPN, the bytes back).

    Reads until the server closes or its first frame is complete.
    """
    c_hs, _ = handshake_configs()
    client = NpampConnection(ClientHandshake(c_hs))
    client.initiate()
    hello = client.data_to_send()
    assert FrameReader().feed(hello)[0].frame_type == FrameType.CLIENT_HELLO
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    received = b""
    try:
        selected = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            writer.write(hello)
            await writer.drain()
            frames = FrameReader()
            while chunk := await reader.read(65536):
                received += chunk
                if frames.feed(chunk):
                    break
    finally:
        writer.close()
    return selected, received


@pytest.mark.parametrize("offered", [["h2"], ["n-pamp/1"], None], ids=["h2", "n-pamp/1", "none"])
async def test_server_refuses_tls_without_alpn_n_pamp_2(
    certs: tuple[Path, Path], offered: list[str] | None
) -> None:
    """The refusal is the server's: a valid CLIENT_HELLO over such TLS gets no N-PAMP byte."""
    _, server_cfg = _configs()
    called = False

    async def handler(assoc: Association) -> None:
        nonlocal called
        called = True

    ctx = ssl.create_default_context(cafile=str(certs[0]))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if offered is not None:
        ctx.set_alpn_protocols(offered)
    async with _start(certs, server_cfg, handler) as srv, asyncio.timeout(10):
        selected, received = await _reply_to_a_valid_client_hello(srv.port, ctx)
        # Control: the same CLIENT_HELLO over TLS with ALPN n-pamp/2 is answered.
        good_alpn, answered = await _reply_to_a_valid_client_hello(
            srv.port, client_ssl_context(certs[0])
        )
    assert selected is None
    assert received == b""
    assert not called
    assert good_alpn == ALPN
    assert FrameReader().feed(answered)[0].frame_type == FrameType.SERVER_HELLO


async def test_handshake_timeout(certs: tuple[Path, Path]) -> None:
    """A TLS server that never speaks N-PAMP: the client gives up after the step timeout."""
    client_cfg, _ = _configs(timeout=0.3)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0, ssl=server_ssl_context(*certs))
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(5):
            with pytest.raises(HandshakeTimeout):
                async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg):
                    pass
    finally:
        server.close()


async def test_tls_handshake_timeout_is_transport_error(certs: tuple[Path, Path]) -> None:
    """A TCP server that never answers TLS: connect() gives up after the step timeout with a
    TransportError, and the caller's task is not left cancelled."""
    client_cfg, _ = _configs(timeout=0.3)
    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        start = loop.time()
        async with asyncio.timeout(5):
            with pytest.raises(TransportError, match="TLS connection to"):
                async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg):
                    pass
        assert loop.time() - start < 3
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0
        assert held  # the TCP connection was accepted: only TLS stayed silent
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_tampered_frame_from_raw_server_kills_association(certs: tuple[Path, Path]) -> None:
    """A server that is not N-PAMP at all answers with a corrupt header."""
    client_cfg, _ = _configs()

    async def liar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = FrameReader().feed(await reader.read(65536))
        assert hello and hello[0].frame_type == FrameType.CLIENT_HELLO
        bad = bytearray(push_frame(FrameType.SERVER_HELLO, 0, 0, b""))
        bad[5] ^= 0xFF
        writer.write(bytes(bad))
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(liar, "127.0.0.1", 0, ssl=server_ssl_context(*certs))
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(5):
            with pytest.raises(RemoteProtocolError):
                async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg):
                    pass
    finally:
        server.close()


async def test_connect_refused_is_transport_error(certs: tuple[Path, Path]) -> None:
    client_cfg, _ = _configs()
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(TransportError):
        async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg):
            pass


async def _raw_client(
    port: int, certs: tuple[Path, Path], config: TransportConfig
) -> tuple[NpampConnection, asyncio.StreamReader, asyncio.StreamWriter]:
    """A hand-driven client core over real TLS, to put arbitrary bytes on the wire."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_ssl_context(certs[0])
    )
    conn = NpampConnection(ClientHandshake(config.handshake))
    conn.initiate()
    while conn.state is AssociationState.HANDSHAKING:
        writer.write(conn.data_to_send())
        conn.receive_data(await reader.read(65536))
    writer.write(conn.data_to_send())
    return conn, reader, writer


def _relabel(frame: bytes, channel: int) -> bytes:
    """The same sealed frame claiming another channel, with a valid header CRC."""
    out = bytearray(frame)
    out[7:9] = channel.to_bytes(2, "big")
    out[21:25] = google_crc32c.value(bytes(out[:21])).to_bytes(4, "big")
    return bytes(out)


_TAMPERS = {
    "header": CrcMismatch,
    "ciphertext": AeadFailure,
    "tag": AeadFailure,
    "replay": ReplayedSequence,
    "skip": SequenceGap,
    "wrong_channel_key": AeadFailure,
}


@pytest.mark.parametrize("tamper", list(_TAMPERS))
async def test_tampered_frame_over_tls_rejected_nothing_delivered(
    certs: tuple[Path, Path], tamper: str
) -> None:
    client_cfg, server_cfg = _configs()
    seen: list[object] = []

    async def handler(assoc: Association) -> None:
        try:
            while True:
                seen.append((await assoc.receive()).payload)
        except NpampError as exc:
            seen.append(type(exc))

    async with _start(certs, server_cfg, handler) as srv, asyncio.timeout(10):
        conn, reader, writer = await _raw_client(srv.port, certs, client_cfg)
        conn.send_frame(BRIDGE, 0x0200, b"good")
        good = conn.data_to_send()
        conn.send_frame(BRIDGE, 0x0200, b"evil")
        bad = bytearray(conn.data_to_send())
        if tamper == "header":
            bad[12] ^= 0x01  # a sequence-number bit: the CRC no longer matches
        elif tamper == "ciphertext":
            bad[40] ^= 0x01
        elif tamper == "tag":
            bad[-1] ^= 0x80
        elif tamper == "replay":
            bad = bytearray(good)
        elif tamper == "skip":
            conn.send_frame(BRIDGE, 0x0200, b"after the skipped one")
            bad = bytearray(conn.data_to_send())
        else:  # sealed with the Interaction channel's key, at the Bridge's next number
            conn.send_frame(INTERACTION, 0x0200, b"x")
            conn.send_frame(INTERACTION, 0x0200, b"evil")
            last = conn.data_to_send()[-(36 + len(b"evil") + 16) :]  # header, "evil", tag
            bad = bytearray(_relabel(last, BRIDGE))
        writer.write(good + bytes(bad))
        await writer.drain()
        assert await reader.read(65536) == b""  # server aborts without a reply
        writer.close()
    assert seen == [b"good", _TAMPERS[tamper]]


async def test_profile_downgrade_refused_over_tls(certs: tuple[Path, Path]) -> None:
    """A server whose minimum is High refuses a client that offers only Standard."""
    client_cfg, server_cfg = _configs(Profile.STANDARD)
    high_only = replace(server_cfg.handshake, profiles=(Profile.HIGH,), min_profile=Profile.HIGH)
    server_cfg = replace(server_cfg, handshake=high_only)
    called = False

    async def handler(assoc: Association) -> None:
        nonlocal called
        called = True

    async with _start(certs, server_cfg, handler) as srv, asyncio.timeout(10):
        with pytest.raises(NpampError):
            async with connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg):
                pass
    assert not called


async def test_server_times_out_silent_client(certs: tuple[Path, Path]) -> None:
    _, server_cfg = _configs(timeout=0.3)
    async with _start(certs, server_cfg, echo) as srv, asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", srv.port, ssl=client_ssl_context(certs[0])
        )
        assert await reader.read(1) == b""  # closed after the step timeout, nothing sent
        writer.close()


async def test_client_refuses_server_without_alpn(certs: tuple[Path, Path]) -> None:
    client_cfg, _ = _configs()
    plain = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    plain.load_cert_chain(*certs)

    async def idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(idle, "127.0.0.1", 0, ssl=plain)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(5):
            with pytest.raises(TransportError, match="ALPN"):
                async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg):
                    pass
    finally:
        server.close()


async def test_large_frames_and_many_small_frames(certs: tuple[Path, Path]) -> None:
    client_cfg, server_cfg = _configs()
    big = bytes(range(256)) * 4096  # 1 MiB: spans many TLS records and reads
    async with (
        _start(certs, server_cfg, echo) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        await assoc.send(BRIDGE, 0x0200, big)
        for i in range(200):
            await assoc.send(INTERACTION, 0x0200, b"%d" % i)
        assert (await assoc.receive(BRIDGE)).payload == b"echo:" + big
        got = [(await assoc.receive(INTERACTION)).payload for _ in range(200)]
        assert got == [b"echo:%d" % i for i in range(200)]


def test_unverified_client_context_loads_no_trust_store(certs: tuple[Path, Path]) -> None:
    ctx = client_ssl_context(certs[0], verify=False)
    assert ctx.verify_mode is ssl.CERT_NONE and not ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0  # neither the system store nor cafile
    assert ctx.minimum_version is ssl.TLSVersion.TLSv1_3
    verifying = client_ssl_context(certs[0])
    assert verifying.verify_mode is ssl.CERT_REQUIRED and verifying.check_hostname
    assert verifying.cert_store_stats()["x509_ca"] == 1  # exactly the given anchor


async def _tls_session_after_echo(ctx: ssl.SSLContext, cafile: Path) -> ssl.SSLSession:
    """The client's TLS session once one byte made the round trip (a TLS 1.3 server sends its
    session tickets right after the handshake, so they arrive before the echo)."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(1))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=ctx)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl_context(cafile)
        )
        writer.write(b"x")
        assert await reader.read(1) == b"x"
        session: ssl.SSLSession = writer.get_extra_info("ssl_object").session
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
        return session
    finally:
        server.close()
        await server.wait_closed()


async def test_the_server_context_issues_no_session_tickets(certs: tuple[Path, Path]) -> None:
    """Every association runs the N-PAMP handshake afresh, so a TLS ticket would buy a peer
    nothing; the server does not spend a ticket per connection (nor the client its parsing)."""
    ctx = server_ssl_context(*certs)
    assert ctx.num_tickets == 0
    assert not (await _tls_session_after_echo(ctx, certs[0])).has_ticket
    ctx.num_tickets = 2  # OpenSSL's default: the same check sees the tickets
    assert (await _tls_session_after_echo(ctx, certs[0])).has_ticket


async def test_replies_to_a_peer_that_does_not_read_wait_for_it(certs: tuple[Path, Path]) -> None:
    """PONGs to a client that sends PINGs without reading fill the server's socket and write
    buffer: the server then stops reading (as a reader awaiting drain() after its replies
    would) and resumes once the client reads, so every PONG arrives, in order."""
    client_cfg, server_cfg = _configs()
    async with _start(certs, server_cfg, echo) as srv, asyncio.timeout(20):
        conn, reader, writer = await _raw_client(srv.port, certs, client_cfg)
        payloads = [i.to_bytes(2, "big") * 30_000 for i in range(200)]  # 12 MB of PONGs owed

        async def pings() -> None:
            for payload in payloads:
                conn.ping(0x0000, payload)
                writer.write(conn.data_to_send())
                await writer.drain()

        sending = asyncio.create_task(pings())
        await asyncio.sleep(0.5)  # the server's buffers fill up meanwhile
        pongs: list[bytes] = []
        while len(pongs) < len(payloads):
            chunk = await reader.read(1 << 16)
            assert chunk
            pongs += [e.payload for e in conn.receive_data(chunk) if hasattr(e, "payload")]
        await sending
        assert pongs == payloads
        writer.close()


async def test_wait_closed_abandons_a_connection_still_in_its_handshake(
    certs: tuple[Path, Path],
) -> None:
    """A TLS client that never sends CLIENT_HELLO: closing the server does not wait for its
    handshake timeout, only close_timeout, and the connection is closed."""
    _, server_cfg = _configs(timeout=30.0)
    server_cfg = replace(server_cfg, close_timeout=0.2)
    server = await serve("127.0.0.1", 0, server_ssl_context(*certs), server_cfg, echo)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_ssl_context(certs[0])
    )
    try:
        await asyncio.sleep(0.1)  # TLS is up on the server side too
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with asyncio.timeout(5):
            await server.wait_closed()
            assert await reader.read(1) == b""
        assert loop.time() - start < 3
    finally:
        writer.close()


async def test_an_association_leaves_no_reference_cycles(certs: tuple[Path, Path]) -> None:
    """Once both ends closed, reference counting frees every object of the association: none
    of ours is left to the cyclic collector (a cycle per association made the collector walk
    each of them, and promote them, under load)."""
    client_cfg, server_cfg = _configs()
    done = asyncio.Event()

    async def one_shot(assoc: Association) -> None:
        await echo(assoc)
        done.set()

    async with _start(certs, server_cfg, one_shot) as srv, asyncio.timeout(10):
        ctx = client_ssl_context(certs[0])
        async with connect("127.0.0.1", srv.port, ctx, client_cfg) as assoc:  # warm up
            await assoc.send(BRIDGE, 0x0200, b"warm")
            await assoc.receive(BRIDGE)
        await done.wait()
        done.clear()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            async with connect("127.0.0.1", srv.port, ctx, client_cfg) as assoc:
                await assoc.send(BRIDGE, 0x0200, b"hello")
                assert (await assoc.receive(BRIDGE)).payload == b"echo:hello"
            await done.wait()
            del assoc
            await asyncio.sleep(0.05)  # the server's side finishes closing
            gc.collect()
            ours = [
                type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.startswith("iobridge")
            ]
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
    assert ours == []


async def test_deliver_to_hands_over_frames_as_they_are_read_then_the_end(
    certs: tuple[Path, Path],
) -> None:
    """Frames already queued are handed over first, later ones batch by batch in order;
    the end is reported once; receive() then finds nothing queued."""
    client_cfg, server_cfg = _configs()

    async def talker(assoc: Association) -> None:
        await assoc.send(BRIDGE, 0x0201, b"one")
        await assoc.send(BRIDGE, 0x0201, b"two")
        await assoc.receive()  # the client's go
        await assoc.send_many(BRIDGE, [(0x0201, b"three"), (0x0201, b"four")])

    async with (
        _start(certs, server_cfg, talker) as srv,
        asyncio.timeout(10),
        connect("127.0.0.1", srv.port, client_ssl_context(certs[0]), client_cfg) as assoc,
    ):
        while len(assoc._frames) < 2:
            await asyncio.sleep(0.01)
        got: list[bytes] = []
        ends: list[BaseException] = []
        assoc.deliver_to(lambda frames: got.extend(f.payload for f in frames), ends.append)
        assert got == [b"one", b"two"]
        await assoc.send(BRIDGE, 0x0200, b"go")
        while assoc.terminated is None:  # the handler returned: the server closed
            await asyncio.sleep(0.01)
        assert got == [b"one", b"two", b"three", b"four"]
        assert len(ends) == 1 and isinstance(ends[0], TransportError)
        assoc.deliver_to(None, None)
        assoc.deliver_to(None, ends.append)  # already ended: reported at once, once
        assert len(ends) == 2
        with pytest.raises(TransportError):
            await assoc.receive()


async def test_close_waits_for_close_ack_only_close_timeout(certs: tuple[Path, Path]) -> None:
    """A peer that completes the handshake but never answers CLOSE: aclose() gives up after
    close_timeout (then closes the socket), and the association is ended locally."""
    client_cfg, server_cfg = _configs()
    client_cfg = replace(client_cfg, close_timeout=0.3)

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        core = NpampConnection(ServerHandshake(server_cfg.handshake))
        while core.state is AssociationState.HANDSHAKING:
            core.receive_data(await reader.read(65536))
            if core.state is AssociationState.HANDSHAKING:
                writer.write(core.data_to_send())  # SERVER_HELLO, SERVER_AUTH: nothing more
        await reader.read()  # CLOSE arrives; never answered
        writer.close()

    server = await asyncio.start_server(mute, "127.0.0.1", 0, ssl=server_ssl_context(*certs))
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(5):
            async with connect("127.0.0.1", port, client_ssl_context(certs[0]), client_cfg) as a:
                await a.send(BRIDGE, 0x0200, b"hi")
                start = loop.time()
            assert 0.25 < loop.time() - start < 2
            assert a.terminated is not None and isinstance(a.terminated.error, TransportError)
            assert str(a.terminated.error) == "association closed locally"
    finally:
        server.close()


async def test_the_handshake_timeout_is_per_step_not_in_total(certs: tuple[Path, Path]) -> None:
    """Each flight gets handshake_timeout: a client that takes 0.2 s per step with a 0.35 s
    step timeout (0.4 s in all) is served."""
    client_cfg, server_cfg = _configs(timeout=0.35)
    async with _start(certs, server_cfg, echo) as srv, asyncio.timeout(10):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", srv.port, ssl=client_ssl_context(certs[0])
        )
        conn = NpampConnection(ClientHandshake(client_cfg.handshake))
        conn.initiate()
        await asyncio.sleep(0.2)
        writer.write(conn.data_to_send())
        while conn.state is AssociationState.HANDSHAKING:
            conn.receive_data(await reader.read(65536))
        await asyncio.sleep(0.2)
        conn.send_frame(BRIDGE, 0x0200, b"late")
        writer.write(conn.data_to_send())  # CLIENT_AUTH and the frame
        got: list[bytes] = []
        while not got:
            chunk = await reader.read(65536)
            assert chunk, "the server closed: it timed the handshake out"
            got = [e.payload for e in conn.receive_data(chunk) if isinstance(e, FrameReceived)]
        assert got == [b"echo:late"]
        writer.close()
