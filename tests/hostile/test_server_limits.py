"""Connection limits on a real uvicorn server configured by ``uvicorn_options(settings)``:
header size and count (431), slow heads and bodies (slowloris), requests per connection."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from tests.helpers import free_port

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.http.server_limits import LimitedHttpProtocol, uvicorn_options


class LimitedServer:
    """``iobridge serve``'s uvicorn options, in a thread on 127.0.0.1."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            create_app(Backend(settings)), host="127.0.0.1", port=self.port, log_level="warning",
            lifespan="on", **uvicorn_options(settings),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "did not start"
            time.sleep(0.01)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return sock

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Callable[..., LimitedServer]]:
    servers: list[LimitedServer] = []

    def start(**overrides: Any) -> LimitedServer:
        overrides.setdefault("database_url", f"sqlite+aiosqlite:///{tmp_path}/db.sqlite")
        servers.append(LimitedServer(Settings(**overrides)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


class ResponseReader:
    """HTTP/1.1 responses with Content-Length bodies, one after another from one socket
    (bytes of the next response read with the previous one are kept for it)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"connection closed before a response: {self.buffer!r}"
        self.buffer += chunk

    def read(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        self.buffer = rest
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body."""
    return ResponseReader(sock).read()


def closed_by_peer(sock: socket.socket, within: float) -> float:
    """Seconds until the server closes ``sock`` (fails after ``within``)."""
    started = time.monotonic()
    sock.settimeout(within)
    while True:
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except ConnectionResetError:
            return time.monotonic() - started


def get(host_headers: str = "", path: str = "/io-bridge/agents") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{host_headers}\r\n").encode()


def test_header_size_at_and_over_the_limit(limited: Callable[..., LimitedServer]) -> None:
    server = limited(max_header_bytes=4096)
    base = len(get("X-Pad: \r\n"))
    with server.connect() as sock:
        sock.sendall(get(f"X-Pad: {'a' * (4096 - base)}\r\n"))
        assert read_response(sock)[0] == 200
    with server.connect() as sock:
        sock.sendall(get(f"X-Pad: {'a' * 5000}\r\n"))
        status, headers, body = read_response(sock)
    assert status == 431
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "HEADERS_TOO_LARGE"


def test_a_32_mib_header_is_cut_off_early(limited: Callable[..., LimitedServer]) -> None:
    server = limited()
    sent = 0
    with server.connect() as sock:
        sock.sendall(b"GET /io-bridge/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        # Send until the answer arrives (the server drops the rest while it lingers).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while sent < 32 * 1024 * 1024 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(b"a" * 65536)
                sent += 65536
        status, _, body = read_response(sock)
    assert sent < 32 * 1024 * 1024
    assert status == 431
    assert json.loads(body)["error"]["code"] == "HEADERS_TOO_LARGE"


def test_a_head_in_pieces_is_measured_as_it_arrives(
    limited: Callable[..., LimitedServer],
) -> None:
    server = limited(max_header_bytes=4096)
    base = len(get("X-Pad: \r\n"))
    for size, expected in ((4096 - base, 200), (4097 - base, 431)):
        head = get(f"X-Pad: {'a' * size}\r\n")
        with server.connect() as sock:
            for start in range(0, len(head), 512):
                sock.sendall(head[start:start + 512])
                time.sleep(0.005)
            assert read_response(sock)[0] == expected


def test_a_body_sent_with_its_head_does_not_count_as_head(
    limited: Callable[..., LimitedServer],
) -> None:
    """A small head and a large body in one write: the body is not part of the head."""
    server = limited(max_header_bytes=4096)
    body = json.dumps({"id": "t-big", "title": "x" * 200_000}).encode()
    request = (b"POST /io-bridge/threads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    with server.connect() as sock:
        sock.sendall(request + body + get())  # and a pipelined request behind it
        responses = ResponseReader(sock)
        status, _, answer = responses.read()
        # 400: the title is over its limit, answered once the whole body was read.
        assert status == 400 and json.loads(answer)["error"]["code"] != "HEADERS_TOO_LARGE"
        assert responses.read()[0] == 200


def test_header_count_at_and_over_the_limit(limited: Callable[..., LimitedServer]) -> None:
    server = limited(max_headers=20)
    at = "".join(f"X-{i}: v\r\n" for i in range(19))  # + Host = 20
    with server.connect() as sock:
        sock.sendall(get(at))
        assert read_response(sock)[0] == 200
    with server.connect() as sock:
        sock.sendall(get(at + "X-Extra: v\r\n"))
        status, _, body = read_response(sock)
    assert status == 431
    assert json.loads(body)["error"]["code"] == "TOO_MANY_HEADERS"


def test_a_slow_head_is_closed_at_the_header_timeout(
    limited: Callable[..., LimitedServer],
) -> None:
    server = limited(header_timeout=0.5)
    with server.connect() as idle:
        assert closed_by_peer(idle, within=3) < 2
    with server.connect() as drip:
        drip.sendall(b"GET /io-bridge/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        try:
            while time.monotonic() - started < 3:
                drip.sendall(b"X")  # one byte of a header every 50 ms: never a full head
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert time.monotonic() - started < 2
    # A prompt client on a kept-alive connection is unaffected by the deadline.
    with server.connect() as sock:
        for _ in range(3):
            sock.sendall(get())
            assert read_response(sock)[0] == 200
            time.sleep(0.2)


def test_a_stalled_body_gets_408_at_the_body_timeout(
    limited: Callable[..., LimitedServer],
) -> None:
    server = limited(body_timeout=0.5)
    with server.connect() as sock:
        sock.sendall(b"POST /io-bridge/threads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":")
        started = time.monotonic()
        status, _, body = read_response(sock)
        assert time.monotonic() - started < 3
        assert closed_by_peer(sock, within=3) < 3
    assert status == 408
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"


def test_requests_per_connection_are_capped(limited: Callable[..., LimitedServer]) -> None:
    """The last request a connection takes is answered with ``Connection: close`` (a client
    must not reuse the connection), then the server closes it; the earlier ones keep it."""
    server = limited(keep_alive_max_requests=2)
    with server.connect() as sock:
        connection = []
        for _ in range(2):
            sock.sendall(get())
            status, headers, _ = read_response(sock)
            assert status == 200
            connection.append(headers.get("connection"))
        assert connection == [None, "close"]
        assert closed_by_peer(sock, within=3) < 3


def test_a_keep_alive_client_loses_no_request_to_the_cap(
    limited: Callable[..., LimitedServer],
) -> None:
    """httpx reuses a connection until a response says it closes. With the cap at 3, every
    one of 300 requests in a row is answered; when the last response did not say so, some
    were sent down a connection the server was closing and failed."""
    server = limited(keep_alive_max_requests=3)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
        statuses = [client.get("/io-bridge/agents").status_code for _ in range(300)]
    assert statuses == [200] * 300


def test_options_follow_the_settings() -> None:
    settings = Settings(max_header_bytes=2048, keep_alive_timeout=2, max_connections=7,
                        header_timeout=3, body_timeout=4, keep_alive_max_requests=5)
    options = uvicorn_options(settings)
    protocol = options.pop("http")
    assert issubclass(protocol, LimitedHttpProtocol)
    assert (protocol.header_timeout, protocol.body_timeout, protocol.max_requests,
            protocol.max_head_bytes) == (3, 4, 5, 2048)
    assert options == {"timeout_keep_alive": 2, "limit_concurrency": 7}


def test_the_serve_command_passes_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from iobridge.cli import app
    from iobridge.http import server as http_server

    seen: list[uvicorn.Config] = []

    async def record(self: uvicorn.Server, sockets: Any = None) -> None:
        seen.append(self.config)

    monkeypatch.setattr(http_server._Server, "serve", record)
    monkeypatch.setenv("IOBRIDGE_MAX_HEADER_BYTES", "3000")
    monkeypatch.setenv("IOBRIDGE_HEADER_TIMEOUT", "7")
    monkeypatch.setenv("IOBRIDGE_DATABASE_URL", "memory://")
    result = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    (config,) = seen
    assert config.http.max_head_bytes == 3000  # type: ignore[union-attr]
    assert issubclass(config.http, LimitedHttpProtocol)  # type: ignore[arg-type]
    assert config.http.header_timeout == 7  # type: ignore[union-attr]


def _read_until_closed(sock: socket.socket, within: float) -> bytes:
    """Everything the server sends until it closes ``sock`` (fails after ``within``)."""
    received = b""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"still open after {within} s: {received!r}")


def test_a_refused_head_is_answered_once_then_closed(
    limited: Callable[..., LimitedServer],
) -> None:
    """The 431 is one complete ``Connection: close`` response with the error envelope; what
    the client sends after it is dropped (no second answer), and the connection is closed
    once the linger is over."""
    server = limited(max_header_bytes=2048)
    with server.connect() as sock:
        sock.sendall(get(f"X-Pad: {'a' * 3000}\r\n"))
        for _ in range(5):  # the client keeps talking: nothing of it is parsed
            time.sleep(0.02)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(get(f"X-More: {'b' * 3000}\r\n"))
        started = time.monotonic()
        received = _read_until_closed(sock, within=8)
        assert time.monotonic() - started < 5  # the linger (2 s) ended it
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert {line.lower() for line in lines[1:]} >= {
        b"content-type: application/json", b"connection: close",
        b"content-length: %d" % len(body)}
    assert json.loads(body) == {"error": {
        "code": "HEADERS_TOO_LARGE", "message": "the request headers are too large"}}
    assert received.count(b"HTTP/1.1") == 1


def test_a_stalled_body_is_answered_with_its_reason(
    limited: Callable[..., LimitedServer],
) -> None:
    server = limited(body_timeout=0.3)
    with server.connect() as sock:
        sock.sendall(b"POST /io-bridge/threads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        received = _read_until_closed(sock, within=5)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
    assert json.loads(body) == {"error": {
        "code": "REQUEST_TIMEOUT", "message": "the request body stalled"}}


def test_each_request_of_a_kept_alive_connection_gets_the_whole_head_limit(
    limited: Callable[..., LimitedServer],
) -> None:
    """After a response the head count starts again: a second request exactly at the limit
    is served, and one over it is refused, on the same connection."""
    server = limited(max_header_bytes=4096)
    base = len(get("X-Pad: \r\n"))
    at_limit = get(f"X-Pad: {'a' * (4096 - base)}\r\n")
    over = get(f"X-Pad: {'a' * (4097 - base)}\r\n")
    with server.connect() as sock:
        responses = ResponseReader(sock)
        for _ in range(2):
            sock.sendall(at_limit)
            assert responses.read()[0] == 200
        sock.sendall(over)
        assert responses.read()[0] == 431


def test_an_idle_kept_alive_connection_is_closed_at_the_header_timeout(
    limited: Callable[..., LimitedServer],
) -> None:
    """After a response, the next request's head is due within ``header_timeout`` (not
    uvicorn's longer keep-alive timeout)."""
    server = limited(header_timeout=0.5, keep_alive_timeout=30)
    with server.connect() as sock:
        sock.sendall(get())
        assert read_response(sock)[0] == 200
        assert closed_by_peer(sock, within=5) < 3
