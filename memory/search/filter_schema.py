"""The filter language (``memory.search.filters``) as JSON-schema components of the OpenAPI
schema, written from the same field table the parser checks against, so the two never differ.

``filter_components`` is a drf-spectacular post-processing hook
(``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``); fields and parameters point at
``MemoryFilter`` through ``FILTER_REF``.
"""

from __future__ import annotations

from typing import Any

from memory.search.filters import FIELDS, FILTER_MAX_LIST

FILTER_REF = {"$ref": "#/components/schemas/MemoryFilter"}

_SCALAR: dict[str, Any] = {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
_VALUES = {
    "text": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "time": {"type": "string", "format": "date-time"},
}
_CONDITION_NAMES = {
    "text": "TextCondition",
    "integer": "IdCondition",
    "number": "NumberCondition",
    "time": "TimeCondition",
    "tags": "TagsCondition",
    "metadata": "MetadataCondition",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _operand(kind: str, op: str) -> dict[str, Any]:
    if op == "exists":
        return {"type": "boolean"}
    if kind == "tags":
        tags = {"type": "array", "items": {"type": "string"}, "maxItems": FILTER_MAX_LIST}
        return {"oneOf": [{"type": "string"}, tags]} if op == "contains" else tags
    if kind == "metadata":
        if op == "eq":
            return {}
        if op in ("in", "nin"):
            return {"type": "array", "items": _SCALAR, "maxItems": FILTER_MAX_LIST}
        if op in ("gt", "gte", "lt", "lte"):
            return {"oneOf": [{"type": "number"}, {"type": "string"}]}
        return _SCALAR
    value = _VALUES[kind]
    if op in ("in", "nin"):
        return {"type": "array", "items": value, "maxItems": FILTER_MAX_LIST}
    return value


def _condition(kind: str) -> dict[str, Any]:
    # Every operator some field of the kind takes (expires_at's exists is a time's too).
    ops = dict.fromkeys(op for spec in FIELDS.values() if spec.kind == kind for op in spec.ops)
    return {
        "type": "object",
        "description": f"Operators over a {kind} field; several are ANDed.",
        "properties": {op: _operand(kind, op) for op in ops},
    }


def filter_components() -> dict[str, Any]:
    components: dict[str, Any] = {name: _condition(kind) for kind, name in _CONDITION_NAMES.items()}
    properties: dict[str, Any] = {
        "AND": {"type": "array", "items": FILTER_REF, "description": "Every filter holds."},
        "OR": {"type": "array", "items": FILTER_REF, "description": "Some filter holds."},
        "NOT": {**FILTER_REF, "description": "The filter does not hold."},
    }
    for name, spec in FIELDS.items():
        condition = _ref(_CONDITION_NAMES[spec.kind])
        if spec.kind == "metadata":
            properties[name] = {
                "type": "object",
                "description": "Metadata keys (dotted for nested ones), each a value to equal "
                "(an object: to contain) or operators.",
                "additionalProperties": {"oneOf": [condition, {}]},
            }
        elif spec.kind == "tags":
            properties[name] = {
                "oneOf": [condition, _operand("tags", "contains")],
                "description": "A tag or a list: carries all of them.",
            }
        else:
            shorthand: dict[str, Any] = dict(_VALUES[spec.kind])
            if spec.choices:
                shorthand["enum"] = list(spec.choices)
            properties[name] = {"oneOf": [condition, shorthand]}
    components["MemoryFilter"] = {
        "type": "object",
        "description": "Fields and AND / OR / NOT over an agent's memories (docs/filters.md).",
        "properties": properties,
    }
    return components


def add_filter_components(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular post-processing hook: the filter's components."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(filter_components())
    return result
