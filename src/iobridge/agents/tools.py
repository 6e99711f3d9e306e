"""Server tools: plain Python callables the server runs on the model's behalf.

The JSON Schema of the parameters is derived from the type hints with pydantic, so a tool is
just a typed function with a docstring. Sync functions run in a worker thread so they never
block the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

import pydantic

from iobridge.errors import InputError

ToolFunc = Callable[..., Any] | Callable[..., Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class ServerTool:
    """A tool executed by the server."""

    name: str
    description: str
    #: JSON Schema of the arguments object.
    parameters: dict[str, Any]
    func: ToolFunc
    _validator: pydantic.TypeAdapter[Any] | None = field(default=None, repr=False, compare=False)

    def describe(self) -> dict[str, str]:
        """Name and description, for agent discovery."""
        return {"name": self.name, "description": self.description}

    def as_declaration(self) -> dict[str, Any]:
        """The tool as an AG-UI/LLM tool declaration."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    async def invoke(self, args: Mapping[str, Any]) -> Any:
        """Validate ``args`` against the signature and call the function.

        Raises:
            InputError: the arguments do not match the parameters.
        """
        kwargs = dict(args)
        if self._validator is not None:
            try:
                model = self._validator.validate_python(kwargs)
            except pydantic.ValidationError as exc:
                raise InputError(
                    f"invalid arguments for tool {self.name!r}",
                    code="INVALID_TOOL_ARGS",
                    details=exc.errors(include_url=False, include_context=False),
                ) from exc
            kwargs = {k: getattr(model, k) for k in type(model).model_fields}
        if inspect.iscoroutinefunction(self.func):
            return await self.func(**kwargs)
        return await asyncio.to_thread(self.func, **kwargs)


def _signature_model(func: ToolFunc, name: str) -> type[pydantic.BaseModel]:
    hints = inspect.get_annotations(func, eval_str=True)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, default)
    return pydantic.create_model(f"{name}_args", **fields)


@overload
def tool(func: ToolFunc, /) -> ServerTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[ToolFunc], ServerTool]: ...
def tool(
    func: ToolFunc | None = None, /, *, name: str | None = None, description: str | None = None
) -> ServerTool | Callable[[ToolFunc], ServerTool]:
    """Make a ``ServerTool`` from a typed function (usable bare or with arguments)."""

    def build(f: ToolFunc) -> ServerTool:
        tool_name = name or f.__name__
        model = _signature_model(f, tool_name)
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        doc = inspect.getdoc(f) or ""
        return ServerTool(
            name=tool_name,
            description=description or doc.split("\n\n")[0].strip() or tool_name,
            parameters=schema,
            func=f,
            _validator=pydantic.TypeAdapter(model),
        )

    return build(func) if func is not None else build


def result_content(value: Any) -> str:
    """Encode a tool's return value as TOOL_CALL_RESULT content (JSON text)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
