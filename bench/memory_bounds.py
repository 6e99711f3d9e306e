"""Peak server RSS under big echo runs and slow resume followers (issue 10: under
``max_retained_bytes`` + 100 MiB).

A server in its own process (default SQLite store, a fresh temp file) serves a FunctionAgent
that echoes the last user message word by word. The client sends a 3.6 MiB body of one-letter
words three times (one after the other, each read at full speed: about 1.9 M events each),
then opens 5 resume followers (``GET /runs/{runId}/events`` from the start; if that answers
410, again from 100,000 events before the end) on the last run and reads them slowly for a
bounded time. Prints the server's RSS before, its peak (VmHWM,
and /proc samples per phase) against the limit. ``max_retained_bytes`` is passed only when
this version's ``Settings`` has it; otherwise the issue's default (256 MiB) stands in as the
nominal limit and the output says it is not enforced.

    .venv/bin/python bench/memory_bounds.py [--body-mib 3.6] [--followers 5]
        [--follow-seconds 15] [--max-retained-mib 256] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import string
import threading
import time
from typing import Any

from _harness import (
    ServerProcess,
    SseCounter,
    add_setting_option,
    check,
    database,
    extra_settings,
    mib,
    post_run,
    request_bytes,
    run_body,
)

MIB = 1 << 20
HEADROOM = 100 * MIB
ISSUE_DEFAULT_RETAINED = 256 * MIB
RUNS = 3
#: Resume point for followers when the start of the run is no longer retained.
TAIL_EVENTS = 100_000


def echo_text(body_bytes: int) -> str:
    """One-letter words separated by spaces, filling about ``body_bytes`` of JSON body."""
    letters = string.ascii_lowercase
    words = (body_bytes - 400) // 2
    return " ".join(letters[i % 26] for i in range(words))


class Sampler:
    """Polls the server's RSS in a thread; ``peak()`` since the last ``reset()``."""

    def __init__(self, server: ServerProcess, interval: float = 0.05) -> None:
        self.server, self.interval = server, interval
        self._peak = 0
        #: The highest sample since start (VmHWM and statm count slightly differently).
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss = self.server.rss_bytes()
            self._peak = max(self._peak, rss)
            self.highest = max(self.highest, rss)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def reset(self) -> None:
        self._peak = self.server.rss_bytes()

    def peak(self) -> int:
        return max(self._peak, self.server.rss_bytes())


async def slow_follower(port: int, run_id: str, after: int, seconds: float,
                        rate: int) -> tuple[int, int]:
    """Resume ``run_id`` after event ``after``, reading ``rate`` bytes/s for ``seconds``;
    returns (HTTP status, bytes read)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    counter = SseCounter()
    step = max(1024, rate // 20)
    try:
        writer.write(request_bytes("GET", f"/io-bridge/runs/{run_id}/events",
                                   headers={"Last-Event-ID": str(after)}))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            chunk = await reader.read(step)
            if not chunk:
                break
            counter.feed(chunk)
            await asyncio.sleep(step / rate)
    finally:
        writer.transport.abort()
    return counter.status, counter.bytes


async def followers(port: int, run_id: str, after: int, n: int, seconds: float,
                    rate: int) -> list[tuple[int, int]]:
    return list(await asyncio.gather(*(slow_follower(port, run_id, after, seconds, rate)
                                       for _ in range(n))))


def limit_settings(max_retained: int | None) -> tuple[dict[str, Any], int, str]:
    """(settings to pass, the RSS limit, how the limit was chosen)."""
    from iobridge.config import Settings

    field = Settings.model_fields.get("max_retained_bytes")
    if field is None:
        retained = max_retained or ISSUE_DEFAULT_RETAINED
        return {}, retained + HEADROOM, (
            f"Settings has no max_retained_bytes: nominal {mib(retained)} (issue default), "
            "not enforced by this server")
    retained = max_retained if max_retained is not None else int(field.default)
    settings = {"max_retained_bytes": retained} if max_retained is not None else {}
    source = "passed" if settings else "Settings default"
    return settings, retained + HEADROOM, f"max_retained_bytes = {mib(retained)} ({source})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body-mib", type=float, default=3.6)
    parser.add_argument("--followers", type=int, default=5)
    parser.add_argument("--follow-seconds", type=float, default=15.0)
    parser.add_argument("--follow-rate", type=int, default=256 * 1024,
                        help="bytes/s each follower reads")
    parser.add_argument("--max-retained-mib", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per echo run")
    parser.add_argument("--quick", action="store_true", help="0.36 MiB body, 3 s followers")
    add_setting_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.body_mib, args.follow_seconds = 0.36, 3.0
    max_retained = None if args.max_retained_mib is None else int(args.max_retained_mib * MIB)
    extra, limit, how = limit_settings(max_retained)
    text = echo_text(int(args.body_mib * MIB))
    started = time.monotonic()
    print(f"echo of a {args.body_mib} MiB body ({text.count(' ') + 1:,} words) x {RUNS}, then "
          f"{args.followers} slow resume followers; limit {mib(limit)}: {how}")
    with database("sqlite") as url, ServerProcess(
        "bridge", agent="echo", settings={"database_url": url, **extra, **extra_settings(args)}
    ) as server, Sampler(server) as sampler:
        warm = asyncio.run(post_run(server.port, run_body("warm", "warm", "a b c")))
        check([warm], "warm-up")
        print(f"  before: RSS {mib(server.rss_bytes())}")
        for i in range(RUNS):
            sampler.reset()
            result = asyncio.run(asyncio.wait_for(
                post_run(server.port, run_body(f"echo-{i}", f"echo-{i}", text)), args.timeout))
            check([result], f"echo run {i}")
            print(f"  echo run {i + 1}: {result.events:,} events, {mib(result.bytes)} of SSE in "
                  f"{result.elapsed:.1f} s; peak RSS {mib(sampler.peak())}, "
                  f"after {mib(server.rss_bytes())}")
        # From the first event (the issue's case); where the run's log no longer reaches
        # back that far (410), again from within its newest TAIL_EVENTS events.
        for after in (0, max(0, result.events - TAIL_EVENTS)):
            sampler.reset()
            got = asyncio.run(followers(server.port, f"echo-{RUNS - 1}", after, args.followers,
                                        args.follow_seconds, args.follow_rate))
            statuses = sorted({status for status, _ in got})
            print(f"  {args.followers} slow followers after event {after:,} "
                  f"({args.follow_seconds:.0f} s, {args.follow_rate // 1024} KiB/s each; "
                  f"HTTP {statuses}, read {mib(sum(b for _, b in got))}): "
                  f"peak RSS {mib(sampler.peak())}")
            if statuses != [410]:
                break
        peak = max(server.peak_rss_bytes(), sampler.highest)
    verdict = "OK" if peak <= limit else "ABOVE LIMIT"
    print(f"peak server RSS {mib(peak)} vs limit {mib(limit)}: {verdict}")
    print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
