"""N-PAMP association rate: N concurrent associations (one short run each) vs N bare TLS 1.3.

The server is ``iobridge serve --npamp-port`` in its own process (configured by a TOML file:
in-memory store, every peer agreed on AG-UI, the offline demo agent); a second process serves
bare TLS 1.3 handshakes with the same certificate, accept backlog and event loop. The client
side (this process, one event loop) opens ``--associations`` N-PAMP associations at once
through :func:`iobridge.npamp_server.client.connect` with its default TLS settings, each
running one short run to its end, then N bare TLS handshakes at once with the very TLS
settings of both ends (``server_ssl_context`` there, ``connect()``'s default client context
here). Both phases of the client run on one event loop, ``--loop`` (default ``auto``: uvloop
when installed, the selection ``iobridge serve`` and ``iobridge npamp run`` make; ``asyncio``
for the stock loop with its Python TLS), so the baseline always gets the same loop. After a
warm-up round that is not counted, ``--rounds`` rounds alternate the two phases (so load from
other jobs falls on both alike); it prints each round's rates, ratio and CPU per association /
handshake on each side (this process's ``time.process_time``, the server's scheduler time in
ns), then the medians with the spread of the ratio, the ratio of CPU per association (client
plus server, bare TLS over N-PAMP), the p50/p99 time from ``connect()`` to the first AG-UI
event over every counted round, and the median of sequential ``connect()`` calls. Last, what
bounds the ratio: the CPU that N-PAMP's required asymmetric primitives cost each side (timed
here, in this process), and the CPU of the whole sans-IO handshake (both machines in this
process, no socket, loop or frame I/O), each with the ratio an association could reach if it
added only that to a bare TLS handshake. Run: ``.venv/bin/python bench/npamp_associations.py
[--associations N] [--sequential M] [--rounds R] [--loop auto|asyncio|uvloop]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from _harness import cpu_ns, free_port, wait_for_port
from cryptography.hazmat.primitives.asymmetric import ed25519, mlkem, x25519

from iobridge.eventloop import run
from iobridge.npamp.aio import client_ssl_context, self_signed_certificate
from iobridge.npamp.association import AssociationState, NpampConnection
from iobridge.npamp.handshake import (
    ClientHandshake,
    HandshakeConfig,
    IdentityKey,
    PinnedPeers,
    ServerHandshake,
    SignatureScheme,
    keygen,
    load_identity,
)
from iobridge.npamp_server.client import connect

RUN = {
    "threadId": "t",
    "runId": "r",
    "messages": [{"id": "u1", "role": "user", "content": "hello"}],
}
# The N-PAMP listener's own TLS settings (TLS 1.3 only, ALPN n-pamp/2, the same P-256
# certificate), its accept backlog and the event loop ``iobridge serve`` runs (uvloop when
# installed): the baseline differs from an association only by what N-PAMP adds.
BARE_TLS_SERVER = """
import asyncio, sys
from iobridge.config import NpampSettings
from iobridge.eventloop import run
from iobridge.npamp.aio import server_ssl_context
ctx = server_ssl_context(sys.argv[1], sys.argv[2])
async def main():
    async def done(reader, writer):
        writer.close()
    server = await asyncio.start_server(
        done, "127.0.0.1", int(sys.argv[3]), ssl=ctx, backlog=NpampSettings().backlog
    )
    await server.serve_forever()
run(main(), "auto")
"""


@contextlib.contextmanager
def _servers(tmp: Path) -> Iterator[tuple[int, int, str, int, int]]:
    """Start both server processes; yield (N-PAMP port, bare TLS port, server fingerprint,
    N-PAMP server pid, TLS server pid)."""
    key_path = keygen(tmp / "server.key")
    cert, key = self_signed_certificate(tmp)
    npamp_port, tls_port = free_port(), free_port()
    config = tmp / "iobridge.toml"
    config.write_text(
        f'database_url = "memory://"\nlog_level = "warning"\nport = {free_port()}\n'
        f'[npamp]\nport = {npamp_port}\nidentity_key = "{key_path}"\n'
        f'tls_cert = "{cert}"\ntls_key = "{key}"\n'
        'agui_peers = "*"\ntrusted_peers = "*"\n'
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    npamp = subprocess.Popen(
        [sys.executable, "-m", "iobridge.cli", "serve", "--config", str(config)], env=env
    )
    tls = subprocess.Popen(
        [sys.executable, "-c", BARE_TLS_SERVER, str(cert), str(key), str(tls_port)]
    )
    try:
        wait_for_port(npamp_port, npamp)
        wait_for_port(tls_port, tls)
        yield npamp_port, tls_port, load_identity(key_path).fingerprint, npamp.pid, tls.pid
    finally:
        for proc in (npamp, tls):
            proc.terminate()
            proc.wait(10)


async def _association(port: int, identity: IdentityKey, pin: str, i: int) -> float:
    """One association running one run to its end; seconds from connect() to the first event."""
    start = time.perf_counter()
    first = 0.0
    async with connect("127.0.0.1", port, identity=identity, pinned=[pin]) as client:
        async for _ in client.run({**RUN, "threadId": f"t{i}", "runId": f"r{i}"}):
            first = first or time.perf_counter() - start
    return first


async def _bare_tls(port: int, ctx: ssl.SSLContext) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(associations: int, sequential: int, rounds: int) -> None:
    identity = IdentityKey.generate(SignatureScheme.ED25519)
    ctx = client_ssl_context(verify=False)  # what connect() uses by default
    rows: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = []
    firsts: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, _servers(Path(tmp)) as servers:
        port, tls_port, pin, npamp_pid, tls_pid = servers
        await _association(port, identity, pin, -1)  # warm both ends up
        seq = []
        for _ in range(sequential):
            start = time.perf_counter()
            async with connect("127.0.0.1", port, identity=identity, pinned=[pin]):
                seq.append(time.perf_counter() - start)
        # Round 0 warms both ends up (first runs, allocator, caches) and is not counted; then
        # the two phases alternate, so load from other jobs falls on both alike.
        for round_no in range(rounds + 1):
            cpu = _Cpu(npamp_pid)
            got = await asyncio.gather(
                *(
                    _association(port, identity, pin, round_no * associations + i)
                    for i in range(associations)
                )
            )
            assoc = cpu.stop()
            cpu = _Cpu(tls_pid)
            await asyncio.gather(*(_bare_tls(tls_port, ctx) for _ in range(associations)))
            tls = cpu.stop()
            if round_no:
                rows.append((assoc, tls))
                firsts.extend(got)

    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"{associations} concurrent, server in its own process, client on one {loop} loop")
    print(f"sequential connect(), median of {sequential}: {statistics.median(seq) * 1e3:.1f} ms")
    print(f"{rounds} alternating rounds after a warm-up round; per round:")
    print(
        f"{'round':>6}{'assoc/s':>9}{'TLS/s':>9}{'ratio':>8}"
        f"{'assoc CPU ms client/server':>29}{'TLS CPU ms client/server':>27}"
    )
    ratios = []
    for i, ((aw, ac, as_), (tw, tc, ts)) in enumerate(rows, 1):
        ratios.append(tw / aw)
        print(
            f"{i:6}{associations / aw:9.1f}{associations / tw:9.1f}{tw / aw:7.2f}x"
            f"{_each(ac, associations) + ' / ' + _each(as_, associations):>29}"
            f"{_each(tc, associations) + ' / ' + _each(ts, associations):>27}"
        )
    print(f"{'':36}{'per s':>8}{'client CPU ms':>15}{'server CPU ms':>15}  (each, median)")
    for name, index in (("N-PAMP associations (one run each)", 0), ("bare TLS 1.3 handshakes", 1)):
        wall = statistics.median(row[index][0] for row in rows)
        client = statistics.median(row[index][1] for row in rows)
        server = statistics.median(row[index][2] for row in rows)
        print(
            f"{name:36}{associations / wall:8.1f}{client / associations * 1e3:15.2f}"
            f"{server / associations * 1e3:15.2f}"
        )
    print(
        f"ratio (associations / TLS):         {statistics.median(ratios):8.2f}x"
        f"  (rounds {min(ratios):.2f}-{max(ratios):.2f}x)"
    )
    # Both ends share the machine's cores, so the CPU of both is what bounds the rate; it
    # moves less with the load of other jobs than the wall-clock rates do.
    cpu = [(row[1][1] + row[1][2]) / (row[0][1] + row[0][2]) for row in rows]
    print(
        f"CPU ratio (TLS / association, client + server): {statistics.median(cpu):.2f}x"
        f"  (rounds {min(cpu):.2f}-{max(cpu):.2f}x)"
    )
    print(
        f"connect() to first event: p50 {_pct(firsts, 0.5) * 1e3:.0f} ms, "
        f"p99 {_pct(firsts, 0.99) * 1e3:.0f} ms"
    )
    # The rate of either phase is bounded by its busier side (two processes, two cores).
    tls_client = statistics.median(row[1][1] for row in rows) / associations
    tls_server = statistics.median(row[1][2] for row in rows) / associations
    for name, (client, server) in (
        ("required asymmetric primitives", _primitives(200)),
        ("sans-IO N-PAMP handshake", _sans_io_handshake(200)),
    ):
        ceiling = max(tls_client, tls_server) / max(tls_client + client, tls_server + server)
        print(
            f"{name + ', CPU ms client/server:':54}{client * 1e3:.2f} / {server * 1e3:.2f}"
            f"   bare TLS plus only these: {ceiling:.2f}x"
        )


def _primitives(count: int) -> tuple[float, float]:
    """CPU seconds per handshake, on each side, of the asymmetric operations spec/10 requires
    of it in the standard profile with Ed25519 identities: an X25519 key pair and exchange,
    ML-KEM-768 key generation and decapsulation (client) or encapsulation (server), one
    Ed25519 signature and one verification."""
    seed, message = os.urandom(64), os.urandom(48)
    signer = ed25519.Ed25519PrivateKey.generate()
    signature, verifier = signer.sign(message), signer.public_key()
    peer_x = x25519.X25519PrivateKey.generate().public_key()
    kem_public = mlkem.MLKEM768PrivateKey.generate().public_key().public_bytes_raw()
    ciphertext = mlkem.MLKEM768PublicKey.from_public_bytes(kem_public).encapsulate()[1]

    def client() -> None:
        x25519.X25519PrivateKey.generate().exchange(peer_x)
        kem = mlkem.MLKEM768PrivateKey.from_seed_bytes(seed)
        kem.public_key().public_bytes_raw()
        kem.decapsulate(ciphertext)
        verifier.verify(signature, message)
        signer.sign(message)

    def server() -> None:
        x25519.X25519PrivateKey.generate().exchange(peer_x)
        mlkem.MLKEM768PublicKey.from_public_bytes(kem_public).encapsulate()
        signer.sign(message)
        verifier.verify(signature, message)

    return _cpu_each(client, count), _cpu_each(server, count)


def _cpu_each(work: Callable[[], None], count: int) -> float:
    work()
    start = time.process_time()
    for _ in range(count):
        work()
    return (time.process_time() - start) / count


def _sans_io_handshake(count: int) -> tuple[float, float]:
    """CPU seconds per handshake on each side of the sans-IO cores run against each other in
    this process (primitives, key schedule, transcript, TLVs, sealing the AUTH frames)."""
    client_key = IdentityKey.generate(SignatureScheme.ED25519)
    server_key = IdentityKey.generate(SignatureScheme.ED25519)
    client_pins, server_pins = PinnedPeers(), PinnedPeers()
    client_pins.add_key(server_key.public_key)
    server_pins.add_key(client_key.public_key)
    client_config = HandshakeConfig(identities=[client_key], peer_verifier=client_pins)
    server_config = HandshakeConfig(identities=[server_key], peer_verifier=server_pins)
    spent = [0.0, 0.0]
    for i in range(count + 1):
        times = [time.process_time()]
        client = NpampConnection(ClientHandshake(client_config))
        client.initiate()
        hello = client.data_to_send()
        times.append(time.process_time())
        server = NpampConnection(ServerHandshake(server_config))
        server.initiate()
        server.receive_data(hello)
        flight = server.data_to_send()
        times.append(time.process_time())
        client.receive_data(flight)
        auth = client.data_to_send()
        times.append(time.process_time())
        server.receive_data(auth)
        times.append(time.process_time())
        assert client.state is server.state is AssociationState.OPEN
        if i:  # the first one warms up
            spent[0] += times[1] - times[0] + times[3] - times[2]
            spent[1] += times[2] - times[1] + times[4] - times[3]
    return spent[0] / count, spent[1] / count


def _each(seconds: float, count: int) -> str:
    return f"{seconds / count * 1e3:.2f}"


class _Cpu:
    """Wall time, this process's CPU and a server's CPU over one phase, in seconds."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.start = (time.perf_counter(), time.process_time(), cpu_ns(server_pid))

    def stop(self) -> tuple[float, float, float]:
        wall, client, server = self.start
        return (
            time.perf_counter() - wall,
            time.process_time() - client,
            (cpu_ns(self.pid) - server) / 1e9,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--associations", type=int, default=200)
    parser.add_argument("--sequential", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    args = parser.parse_args()
    run(main(args.associations, args.sequential, args.rounds), args.loop)
