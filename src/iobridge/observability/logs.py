"""Run-scoped logging: every record logged inside a run carries its ``runId`` and ``threadId``.

The engine sets :data:`current_run` in each run's task (tasks the agent starts inherit it);
``RunFilter`` copies it onto records, and ``JsonFormatter`` writes one JSON object per line
(``log_format = "json"``). Only the standard library and orjson.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

__all__ = ["JsonFormatter", "RunFilter", "configure_logging", "current_run"]

#: ``(threadId, runId)`` of the run the current task works for.
current_run: ContextVar[tuple[str, str] | None] = ContextVar("iobridge_run", default=None)



class RunFilter(logging.Filter):
    """Stamps ``run_id``/``thread_id`` on records (``None`` outside a run); passes all."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = current_run.get()
        record.thread_id, record.run_id = ids if ids is not None else (None, None)
        return True


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "threadId"?, "runId"?, "exception"?}``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ).replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        run_id = getattr(record, "run_id", None)
        if run_id is not None:
            line["threadId"] = getattr(record, "thread_id", None)
            line["runId"] = run_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str, log_format: str) -> logging.Handler:
    """Log to stderr; returns the handler.

    Text: iobridge's own records (uvicorn keeps its format; it configures only its loggers).
    JSON: every logger's records, through the root logger (uvicorn's, the agents' and their
    libraries' too), so every line of a run carries its ids; ``serve_http`` then gives
    uvicorn no log configuration of its own.
    """
    handler = logging.StreamHandler()
    handler.addFilter(RunFilter())
    ours = logging.getLogger("iobridge")
    ours.setLevel(level.upper())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        ours.handlers = []
        root = logging.getLogger()
        root.handlers = [handler]
        root.setLevel(level.upper())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        ours.handlers = [handler]
    return handler
