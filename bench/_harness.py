"""Shared parts of the load benches (not a bench itself: ``make bench`` skips ``_*.py``).

A server in its own process (``_server.py`` under uvicorn), read from /proc for CPU time and
RSS; raw asyncio HTTP/1.1 clients on loopback in the bench's own process; and throw-away
stores (a temp SQLite file, a fresh PostgreSQL database) for each server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POSTGRES_ENV = "IOBRIDGE_TEST_POSTGRES_URL"
# Figures show up as they are measured, also when piped (make bench, tee).
sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Return once something accepts on ``port``; raise if ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port} within {timeout:.0f} s")


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in ns (``/proc/<pid>/task/*/schedstat``).

    Scheduler accounting is exact, unlike the 10 ms ticks of ``/proc/<pid>/stat``: a transfer
    of 10,000 events can take less than one tick.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread may end between listing and reading
            total += int((task / "schedstat").read_text().split()[0])
    return total


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to its hard limit; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def ratio(value: float, base: float, width: int = 6) -> str:
    """``value / base`` as ``1.23x``; ``n/a`` when the base is zero."""
    return f"{value / base:>{width}.2f}x" if base else f"{'n/a':>{width + 1}}"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass(frozen=True)
class Tree:
    """A checkout whose core a server runs: its Python, its ``bench/_server.py``, and the
    environment that makes that Python import the checkout's ``src``."""

    name: str
    python: str
    script: Path
    env: dict[str, str]


#: This checkout, with the Python running the bench.
THIS_TREE = Tree("this", sys.executable, HERE / "_server.py", {})


def add_baseline_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline-tree", type=Path, metavar="PATH",
        help="also serve the core checked out at PATH side by side (an A/B in one run): "
             "with PATH/.venv/bin/python if there is one, else this Python with PATH/src "
             "first on the module path; PATH's own bench/_server.py builds its app")


def baseline_tree(args: argparse.Namespace) -> Tree | None:
    """The ``--baseline-tree`` checkout, if given (said which Python and core it runs)."""
    path: Path | None = args.baseline_tree
    if path is None:
        return None
    path = path.resolve()
    script = path / "bench" / "_server.py"
    if not script.is_file():
        raise SystemExit(f"--baseline-tree {path}: no bench/_server.py there")
    venv = path / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    env = {"PYTHONPATH": str(path / "src")}
    print(f"baseline: {path} ({python})")
    return Tree("baseline", python, script, env)


class ServerProcess:
    """``_server.py`` in a child process on a free loopback port; stopped on exit.

    Its output goes to a temp file, summarised on exit (each distinct log line once, with
    its count), so that a storm of tracebacks does not bury the figures. ``tree``: the
    checkout whose core it serves (default: this one).
    """

    def __init__(self, app: str, *, agent: str = "deltas", deltas: int = 5,
                 settings: dict[str, Any] | None = None, tree: Tree = THIS_TREE) -> None:
        self.port = free_port()
        self.argv = [tree.python, str(tree.script), "--port", str(self.port),
                     "--app", app, "--agent", agent, "--deltas", str(deltas),
                     "--settings", json.dumps(settings or {})]
        self.env = {**os.environ, **tree.env} if tree.env else None
        self.process: subprocess.Popen[bytes] | None = None
        self._files = contextlib.ExitStack()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> ServerProcess:
        self.log = self._files.enter_context(tempfile.TemporaryFile())
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=self.env)
        try:
            wait_for_port(self.port, self.process)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.log.seek(0)
        print_log_summary(self.log.read().decode(errors="replace"))
        self._files.close()

    def cpu_seconds(self) -> float:
        """CPU time of every thread of the server process so far (scheduler accounting, ns
        resolution: ``cpu_ns``)."""
        return cpu_ns(self.pid) / 1e9

    def rss_bytes(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * _PAGE

    def peak_rss_bytes(self) -> int:
        """VmHWM: the highest RSS the process has had."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM in /proc status")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def settle_cpu(self, *, quiet: float = 0.02, interval: float = 0.5,
                   timeout: float = 120.0) -> float:
        """Wait until the server uses < ``quiet`` CPU seconds per ``interval``; returns its
        CPU time then (so work still running after a load is counted)."""
        deadline = time.monotonic() + timeout
        last = self.cpu_seconds()
        while time.monotonic() < deadline:
            time.sleep(interval)
            now = self.cpu_seconds()
            if now - last < quiet:
                return now
            last = now
        return last


def print_log_summary(text: str, limit: int = 8) -> None:
    """Each distinct top-level line of a server log (digits folded) once, with its count."""
    lines = [line for line in text.splitlines()
             if line.strip() and not line.startswith((" ", "Traceback", "^"))]
    if not lines:
        return
    counts = Counter(re.sub(r"\d+", "N", line)[:160] for line in lines)
    print(f"  [server log: {len(lines):,} lines]")
    for line, count in counts.most_common(limit):
        print(f"  [server log] {count:>6,} x {line}")


def run_body(thread_id: str, run_id: str, text: str = "hello",
             tools: list[dict[str, Any]] | None = None) -> bytes:
    """A RunAgentInput with one user message (a chat turn) for the ``bench`` agent."""
    return json.dumps({
        "threadId": thread_id, "runId": run_id, "state": None, "tools": tools or [],
        "context": [], "forwardedProps": {"agentId": "bench"},
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": text}],
    }).encode()


def request_bytes(method: str, path: str, body: bytes = b"",
                  headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             "Accept: text/event-stream"]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass(slots=True)
class RunResult:
    status: int
    first_event: float
    elapsed: float
    events: int
    bytes: int
    terminal: str


class SseCounter:
    """Counts ``data:`` frames across chunk boundaries and keeps the stream's tail."""

    def __init__(self) -> None:
        self.events = 0
        self.bytes = 0
        self.tail = b""
        self.status = 0
        self._carry = b""

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk; True if it completed at least one frame start."""
        if not self.status and not self.bytes:
            self.status = int(chunk[9:12]) if chunk.startswith(b"HTTP/1.1 ") else -1
        self.bytes += len(chunk)
        joined = self._carry + chunk
        found = joined.count(b"data: ")
        self.events += found
        self._carry = joined[-5:]
        self.tail = (self.tail + chunk)[-4096:]
        return found > 0

    def terminal(self) -> str:
        for name in ("RUN_FINISHED", "RUN_ERROR"):
            if f'"{name}"'.encode() in self.tail:
                return name
        return "none"


async def post_run(port: int, body: bytes) -> RunResult:
    """POST one run and read its SSE stream to the end (the server closes the connection)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first: float | None = None
    counter = SseCounter()
    try:
        writer.write(request_bytes("POST", "/io-bridge/run", body))
        while chunk := await reader.read(1 << 16):
            if counter.feed(chunk) and first is None:
                first = time.perf_counter() - started
    finally:
        writer.close()
    elapsed = time.perf_counter() - started
    return RunResult(counter.status, elapsed if first is None else first, elapsed, counter.events,
                     counter.bytes, counter.terminal())


def check(results: Sequence[RunResult], what: str) -> None:
    """Fail loudly if any run did not answer 200 and end with RUN_FINISHED."""
    bad = [r for r in results if r.status != 200 or r.terminal != "RUN_FINISHED"]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(results)} runs failed "
                           f"(first: status {bad[0].status}, terminal {bad[0].terminal})")


def postgres_url() -> str | None:
    return os.environ.get(POSTGRES_ENV) or None


@contextlib.contextmanager
def database(kind: str) -> Iterator[str]:
    """A ``database_url`` for a fresh store: ``memory``, ``sqlite`` (a temp file) or
    ``postgres`` (a new database next to ``$IOBRIDGE_TEST_POSTGRES_URL``, dropped after)."""
    if kind == "memory":
        yield "memory://"
    elif kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="iobridge-bench-") as folder:
            yield f"sqlite:///{folder}/bench.db"
    elif kind == "postgres":
        base = postgres_url()
        if base is None:
            raise RuntimeError(f"{POSTGRES_ENV} is not set")
        yield from _postgres_database(base)
    else:
        raise ValueError(kind)


def _postgres_database(base: str) -> Iterator[str]:
    from sqlalchemy import make_url

    name = f"iobridge_bench_{uuid.uuid4().hex[:10]}"
    admin = make_url(base)
    _pg_admin(admin, f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        _pg_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _pg_admin(url: Any, statement: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def run() -> None:
        conn = await asyncpg.connect(user=url.username, password=url.password,
                                     host=url.host, port=url.port or 5432, database=url.database)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def store_kinds(requested: Sequence[str]) -> list[str]:
    """``requested`` without ``postgres`` when the PostgreSQL env var is not set (said so)."""
    kinds = list(requested)
    if "postgres" in kinds and postgres_url() is None:
        print(f"postgres: skipped (set {POSTGRES_ENV})")
        kinds.remove("postgres")
    return kinds


def add_setting_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--setting", action="append", default=[], metavar="NAME=VALUE",
        help="extra Settings field for the iobridge server (value parsed as JSON if it "
             "parses, else a string), e.g. a raised admission limit; repeatable")


def extra_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--setting NAME=VALUE`` options as a dict."""
    values: dict[str, Any] = {}
    for item in args.setting:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--setting wants NAME=VALUE, not {item!r}")
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            values[name] = raw
    return values


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"
