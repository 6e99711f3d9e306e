"""``iobridge check URL`` over real loopback HTTP: our server passes every level, and small
deliberately broken backends fail with exactly the rule they break and its first offending
event."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conformance.mini_backend import MiniBackend
from tests.helpers import LiveServer
from typer.testing import CliRunner

from iobridge.agents.base import Agent
from iobridge.auth import hash_api_key
from iobridge.cli import app
from iobridge.conformance.check.http_checks import HttpTarget, check_http
from iobridge.conformance.check.report import Report

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def mini() -> Iterator[Callable[[str | None], LiveServer]]:
    started: list[LiveServer] = []

    def start(broken: str | None) -> LiveServer:
        server = LiveServer(MiniBackend(broken).app())  # type: ignore[arg-type]
        started.append(server.__enter__())
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["check", *args])


def failed(report: Report) -> dict[str, Any]:
    return {r.rule: r for r in report.failed}


async def grade(url: str, **options: Any) -> Report:
    return await check_http(HttpTarget(url=url, timeout=15, **options))


def test_our_server_passes_every_level_json_and_junit(serve: Any, tmp_path: Path) -> None:
    server = serve()
    junit = tmp_path / "check.xml"
    result = cli(server.url, "--json", "--junit", str(junit), "--timeout", "15")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    outcomes = {r["rule"]: r["outcome"] for r in report["results"]}
    assert report["ok"] is True
    # Nothing skipped against the demo but the subagent rule: no agent of it has subagents.
    assert {r: o for r, o in outcomes.items() if o != "passed"} == {
        "L1.subagent-attribution": "skipped"}, outcomes
    for rule in ("L1.version-declared", "L1.newer-minor-served", "L1.other-major-refused",
                 "L4.capabilities-schema", "L4.versions-listed"):
        assert outcomes[rule] == "passed", rule
    for rule in ("L1.lf-framing", "L1.tool-call-closed", "L2.frontend-tool-in-run",
                 "L2.server-tool", "L2.result-duplicate", "L3.history-replay",
                 "L3.merge-new-messages", "L3.ownership", "L3.multitask-interrupt",
                 "L3.branches-regenerate", "L4.agents-list", "L4.agent-404"):
        assert outcomes[rule] == "passed"
    root = ET.fromstring(junit.read_bytes())
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert sorted(suites) == ["L1", "L2", "L3", "L4"]
    assert all(s.get("failures") == "0" for s in suites.values())
    assert [s.get("skipped") for s in suites.values()].count("1") == 1
    cases = sum(len(s.findall("testcase")) for s in suites.values())
    assert cases == len(report["results"])


def test_level_option_grades_only_up_to_that_level(serve: Any) -> None:
    server = serve()
    result = cli(server.url, "--json", "--level", "1")
    assert result.exit_code == 0, result.output
    levels = {r["level"] for r in json.loads(result.stdout)["results"]}
    assert levels == {"L1"}


def test_the_unbroken_mini_backend_passes(mini: Any) -> None:
    result = cli(mini(None).url, "--json", "--agent", "mini")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"] == {"passed": 32, "failed": 0, "skipped": 3}
    # It declares neither busy-thread strategies nor branches, and runs no subagent: those
    # are skipped, saying so.
    skipped = {r["rule"]: r["detail"] for r in report["results"] if r["outcome"] == "skipped"}
    assert skipped == {
        "L1.subagent-attribution": "no stream carried a subagent",
        "L3.multitask-interrupt": "the backend declares no busy-thread strategies (an unknown "
        "multitaskStrategy answered 200)",
        "L3.branches-regenerate": "the backend declares no branches (GET /threads/{id}/branches "
        "answered 404)",
    }


@pytest.mark.parametrize(
    ("broken", "rule", "offending"),
    [
        ("crlf", "L1.lf-framing", "\r\n"),
        ("null", "L1.no-null-fields", {"name": None}),
        # an event after the terminal also leaves the stream ending on a non-terminal
        ("after-terminal", "L1.nothing-after-terminal L1.terminal-last",
         {"type": "STEP_STARTED"}),
        ("open-tool-call", "L1.tool-call-closed", {"type": "RUN_FINISHED"}),
        ("second-run", "L2.frontend-tool-in-run", {"type": "RUN_FINISHED"}),
        ("foreign-thread", "L3.ownership", {"status": 200}),
        ("empty-delta", "L1.text-delta-non-empty", {"delta": ""}),
        ("bad-args", "L1.tool-args-json", {"type": "TOOL_CALL_END"}),
        # a result before the POST is also a second result once the real one streams
        ("early-result", "L2.frontend-tool-in-run L2.result-once",
         {"type": "TOOL_CALL_RESULT", "content": "guessed"}),
        ("duplicate-ok", "L2.result-duplicate", {"status": 200}),
        ("error-as-stream", "L1.errors-before-stream", {"status": 200}),
        # re-sent history stored twice: the merge rule, and the replayed tool result twice
        ("no-merge", "L3.merge-new-messages L3.history-replay", {}),
        ("no-version", "L1.version-declared", {"type": "RUN_STARTED"}),
        ("bad-capabilities", "L4.capabilities-schema", {"agent": "mini"}),
        ("subagent-leak", "L1.subagent-attribution", {"type": "STEP_STARTED",
                                                      "subagentRunId": "s1"}),
    ],
)
async def test_a_broken_backend_fails_exactly_the_rule_it_breaks(
    mini: Any, broken: str, rule: str, offending: Any
) -> None:
    report = await grade(mini(broken).url)
    assert not report.ok
    rules = rule.split()
    assert set(failed(report)) == set(rules)
    result = failed(report)[rules[0]]
    assert result.spec.startswith(("io-agent-protocol: ", "AG-UI 1.0: "))
    event = result.event
    if isinstance(offending, str):
        assert offending in event
    else:
        assert offending.items() <= event.items(), event


async def test_failure_details_name_the_event_and_the_step(mini: Any) -> None:
    report = await grade(mini("second-run").url)
    result = failed(report)["L2.frontend-tool-in-run"]
    assert result.spec == "io-agent-protocol: Tool Execution Model, Frontend tools"
    assert "result POST answered 404" in result.detail
    assert "not by a second run" in result.detail
    report = await grade(mini("open-tool-call").url)
    result = failed(report)["L1.tool-call-closed"]
    assert "tool call left-open is open" in result.detail
    assert result.spec == "io-agent-protocol: Required lifecycle guarantees"


def test_cli_exits_1_and_prints_the_rule_in_the_table(mini: Any) -> None:
    result = cli(mini("after-terminal").url)
    assert result.exit_code == 1
    assert "L1.nothing-after-terminal" in result.stdout
    assert "failed" in result.stdout and "STEP_STARTED" in result.stdout


def test_skips_say_why_when_the_agent_calls_no_tool(serve: Any) -> None:
    server = serve()
    report_json = cli(server.url, "--json", "--level", "2", "--server-tool-prompt", "Hello")
    results = {r["rule"]: r for r in json.loads(report_json.stdout)["results"]}
    skipped = results["L2.server-tool"]
    assert skipped["outcome"] == "skipped"
    assert "called no tool" in skipped["detail"]
    assert report_json.exit_code == 0  # a skip is not a failure


def test_bad_options_are_one_line_errors(serve: Any) -> None:
    assert cli("ftp://example", "--json").exit_code == 2
    assert cli("http://127.0.0.1:1", "--header", "no-colon").exit_code == 2
    assert cli("http://127.0.0.1:1", "--resource", "only-one").exit_code == 2
    assert cli("http://127.0.0.1:1", "--level", "5").exit_code == 2


def test_an_unreachable_backend_is_one_line_and_exit_2_not_a_report() -> None:
    from tests.helpers import free_port

    port = free_port()
    result = cli(f"http://127.0.0.1:{port}", "--json", "--timeout", "5")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"iobridge: cannot connect to http://127.0.0.1:{port}: All connection attempts failed "
        "(is the server running, and on this port?)"
    ]


def test_headers_carry_credentials_and_resources_pick_the_two_owners(serve: Any) -> None:
    key = {"sha256": hash_api_key("k1"), "principal": "alice", "resource_ids": ["alice", "team"]}
    server = serve(auth={"mode": "api-key", "api_keys": [key]})
    denied = cli(server.url, "--json", "--level", "1")
    assert denied.exit_code == 1
    first = json.loads(denied.stdout)["results"][0]
    assert (first["rule"], first["outcome"]) == ("L1.run-streams", "failed")
    assert first["detail"].startswith("answered 401")
    granted = cli(server.url, "--json", "--header", "X-API-Key: k1",
                  "--resource", "alice", "--resource", "team")
    assert granted.exit_code == 0, granted.stdout
    assert json.loads(granted.stdout)["counts"] == {"passed": 34, "failed": 0, "skipped": 1}
    foreign = cli(server.url, "--json", "--level", "3", "--header", "X-API-Key: k1",
                  "--resource", "alice", "--resource", "bob")
    results = {r["rule"]: r for r in json.loads(foreign.stdout)["results"]}
    assert results["L3.ownership"]["outcome"] == "skipped"
    assert "'bob' is refused (404)" in results["L3.ownership"]["detail"]


async def test_our_server_in_next_run_mode_fails_the_in_run_rule_only(serve: Any) -> None:
    """Plain AG-UI's next-run tool results are not the io protocol's in-run round trip."""
    report = await grade(serve(tool_result_mode="next-run").url)
    assert set(failed(report)) == {"L2.frontend-tool-in-run"}
    result = failed(report)["L2.frontend-tool-in-run"]
    assert result.event["type"] == "RUN_FINISHED"
    assert result.event["outcome"]["pendingToolCallIds"]
    assert "not by a second run" in result.detail


class Talker(Agent):
    """Answers every message with text and never calls a tool."""

    id = "talker"
    name = "Talker"
    description = "text only"

    async def run(self, ctx: Any) -> AsyncIterator[Any]:
        yield "Hello there."


def test_an_agent_that_calls_no_tool_has_the_tool_checks_skipped_with_the_reason(
    serve: Any,
) -> None:
    server = serve(agents=[Talker()])
    result = cli(server.url, "--json", "--agent", "talker")
    assert result.exit_code == 0, result.stdout
    results = {r["rule"]: r for r in json.loads(result.stdout)["results"]}
    skipped = {rule for rule, r in results.items() if r["outcome"] == "skipped"}
    assert skipped == {"L2.server-tool", "L2.frontend-tool-in-run", "L2.result-unknown-call",
                       "L2.result-duplicate", "L3.history-replay", "L1.subagent-attribution",
                       "L3.multitask-interrupt"}
    assert results["L1.subagent-attribution"]["detail"] == "no stream carried a subagent"
    assert "did not call the declared frontend tool iobridge_check_echo" in (
        results["L2.frontend-tool-in-run"]["detail"])
    assert "no run was parked to interrupt" in results["L3.multitask-interrupt"]["detail"]
    assert results["L3.branches-regenerate"]["outcome"] == "passed"
    assert "no tool round trip" in results["L3.history-replay"]["detail"]
    assert results["L4.agent-read"]["title"] == "GET /agents/talker reads that agent"


async def test_a_regenerate_that_moves_nothing_fails_the_branch_rule(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from iobridge.store.base import Branch
    from iobridge.store.sqlalchemy_store import SqlThreadStore

    async def forgetful(self: Any, thread_id: str, from_message_id: str, branch_id: str,
                        **_: Any) -> Branch:
        # The old reply stays current: no branch is made.
        return Branch(id=branch_id, from_message_id=from_message_id,
                      created_at=datetime.now(UTC), current=True)

    monkeypatch.setattr(SqlThreadStore, "fork_branch", forgetful)
    report = await grade(serve().url)
    assert set(failed(report)) == {"L3.branches-regenerate"}
    assert "do not show the regenerate" in failed(report)["L3.branches-regenerate"].detail
