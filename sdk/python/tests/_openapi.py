"""The server's OpenAPI document (``crates/sandlot-api/openapi.json``) as validators of response
bodies, so the offline tests' fixtures and fake server can be held to what the server answers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

OPENAPI = Path(__file__).resolve().parents[3] / "crates" / "sandlot-api" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_URI = "urn:sandlot:openapi"

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _format_checker() -> jsonschema.FormatChecker:
    """The formats the document uses, checked without optional dependencies."""
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or bool(_DATE_TIME.match(value))

    @checker.checks("int64")
    def _int64(value: object) -> bool:
        return not isinstance(value, int) or -(2**63) <= value < 2**63

    @checker.checks("int32")
    def _int32(value: object) -> bool:
        return not isinstance(value, int) or -(2**31) <= value < 2**31

    return checker


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class OpenAPI:
    def __init__(self, path: Path = OPENAPI) -> None:
        self.doc: Dict[str, Any] = json.loads(path.read_text())
        self._registry = Registry().with_resource(_URI, Resource(contents=self.doc, specification=DRAFT202012))
        self._formats = _format_checker()

    def operations(self) -> Iterator[Tuple[str, str, Dict[str, Any]]]:
        """(method, path template, operation) of every operation."""
        for template, item in self.doc["paths"].items():
            for method, op in item.items():
                if method in METHODS:
                    yield method, template, op

    def operation(self, operation_id: str) -> Tuple[str, str, Dict[str, Any]]:
        for method, template, op in self.operations():
            if op.get("operationId") == operation_id:
                return method, template, op
        raise KeyError(f"no operation {operation_id!r} in {OPENAPI}")

    def match(self, method: str, path: str) -> Optional[str]:
        """The operationId that serves ``method path`` (``{path}`` may hold slashes)."""
        for m, template, op in self.operations():
            if m != method.lower():
                continue
            pattern = re.sub(r"\\\{(\w+)\\\}", lambda g: ".+" if g.group(1) == "path" else "[^/]+", re.escape(template))
            if re.fullmatch(pattern, path):
                return op["operationId"]
        return None

    def content_types(self, operation_id: str, status: str) -> Dict[str, Any]:
        """The response's media types (``{}`` for a response without a body)."""
        pointer = self._response_pointer(operation_id, status)
        return self._resolve(pointer).get("content") or {}

    def validator(self, operation_id: str, status: str, content_type: str = "application/json") -> jsonschema.Validator:
        """Validates a body of the given response of the operation."""
        pointer = self._response_pointer(operation_id, status)
        content = self._resolve(pointer).get("content") or {}
        if content_type not in content:
            raise KeyError(f"{operation_id} {status} has no {content_type} body (it has {sorted(content)})")
        return self.schema_validator(f"{pointer}/content/{_escape(content_type)}/schema")

    def component(self, name: str) -> jsonschema.Validator:
        return self.schema_validator(f"/components/schemas/{_escape(name)}")

    def schema_validator(self, pointer: str) -> jsonschema.Validator:
        return jsonschema.Draft202012Validator(
            {"$ref": f"{_URI}#{pointer}"}, registry=self._registry, format_checker=self._formats
        )

    def _response_pointer(self, operation_id: str, status: str) -> str:
        method, template, op = self.operation(operation_id)
        if status not in op.get("responses", {}):
            raise KeyError(f"{operation_id} has no {status} response")
        pointer = f"/paths/{_escape(template)}/{method}/responses/{status}"
        ref = self._resolve(pointer).get("$ref")
        return ref[1:] if ref else pointer

    def _resolve(self, pointer: str) -> Dict[str, Any]:
        node: Any = self.doc
        for token in pointer.lstrip("/").split("/"):
            node = node[token.replace("~1", "/").replace("~0", "~")]
        return node


def errors_of(validator: jsonschema.Validator, body: Any) -> list:
    """Every violation, readable: where in the body, and what is wrong."""
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<body>'}: {e.message}"
        for e in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
    ]
