"""Which run an N-PAMP stream resumes: ``(principal and resources, correlation_id)`` → runId.

A peer resumes a stream by its correlation_id, possibly on a new association (CC-STREAM
§12). The map is this server's; with ``redis_url`` each entry is also shared through the
Backend's run aliases, so a peer may resume on any replica. Entries are scoped like the
aliases (:meth:`~iobridge.app.RunAliases.scope`): a peer of the same principal but other
resources finds nothing under another's correlation_id, exactly as for one never used, and
cannot release it.
"""

from __future__ import annotations

from iobridge.app import Backend, FollowedRun
from iobridge.auth import Principal
from iobridge.errors import NotFoundError

__all__ = ["ResumableStreams"]


class ResumableStreams:
    """The streams this server started that a peer may resume, bounded by the runs the
    Backend still has (live or retained)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._runs: dict[tuple[str, bytes], tuple[Principal, str]] = {}
        self._scope = backend.aliases.scope

    def __len__(self) -> int:
        return len(self._runs)

    def run_ids(self) -> list[str]:
        """The runIds of the streams remembered here."""
        return [run_id for _, run_id in self._runs.values()]

    async def remember(self, principal: Principal, correlation_id: bytes, run: FollowedRun) -> None:
        """Register a started stream; forget entries whose runs are no longer retained.

        At most one entry per retained or live run can be useful, so the map is swept when
        it reaches that many (the Backend says which runs it still has).
        """
        settings = self.backend.settings
        if len(self._runs) >= settings.max_retained_runs + settings.max_active_runs:
            for key, (owner, run_id) in list(self._runs.items()):
                try:
                    self.backend.get_run(owner, run_id)
                except NotFoundError:
                    del self._runs[key]
        self._runs[(self._scope(principal), correlation_id)] = (principal, run.run_id)
        if settings.retention_seconds > 0:
            await self.backend.aliases.remember(principal, correlation_id, run.run_id)

    async def recall(self, principal: Principal, correlation_id: bytes) -> str | None:
        """The runId behind the stream, from this server or another replica."""
        entry = self._runs.get((self._scope(principal), correlation_id))
        if entry is not None:
            return entry[1]
        return await self.backend.aliases.recall(principal, correlation_id)

    def forget(self, principal: Principal, correlation_id: bytes) -> None:
        """The stream cannot be resumed any more (cancelled, or its run is gone)."""
        self._runs.pop((self._scope(principal), correlation_id), None)
