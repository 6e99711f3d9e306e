"""Stores that stop answering, on loopback: ``Relay`` (a TCP relay to a real database the
test can cut or freeze, the way a restart, a partition or a SIGSTOPped server cuts a running
server off) and ``SilentServer`` (accepts connections and never sends a byte)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from tests.helpers import free_port


class Relay:
    """A TCP relay to ``target`` in its own thread: ``cut()`` closes its port and every
    relayed connection; ``freeze()`` keeps accepting but forwards nothing; ``restore()``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.frozen = False
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def restore(self) -> None:
        self.frozen = False
        self._call(self._listen())

    def cut(self) -> None:
        self._call(self._close())

    def freeze(self) -> None:
        self.frozen = True

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._transports.update({writer.transport, up_writer.transport})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    while self.frozen:
                        await asyncio.sleep(0.05)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def close(self) -> None:
        self.cut()
        self._call(self._finish())
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _finish(self) -> None:
        """Let the relayed connections' tasks end before the loop stops (no task is left
        pending for the garbage collector to complain about)."""
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class SilentServer:
    """A TCP server on loopback that accepts every connection and never answers (a database
    URL pointed at it hangs at the first read, connecting included)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read from or written to

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        for conn in self.accepted:
            conn.close()
