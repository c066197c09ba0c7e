"""OTLP ``AnyValue``/``KeyValue`` to plain Python, and the flattened-list encoding some conventions use."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["MappingError", "any_value", "attributes_dict", "parse_json_text", "unflatten"]


class MappingError(ValueError):
    """A span's content is present but does not follow the convention it claims."""


def any_value(value: AnyValue) -> Any:
    """An ``AnyValue`` as str/bool/int/float/bytes/list/dict; an unset value is ``None``."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_dict(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value
    return None


def attributes_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    # Later duplicates win, as in the SDKs that set an attribute twice.
    return {kv.key: any_value(kv.value) for kv in attributes}


def parse_json_text(value: Any, *, what: str) -> Any:
    """A JSON-string attribute decoded, or a structured (already decoded) value passed through."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise MappingError(f"{what}: not valid JSON ({exc.__class__.__name__})") from exc
    return value


def unflatten(attributes: Mapping[str, Any], prefix: str) -> list[Any]:
    """Rebuild a list from OpenInference/OpenLLMetry style keys.

    ``prefix.0.message.role`` and ``prefix.0.message.contents.1.message_content.text`` become
    ``[{"message": {"role": ..., "contents": [{}, {"message_content": {"text": ...}}]}}]``. Indices
    may be sparse; missing slots become empty dicts so positions are kept.
    """
    dotted = prefix + "."
    root: dict[str, Any] = {}
    for key, val in attributes.items():
        if not key.startswith(dotted):
            continue
        segments = key[len(dotted) :].split(".")
        if not segments[0].isdigit():
            continue
        node = root
        for segment in segments[:-1]:
            child = node.get(segment)
            if not isinstance(child, dict):
                child = {}
                node[segment] = child
            node = child
        node[segments[-1]] = val
    return _as_lists(root) if root else []


def _as_lists(node: dict[str, Any]) -> Any:
    converted = {k: _as_lists(v) if isinstance(v, dict) else v for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        indices = sorted(int(k) for k in converted)
        if indices[-1] > 10_000:
            raise MappingError("flattened list index out of range")
        out: list[Any] = [{} for _ in range(indices[-1] + 1)]
        for k, v in converted.items():
            out[int(k)] = v
        return out
    return converted
