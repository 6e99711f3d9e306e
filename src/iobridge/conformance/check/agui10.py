"""AG-UI 1.0 checks: the version a backend declares and serves, the capabilities it declares,
and subagent attribution in its streams.

Graded from the 1.0 specification (versioning, capabilities, subagents) and the 1.0 schema,
as the ``ag_ui.core`` models carry it; nothing here comes from iobridge's server. What a
backend does not declare is skipped, with the reason: a backend without ``capabilities`` in
``GET /agents``, or whose streams carry no subagent, has nothing to grade there. The version
is not optional: an implementation of 1.0 MUST declare it on RUN_STARTED.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pydantic
from ag_ui.core import AgentCapabilities

from iobridge.conformance.check.report import Failed, Outcome
from iobridge.conformance.check.threads import describe

if TYPE_CHECKING:
    from iobridge.conformance.check.http_checks import HttpCheck
    from iobridge.conformance.check.stream import Capture

__all__ = ["AgUi10Checks", "capability_problems", "subagent_problem"]

SPEC_VERSION = "AG-UI 1.0: Versioning and Compatibility, Version negotiation"
SPEC_CAPABILITIES = "AG-UI 1.0: Capabilities (AgentCapabilities schema)"
SPEC_SUBAGENTS = "AG-UI 1.0: Subagents (attribution)"

_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
#: Events about the run itself or the whole conversation: never a subagent's.
_RUN_SCOPED = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"})
#: Open objects of a declaration (any key): not checked for unknown members.
_OPEN_KEYS = frozenset({"custom", "metadata", "items", "parameters"})


def _unknown(model: type[pydantic.BaseModel], data: Mapping[str, Any], path: str) -> list[str]:
    fields = {(f.alias or n): f for n, f in model.model_fields.items()}
    found: list[str] = []
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            found.append(f"{path}{key}")
            continue
        nested = next((m for m in getattr(field.annotation, "__args__", (field.annotation,))
                       if isinstance(m, type) and issubclass(m, pydantic.BaseModel)), None)
        if nested is not None and key not in _OPEN_KEYS and isinstance(value, Mapping):
            found += _unknown(nested, value, f"{path}{key}.")
    return found


def capability_problems(capabilities: Any) -> list[str]:
    """What keeps ``capabilities`` from validating against the 1.0 ``AgentCapabilities``
    schema, whose capability objects are closed (empty: it validates)."""
    if not isinstance(capabilities, Mapping):
        return ["capabilities is not an object"]
    problems = [f"unknown member {key}" for key in _unknown(AgentCapabilities, capabilities, "")]
    try:
        AgentCapabilities.model_validate(dict(capabilities), strict=True)
    except pydantic.ValidationError as exc:
        problems += [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
    return problems


def subagent_problem(events: list[dict[str, Any]]) -> tuple[int, str] | None:
    """The first event that breaks subagent attribution, with why (``None``: none does).

    Work attributed to a subagent (``subagentRunId``) comes between its SUBAGENT_STARTED and
    its SUBAGENT_FINISHED or SUBAGENT_ERROR; a nested subagent names an open parent; run-scoped
    events are never attributed; one invocation starts once.
    """
    open_runs: set[Any] = set()
    seen: set[Any] = set()
    for index, event in enumerate(events):
        kind = event.get("type")
        run = event.get("subagentRunId")
        if kind == "SUBAGENT_STARTED":
            if run in seen:
                return index, f"subagent run {run!r} started twice"
            parent = event.get("parentSubagentRunId")
            if parent is not None and parent not in open_runs:
                return index, f"parent subagent run {parent!r} is not open"
            seen.add(run)
            open_runs.add(run)
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            if run not in open_runs:
                return index, f"{kind} for subagent run {run!r}, which is not open"
            open_runs.discard(run)
        elif run is not None:
            if kind in _RUN_SCOPED:
                return index, f"{kind} is run-scoped but carries subagentRunId {run!r}"
            if run not in open_runs:
                return index, f"{kind} attributed to subagent run {run!r}, which is not open"
    return None


class AgUi10Checks:
    """The 1.0 rules, graded over ``check``'s client (and its captured streams): the version
    rules with level 1 (``versions``, and ``grade_streams`` after every level ran), the
    capabilities with level 4 (``capabilities``)."""

    def __init__(self, check: HttpCheck) -> None:
        self.check = check

    def grade_streams(self) -> None:
        """Rules over every stream the check read (call after the other levels ran)."""
        check = self.check
        read = [c for c in check.captures if check.streamed(c)]
        title = "RUN_STARTED declares the protocol version the backend speaks (MAJOR.MINOR)"
        bad = next(((c, s) for c in read for s in c.events[:1]
                    if not _VERSION.match(str(s.get("protocolVersion", "")))), None)
        if not read:
            check.add("L1.version-declared", SPEC_VERSION, title, Outcome.SKIPPED,
                      "no stream was read")
        elif bad is not None:
            capture, started = bad
            check.add("L1.version-declared", SPEC_VERSION, title, Outcome.FAILED,
                      f"{capture.label}: RUN_STARTED has no protocolVersion (an implementation "
                      "of 1.0 MUST declare it)", started)
        else:
            check.add("L1.version-declared", SPEC_VERSION, title, Outcome.PASSED,
                      f"{len(read)} stream(s) read")
        title = "work attributed to a subagent stays inside its SUBAGENT_STARTED … FINISHED"
        carrying = [c for c in read if "SUBAGENT_STARTED" in c.types()]
        if not carrying:
            check.add("L1.subagent-attribution", SPEC_SUBAGENTS, title, Outcome.SKIPPED,
                      "no stream carried a subagent")
            return
        for capture in carrying:
            found = subagent_problem(capture.events)
            if found is not None:
                index, why = found
                check.add("L1.subagent-attribution", SPEC_SUBAGENTS, title, Outcome.FAILED,
                          f"{capture.label}: event {index}: {why}", capture.events[index])
                return
        check.add("L1.subagent-attribution", SPEC_SUBAGENTS, title, Outcome.PASSED,
                  f"{len(carrying)} stream(s) with subagents")

    async def versions(self) -> None:
        check = self.check
        probe = await self._declaring("AGUI newer minor", "1.999")
        title = "a run declaring a newer minor of its line is served"
        if check.streamed(probe):
            check.add("L1.newer-minor-served", SPEC_VERSION, title, Outcome.PASSED)
        else:
            check.add("L1.newer-minor-served", SPEC_VERSION, title, Outcome.FAILED,
                      f"answered {probe.status}: a newer minor MUST be served", _answer(probe))
        other = await self._declaring("AGUI other major", "999.0")
        title = "a run declaring a major line the backend does not speak is refused before it"
        if 400 <= other.status < 500 and not check.streamed(other):
            check.add("L1.other-major-refused", SPEC_VERSION, title, Outcome.PASSED,
                      f"answered {other.status}")
        elif check.streamed(other):
            check.add("L1.other-major-refused", SPEC_VERSION, title, Outcome.SKIPPED,
                      "the backend served it, which 1.0 allows (it MAY refuse)")
        else:
            check.add("L1.other-major-refused", SPEC_VERSION, title, Outcome.FAILED,
                      f"answered {other.status}, not a refusal before the stream",
                      _answer(other))

    async def _declaring(self, label: str, version: str) -> Capture:
        check = self.check
        body = check.body(check.ids("thread"), [check.user("Hello from iobridge check.")])
        body["protocolVersion"] = version
        return await check.stream(label, body)

    async def capabilities(self) -> None:
        check = self.check
        title = "each agent's capabilities validate against the 1.0 AgentCapabilities schema"
        try:
            listed = await check.request("GET", "/agents")
            body = listed.json()
        except (Failed, ValueError) as exc:
            check.add("L4.capabilities-schema", SPEC_CAPABILITIES, title, Outcome.FAILED,
                      str(exc))
            return
        agents = body.get("agents") if isinstance(body, dict) else body
        agents = [a for a in agents if isinstance(a, dict)] if isinstance(agents, list) else []
        declaring = [a for a in agents if "capabilities" in a]
        wrong = next(((a, p) for a in declaring if (p := capability_problems(a["capabilities"]))),
                     None)
        if not declaring:
            check.add("L4.capabilities-schema", SPEC_CAPABILITIES, title, Outcome.SKIPPED,
                      "no agent in GET /agents declares capabilities")
        elif wrong is not None:
            agent, problems = wrong
            check.add("L4.capabilities-schema", SPEC_CAPABILITIES, title, Outcome.FAILED,
                      f"agent {agent.get('id')!r}: {'; '.join(problems[:5])}",
                      {"agent": agent.get("id"), "capabilities": agent["capabilities"]})
        else:
            check.add("L4.capabilities-schema", SPEC_CAPABILITIES, title, Outcome.PASSED,
                      f"{len(declaring)} agent(s) declare capabilities")
        versions = body.get("protocolVersions") if isinstance(body, dict) else None
        title = "GET /agents lists the protocol versions the backend speaks"
        if versions is None:
            check.add("L4.versions-listed", SPEC_VERSION, title, Outcome.SKIPPED,
                      "GET /agents has no protocolVersions")
        elif isinstance(versions, list) and versions and all(
            isinstance(v, str) and _VERSION.match(v) for v in versions
        ):
            check.add("L4.versions-listed", SPEC_VERSION, title, Outcome.PASSED,
                      ", ".join(versions))
        else:
            check.add("L4.versions-listed", SPEC_VERSION, title, Outcome.FAILED,
                      "protocolVersions must be a non-empty list of MAJOR.MINOR strings",
                      describe("GET", "/agents", listed))


def _answer(capture: Capture) -> dict[str, Any]:
    return {"status": capture.status, "contentType": capture.content_type,
            "body": capture.raw[:500].decode("utf-8", "replace")}
