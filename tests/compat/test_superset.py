"""This release's agent API is a compatible superset of the previous release's (docs/reference/api.md,
"Compatibility"): every path and method 0.3.0 served is still served, every field its answers carried is
still declared, no input an old client could leave out became required, and every input it could send
is still taken."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command

from tests.compat.openapi import Document, recorded

PREVIOUS = "0.3.0"


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> tuple[Document, Document]:
    out = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    call_command("spectacular", "--file", str(out))
    return Document(recorded(PREVIOUS)), Document(yaml.safe_load(out.read_text()))


def response_fields(doc: Document, schema: dict, where: str = "", depth: int = 0) -> set[str]:
    """Every field an answer declares, as dotted paths (`hook_decisions[].reason`)."""
    found: set[str] = set()
    if depth > 6:  # JsonValue refers to itself
        return found
    for name, sub in (doc.properties(schema) or {}).items():
        found.add(f"{where}{name}")
        found |= response_fields(doc, sub, f"{where}{name}.", depth + 1)
    items = doc.item_schema(schema)
    if items is not None:
        found |= response_fields(doc, items, f"{where.rstrip('.')}[].", depth + 1)
    return found


def test_every_operation_of_the_previous_release_is_still_served(documents):
    previous, current = documents

    assert set(previous.operations()) - set(current.operations()) == set()


def test_no_answer_lost_a_field_and_no_status_code_went_away(documents):
    previous, current = documents
    lost = {}
    for key, old in previous.operations().items():
        new = current.operations()[key]
        for status in old.spec["responses"]:
            if status not in new.spec["responses"]:
                lost[(*key, status)] = "the status code"
                continue
            old_schema, new_schema = old.response_schema(int(status)), new.response_schema(int(status))
            if old_schema is None:
                continue
            missing = response_fields(previous, old_schema) - response_fields(current, new_schema or {})
            if missing:
                lost[(*key, status)] = sorted(missing)

    assert lost == {}


def test_no_input_became_required_and_every_old_input_is_still_taken(documents):
    previous, current = documents
    broken = {}
    for key, old in previous.operations().items():
        new = current.operations()[key]
        old_body, new_body = old.request_schema(), new.request_schema()
        if new_body is not None:
            newly_required = current.required(new_body) - (previous.required(old_body) if old_body else set())
            if newly_required:
                broken[key] = f"required now: {sorted(newly_required)}"
        if old_body is not None:
            gone = set(previous.properties(old_body) or {}) - set(current.properties(new_body or {}) or {})
            if gone:
                broken[key] = f"no longer taken: {sorted(gone)}"
        required_params = {p["name"] for p in new.spec.get("parameters", []) if p.get("required")}
        old_params = {p["name"] for p in old.spec.get("parameters", [])}
        if required_params - old_params:
            broken[key] = f"new required parameters: {sorted(required_params - old_params)}"
        if old.query_parameters() - new.query_parameters():
            broken[key] = f"query parameters gone: {sorted(old.query_parameters() - new.query_parameters())}"

    assert broken == {}


def test_the_comparison_sees_a_removed_field(documents):
    # The check above must be able to fail: drop one answer field from the current document and look.
    previous, current = documents
    ask = ("/api/v1/hooks/pre-tool-use", "post")
    schema = current.resolve(current.operations()[ask].response_schema(200))
    trimmed = Document(current.document)
    trimmed_schema = {**schema, "properties": {k: v for k, v in schema["properties"].items() if k != "reason"}}

    before = response_fields(previous, previous.operations()[ask].response_schema(200))
    assert "reason" in before and "reason" not in response_fields(trimmed, trimmed_schema)
