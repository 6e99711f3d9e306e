"""Content parts of messages (AG-UI 1.0): their shapes, their sizes, and the media an agent takes.

A user message's ``content`` (and a tool message's, in 1.0) may be a list of parts: ``text``,
or a media part (``image``, ``audio``, ``video``, ``document``) whose ``source`` carries the
bytes inline (``{"type": "data", "value": <base64>, "mimeType"}``), names a URL
(``{"type": "url", "value", "mimeType"?}``) or a file the model provider already holds
(``{"type": "file", "value": <handle>, "provider"?, "mimeType"?}``).

Three checks, each a pure function:

- ``content_problems``: the known part types have the shapes of the ``ag_ui.core`` models,
  and inline data is base64 (a consumer that stored it would otherwise fail on every later
  turn). Unknown part types are kept (newer clients), the legacy 0.x ``binary`` part too.
- ``check_media_size``: one part, and all the media of one message, stay within
  ``MediaLimits`` (413 ``MEDIA_TOO_LARGE``). Inline data counts its decoded bytes, a URL or
  a handle its characters.
- ``check_media_accepted``: each media part's modality is one the agent does not declare
  ``false`` for in ``multimodal.input`` (400 ``UNSUPPORTED_MEDIA`` naming what it accepts).
  A document is ``pdf`` when its MIME type says so, ``file`` otherwise.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from ag_ui.core import ContentPart

from iobridge.errors import InputError, PayloadTooLarge

__all__ = [
    "DEFAULT_MAX_MEDIA_MESSAGE_BYTES",
    "DEFAULT_MAX_MEDIA_PART_BYTES",
    "MEDIA_PART_TYPES",
    "MEDIA_TOO_LARGE",
    "UNSUPPORTED_MEDIA",
    "MediaLimits",
    "check_media",
    "check_result_media",
    "content_problems",
    "media_kind",
    "part_bytes",
]

#: Part types that carry media (``text`` does not).
MEDIA_PART_TYPES = frozenset({"image", "audio", "video", "document"})
_KNOWN = MEDIA_PART_TYPES | {"text"}
#: Default most bytes of one media part (``Settings.max_media_part_bytes``).
DEFAULT_MAX_MEDIA_PART_BYTES = 2 * 1024 * 1024
#: Default most bytes of all the media of one message (``Settings.max_media_message_bytes``).
DEFAULT_MAX_MEDIA_MESSAGE_BYTES = 3 * 1024 * 1024
MEDIA_TOO_LARGE = "MEDIA_TOO_LARGE"
UNSUPPORTED_MEDIA = "UNSUPPORTED_MEDIA"
#: The modalities of ``AgentCapabilities.multimodal.input``, in the order messages name them.
_MODALITIES = ("image", "audio", "video", "pdf", "file")
#: Roles whose content parts reach the model.
_ROLES = ("user", "tool")

_part_adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ContentPart)


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaLimits:
    """How much media one part, and one message, may carry (bytes)."""

    max_part_bytes: int = DEFAULT_MAX_MEDIA_PART_BYTES
    max_message_bytes: int = DEFAULT_MAX_MEDIA_MESSAGE_BYTES


def _decoded_size(value: str) -> int:
    """Bytes a base64 text decodes to, without decoding it."""
    padding = len(value) - len(value.rstrip("="))
    return len(value) // 4 * 3 - min(padding, 2)


def content_problems(content: Any, loc: Sequence[Any]) -> list[dict[str, Any]]:
    """What is wrong with a content-part list, as ``{loc, message}`` problems (empty: fine).

    Known parts are checked against the ``ag_ui.core`` models, ``data`` sources for
    base64; other part types pass (they are kept, and never reach a model).
    """
    if not isinstance(content, list):
        return []
    problems: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        where = [*loc, index]
        if not isinstance(part, Mapping):
            problems.append({"loc": where, "message": "a content part must be an object"})
            continue
        if part.get("type") not in _KNOWN:
            continue
        try:
            _part_adapter.validate_python(part)
        except pydantic.ValidationError as exc:
            off = dict(include_url=False, include_context=False, include_input=False)
            problems += [
                {"loc": [*where, *err["loc"][1:]], "message": err["msg"]}
                for err in exc.errors(**off)
            ]
            continue
        source = part.get("source")
        if isinstance(source, Mapping) and source.get("type") == "data":
            try:
                binascii.a2b_base64(source["value"], strict_mode=True)
            except (binascii.Error, ValueError):
                problems.append({"loc": [*where, "source", "value"],
                                 "message": "inline data must be base64 (RFC 4648, padded)"})
    return problems


def media_kind(part: Mapping[str, Any]) -> str | None:
    """The ``multimodal.input`` modality a part needs (``None`` for text and unknown parts)."""
    kind = part.get("type")
    if kind in ("image", "audio", "video"):
        return str(kind)
    if kind == "document":
        source = part.get("source")
        mime = source.get("mimeType") if isinstance(source, Mapping) else None
        return "pdf" if _base_type(mime) == "application/pdf" else "file"
    if kind == "binary":  # the 0.x part: its MIME type says what it is
        mime = _base_type(part.get("mimeType"))
        major = mime.partition("/")[0]
        if major in ("image", "audio", "video"):
            return major
        return "pdf" if mime == "application/pdf" else "file"
    return None


def _base_type(mime: Any) -> str:
    return mime.split(";", 1)[0].strip().lower() if isinstance(mime, str) else ""


def part_bytes(part: Mapping[str, Any]) -> int:
    """What a media part weighs: decoded bytes of inline data, characters of a URL or handle."""
    source = part.get("source")
    if isinstance(source, Mapping):
        value = source.get("value")
        if not isinstance(value, str):
            return 0
        return _decoded_size(value) if source.get("type") == "data" else len(value)
    if part.get("type") == "binary":
        data, url = part.get("data"), part.get("url")
        return (_decoded_size(data) if isinstance(data, str) else 0) + (
            len(url) if isinstance(url, str) else 0
        )
    return 0


def _media(messages: Iterable[Mapping[str, Any]]) -> Iterable[tuple[int, list[tuple[int, Any]]]]:
    """Each message with media parts: its index and its ``(part index, part)`` pairs."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") not in _ROLES or not isinstance(content, list):
            continue
        parts = [(i, p) for i, p in enumerate(content)
                 if isinstance(p, Mapping) and media_kind(p) is not None]
        if parts:
            yield index, parts


def check_media(
    messages: Sequence[Mapping[str, Any]],
    limits: MediaLimits,
    accepted: Callable[[], Mapping[str, bool]],
    *,
    agent_id: str,
) -> None:
    """Check the media of a run's messages against the limits and the agent's declaration.

    ``accepted`` gives the agent's ``multimodal.input`` (asked only when a user message has
    media; a modality it leaves out is let through: undeclared is not unsupported). Tool
    results are measured but not refused by modality: a model that cannot take a returned
    file is given a note instead.

    Raises:
        PayloadTooLarge: ``MEDIA_TOO_LARGE``, a part over ``max_part_bytes`` or a message
            whose media add up to more than ``max_message_bytes``.
        InputError: ``UNSUPPORTED_MEDIA``, a user message carries a modality the agent
            declares it does not take (``details`` names the part and what it accepts).
    """
    for index, parts in _media(messages):
        _check_sizes(parts, limits, ["messages", index])
        if messages[index].get("role") != "user":
            continue
        declared = accepted()
        for part_index, part in parts:
            kind = media_kind(part)
            if kind is not None and declared.get(kind) is False:
                raise _unsupported(agent_id, kind, index, part_index, declared)


def _unsupported(
    agent_id: str, kind: str, index: int, part_index: int, accepted: Mapping[str, bool]
) -> InputError:
    takes = [m for m in _MODALITIES if accepted.get(m) is not False]
    what = ", ".join(takes) if takes else "text only"
    return InputError(
        f"agent {agent_id!r} does not accept {kind} input (messages[{index}].content"
        f"[{part_index}]); it accepts: {what}",
        code=UNSUPPORTED_MEDIA,
        details={"loc": ["messages", index, "content", part_index], "media": kind,
                 "accepted": takes},
    )


def check_result_media(parts: Sequence[Any], limits: MediaLimits) -> None:
    """The size limits of a message's media, for a tool result posted as content parts.

    Raises:
        PayloadTooLarge: ``MEDIA_TOO_LARGE`` (see :func:`check_media`).
    """
    media = [(i, p) for i, p in enumerate(parts)
             if isinstance(p, Mapping) and media_kind(p) is not None]
    _check_sizes(media, limits, [])


def _check_sizes(
    parts: Sequence[tuple[int, Any]], limits: MediaLimits, loc: list[Any]
) -> None:
    where = "".join(f"[{x}]" if isinstance(x, int) else x for x in loc) or "the result"
    total = 0
    for part_index, part in parts:
        size = part_bytes(part)
        if size > limits.max_part_bytes:
            raise PayloadTooLarge(
                f"{where}.content[{part_index}] carries {size} bytes of {media_kind(part)}; "
                f"one part may carry at most {limits.max_part_bytes}",
                code=MEDIA_TOO_LARGE,
                details={"loc": [*loc, "content", part_index], "bytes": size,
                         "limit": limits.max_part_bytes},
            )
        total += size
    if total > limits.max_message_bytes:
        raise PayloadTooLarge(
            f"{where} carries {total} bytes of media; one message may carry at most "
            f"{limits.max_message_bytes}",
            code=MEDIA_TOO_LARGE,
            details={"loc": loc, "bytes": total, "limit": limits.max_message_bytes},
        )
