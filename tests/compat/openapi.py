"""Reading an OpenAPI 3.1 document for the compatibility tests: operations by path and method, the
schemas behind `$ref`, the fields an object schema declares, and a JSON value cut down to them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

HERE = Path(__file__).resolve().parent
METHODS = ("get", "put", "post", "delete", "patch")


def recorded(version: str) -> dict[str, Any]:
    """A release's recorded document (tests/compat/openapi-<version>.yaml)."""
    return yaml.safe_load((HERE / f"openapi-{version}.yaml").read_text())


@dataclasses.dataclass(frozen=True)
class Operation:
    path: str  # the document's template: /api/v1/confirmations/{confirmation_id}
    method: str
    spec: dict[str, Any]

    def query_parameters(self) -> set[str]:
        return {p["name"] for p in self.spec.get("parameters", []) if p.get("in") == "query"}

    def request_schema(self) -> dict[str, Any] | None:
        content = (self.spec.get("requestBody") or {}).get("content") or {}
        return (content.get("application/json") or {}).get("schema")

    def response_schema(self, status: int) -> dict[str, Any] | None:
        response = self.spec.get("responses", {}).get(str(status))
        if response is None:
            return None
        return ((response.get("content") or {}).get("application/json") or {}).get("schema")


def _pattern(path: str) -> re.Pattern[str]:
    segments = ("[^/]+" if re.fullmatch(r"\{[^}]+\}", part) else re.escape(part) for part in path.split("/"))
    return re.compile("^" + "/".join(segments) + "$")


class Document:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        # A literal segment wins over a parameter (/api/v1/hooks/schema before /api/v1/hooks/{event}).
        self._routes = [(_pattern(path), path) for path in sorted(document["paths"], key=lambda p: p.count("{"))]

    def operations(self) -> dict[tuple[str, str], Operation]:
        return {
            (path, method): Operation(path, method, spec)
            for path, item in self.document["paths"].items()
            for method, spec in item.items()
            if method in METHODS
        }

    def operation(self, method: str, url_path: str) -> Operation | None:
        """The operation serving `method url_path` (a real path: /api/v1/confirmations/3f…), or None."""
        for pattern, path in self._routes:
            if pattern.match(url_path):
                spec = self.document["paths"][path].get(method.lower())
                return Operation(path, method.lower(), spec) if spec is not None else None
        return None

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            node: Any = self.document
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        return schema

    def branches(self, schema: dict[str, Any]) -> list[dict[str, Any]]:
        """The schema and every schema it combines (allOf, anyOf, oneOf), resolved."""
        schema = self.resolve(schema)
        found = [schema]
        for key in ("allOf", "anyOf", "oneOf"):
            for branch in schema.get(key, []):
                found += self.branches(branch)
        return found

    def properties(self, schema: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        """The fields an object schema declares (None: it declares none, any object goes)."""
        declared: dict[str, dict[str, Any]] | None = None
        for branch in self.branches(schema):
            if "properties" in branch:
                declared = {**(declared or {}), **branch["properties"]}
        return declared

    def required(self, schema: dict[str, Any]) -> set[str]:
        return {name for branch in self.branches(schema) for name in branch.get("required", [])}

    def item_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        for branch in self.branches(schema):
            if isinstance(branch.get("items"), dict):
                return branch["items"]
        return None

    def extra_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """What fields beyond the declared ones are (`additionalProperties` as a schema), or None."""
        for branch in self.branches(schema):
            extra = branch.get("additionalProperties")
            if isinstance(extra, dict):
                return extra
        return None

    def cut(self, value: Any, schema: dict[str, Any], dropped: set[str], where: str = "") -> Any:
        """`value` with only the fields `schema` declares, at every depth; what was left out goes into `dropped`."""
        if isinstance(value, list):
            items = self.item_schema(schema)
            return value if items is None else [self.cut(v, items, dropped, f"{where}[]") for v in value]
        if not isinstance(value, dict):
            return value
        declared = self.properties(schema)
        extra = self.extra_schema(schema)
        if declared is None:
            return value if extra is None else {k: self.cut(v, extra, dropped, f"{where}.{k}") for k, v in value.items()}
        kept = {}
        for key, item in value.items():
            if key in declared:
                kept[key] = self.cut(item, declared[key], dropped, f"{where}.{key}")
            elif extra is not None:
                kept[key] = self.cut(item, extra, dropped, f"{where}.{key}")
            else:
                dropped.add(f"{where}.{key}".lstrip("."))
        return kept

    def errors(self, value: Any, schema: dict[str, Any]) -> list[str]:
        """Where `value` does not satisfy `schema` (JSON Schema 2020-12, `$ref`s into this document)."""
        validator = jsonschema.Draft202012Validator({**schema, "components": self.document["components"]})
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(value)]
