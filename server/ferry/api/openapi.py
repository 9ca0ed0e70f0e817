"""Request-body schemas for the OpenAPI document of routes that read their body themselves.

The infer and repository handlers parse raw bodies (for speed and the binary extension), so FastAPI
cannot see what they accept; these declarations tell API tools (Swagger UI, schemathesis) instead.
"""

from __future__ import annotations

from typing import Any

from ferry_client.codec import DATATYPES

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, {"type": "string"}]
    },
}

_INPUT: dict[str, Any] = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": sorted(DATATYPES)},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
        "data": {"type": "array", "items": {}},
    },
}

_OUTPUT: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "parameters": {
            "type": "object",
            "properties": {"binary_data": {"type": "boolean"}, "classification": {"type": "integer", "minimum": 0}},
        },
    },
}

_SIMPLE_EXAMPLE = {
    "id": "example",
    "inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for i in range(2)],
    "outputs": [{"name": "OUTPUT0"}],
}

_INFER_SCHEMA = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": _PARAMETERS,
        "inputs": {"type": "array", "items": _INPUT},
        "outputs": {"type": "array", "items": _OUTPUT},
    },
}


def _body(schema: dict[str, Any], example: Any = None, required: bool = False, binary: bool = False) -> dict:
    json_body: dict[str, Any] = {"schema": schema}
    if example is not None:
        json_body["example"] = example
    content: dict[str, Any] = {"application/json": json_body}
    if binary:  # the binary tensor extension: a JSON header then raw tensors (Inference-Header-Content-Length)
        content["application/octet-stream"] = {"schema": {"type": "string", "format": "binary"}}
    return {"requestBody": {"required": required, "content": content}}


INFER_BODY = _body(_INFER_SCHEMA, _SIMPLE_EXAMPLE, required=True, binary=True)
INDEX_BODY = _body({"type": "object", "properties": {"ready": {"type": "boolean"}}}, {"ready": True})
LOAD_BODY = _body(
    {
        "type": "object",
        "properties": {
            "parameters": {
                "type": "object",
                "properties": {"config": {"type": "string", "description": "model config as JSON"}},
                "additionalProperties": {"anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "string"}]},
            }
        },
    }
)
UNLOAD_BODY = _body({"type": "object", "properties": {"parameters": _PARAMETERS}})


#: What every error answer holds (``http.error_response``).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
_ERROR_RESPONSE = {
    "description": "Bad request: the message says what is wrong",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def document_real_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace FastAPI's default 422 answers, which Ferry never sends, by its 400 ``{"error": ...}``.

    Request validation errors are answered 400 (``http._validation_error_response``), so a client
    generated from the document must expect that, not a 422 with FastAPI's ``detail`` list.
    """
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None:
                responses.setdefault("400", _ERROR_RESPONSE)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components["Error"] = ERROR_SCHEMA
    return schema
