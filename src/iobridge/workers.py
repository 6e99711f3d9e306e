"""``iobridge serve --workers N``: N processes accepting HTTP on one socket.

The parent migrates the database once, binds the listening socket, forks the workers (each
opens its own Backend and serves the inherited socket; the kernel hands each connection to
one of them) and then only supervises: SIGTERM/SIGINT are passed on, and when one worker
exits by itself the others are stopped too, so a process manager sees one service fail and
restarts it whole. Workers are replicas on one machine: runs, tool results, cancels and
thread locks are shared through Redis exactly as between machines.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType

from iobridge.config import Settings
from iobridge.store.migrate import upgrade

__all__ = ["serve_workers"]

#: Seconds a stopped worker has beyond ``drain_seconds`` before it is killed.
STOP_GRACE = 15.0
Worker = Callable[[Settings, socket.socket], None]


def serve_workers(settings: Settings, count: int, worker: Worker) -> int:
    """Run ``count`` workers until stopped; returns the exit status for the parent."""
    if not settings.database_url.startswith("memory"):
        asyncio.run(upgrade(settings.database_url))  # once, not raced by N workers
    sock = socket.create_server((settings.host, settings.port), backlog=2048)
    context = multiprocessing.get_context("fork")
    processes = [
        context.Process(target=worker, args=(settings, sock), name=f"iobridge-worker-{n}")
        for n in range(count)
    ]
    for process in processes:
        process.start()
    sock.close()  # the parent never accepts
    stopping: list[float] = []

    def stop(signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
        if not stopping:
            stopping.append(time.monotonic())
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(
        f"iobridge: HTTP on http://{settings.host}:{settings.port}{settings.prefix}, "
        f"{count} workers",
        flush=True,
    )
    status = 0
    while any(process.exitcode is None for process in processes):
        for process in processes:
            process.join(timeout=0.1)
            if process.exitcode is not None and not stopping:
                status = process.exitcode or 1
                print(f"iobridge: {process.name} exited ({process.exitcode}); stopping",
                      flush=True)
                stop()
        if stopping and time.monotonic() - stopping[0] > settings.drain_seconds + STOP_GRACE:
            for process in processes:
                if process.exitcode is None:
                    process.kill()
    return status
