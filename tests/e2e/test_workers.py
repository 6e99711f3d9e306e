"""``iobridge serve --workers 2`` with Redis: the real ``@ag-ui/client`` with a frontend tool.

The client's result POST is a new connection, so the kernel hands it to whichever worker
accepts first; runs go on until a result was answered through the other worker (counted by
the replies in Redis), and every run must end normally either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from harness import run_client, running_server
from tests.cluster.replicas import redis_server

pytestmark = pytest.mark.timeout(180)

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city (runs in the browser).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp("workers")
    with redis_server(workdir) as redis_url, running_server(
        workdir, env={"IOBRIDGE_REDIS_URL": redis_url}, args=("--workers", "2")
    ) as url:
        yield url, redis_url


def test_frontend_tool_round_trips_across_two_workers(workers: tuple[str, str]) -> None:
    url, redis_url = workers
    # Answers to forwarded commands (tool results, cancels) are published to the worker
    # that forwarded them: one seen means a result crossed workers.
    answers = redis.Redis.from_url(redis_url).pubsub()
    answers.psubscribe("iobridge:answer:*")
    crossed = runs = 0
    while runs < 40 and not crossed:
        runs += 1
        report = run_client(url, 'Please call get_weather {"city": "Paris"}', tools=[WEATHER],
                            frontend_results={"get_weather": {"temperature": 21}})
        [post] = report["posts"]
        assert post["status"] == 200 and post["body"] == {"status": "accepted"}
        kinds = [e["type"] for e in report["wire"]]
        assert kinds[-1] == "RUN_FINISHED" and kinds.count("TOOL_CALL_RESULT") == 1
        while (message := answers.get_message(timeout=0.2)) is not None:
            crossed += message["type"] == "pmessage"
    answers.close()
    assert crossed >= 1, "every result POST landed on the run's worker"
    print(f"a result crossed workers after {runs} runs")


def test_workers_without_redis_is_one_clear_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from iobridge.cli import app

    result = CliRunner().invoke(app, ["serve", "--workers", "2", "--port", "0"],
                                env={"IOBRIDGE_REDIS_URL": None, "IOBRIDGE_DATABASE_URL":
                                     f"sqlite+aiosqlite:///{tmp_path}/x.db"})
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "iobridge: --workers N (N > 1) needs redis_url (IOBRIDGE_REDIS_URL): workers share "
        "runs through Redis"
    ]
