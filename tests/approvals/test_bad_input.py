"""Bad input gets the contract's 4xx error shape and writes nothing."""

from __future__ import annotations

import httpx
import pytest

from approvals import services
from approvals.models import ApiKey, ConfirmationEvent, ConfirmationRequest, Outbox, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


def counts() -> tuple[int, ...]:
    return (
        ToolCall.objects.count(),
        ConfirmationRequest.objects.count(),
        ConfirmationEvent.objects.count(),
        Outbox.objects.count(),
    )


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tool_name": "oa__purchase_pay"}, "session_id"),
        ({"session_id": "s"}, "tool_name"),
        ({"session_id": "s", "tool_name": 5}, "tool_name"),
        ({"session_id": ["s"], "tool_name": "x"}, "session_id"),
        ({"session_id": "s", "tool_name": "x", "tool_args": [1, 2]}, "tool_args"),
        ({"session_id": "s", "tool_name": "x", "metadata": "acme"}, "metadata"),
        ({"session_id": "s", "tool_name": "x", "wait_seconds": "5"}, "wait_seconds"),
        ({"session_id": "s", "tool_name": "x", "wait_seconds": -1}, "wait_seconds"),
        ({"session_id": "s", "tool_name": "x", "wait_seconds": 10_000}, "wait_seconds"),
        ({"session_id": "s", "tool_name": "x", "callback_url": "not a url"}, "callback_url"),
        ({"session_id": "s", "tool_name": "x", "tool_argz": {}}, "tool_argz"),
    ],
)
def test_invalid_fields_are_named_and_nothing_is_written(agent, body, field):
    before = counts()

    response = agent.http.post("/api/v1/hooks/pre-tool-use", json=body)

    error = assert_error(response, 400, "invalid")
    assert field in error["details"]
    assert counts() == before


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b""])
def test_a_body_that_is_not_a_json_object_is_refused(agent, raw):
    before = counts()

    response = agent.http.post(
        "/api/v1/hooks/pre-tool-use", content=raw, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"malformed", "bad_request", "invalid"}
    assert counts() == before


def test_malformed_json_with_wait_seconds_is_refused_too(agent):
    response = agent.http.post(
        "/api/v1/hooks/pre-tool-use",
        content=b'{"wait_seconds": 5, "session_id": ',
        headers={"content-type": "application/json"},
    )

    assert_error(response, 400, "malformed")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer gw_nope"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"}],
)
def test_missing_or_unknown_keys_are_refused(live_gateway, web_gate, headers):
    body = {"session_id": "s", "tool_name": "oa__purchase_pay"}
    before = counts()

    response = httpx.post(f"{live_gateway.url}/api/v1/hooks/pre-tool-use", json=body, headers=headers)

    assert_error(response, 401, "unauthorized")
    assert counts() == before


def test_a_revoked_key_is_refused_everywhere(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    services.api_key_revoke(api_key=ApiKey.objects.get(agent=agent.agent))

    assert_error(agent.pre_tool_use("web__search", {}), 401, "unauthorized")
    assert_error(agent.http.get(f"/api/v1/confirmations/{confirmation_id}"), 401, "unauthorized")
    assert_error(agent.wait(confirmation_id, timeout=0), 401, "unauthorized")
    assert ToolCall.objects.count() == 1


@pytest.mark.parametrize("confirmation_id", ["6f1c2b9e-0d4a-4c3e-9b71-2a5d8e4f0c13", "not-a-uuid"])
def test_unknown_confirmation_ids_are_404(agent, confirmation_id):
    assert_error(agent.http.get(f"/api/v1/confirmations/{confirmation_id}"), 404, "not_found")
    assert_error(agent.wait(confirmation_id, timeout=0), 404, "not_found")
    assert_error(agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel"), 404, "not_found")


@pytest.mark.parametrize("timeout", ["abc", "-1", "100000", "nan", "inf", "-inf"])
def test_a_bad_long_poll_timeout_is_refused(agent, timeout):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    response = agent.http.get(f"/api/v1/confirmations/{confirmation_id}/wait", params={"timeout": timeout})

    assert_error(response, 400, "invalid")


def test_post_tool_use_for_a_call_never_allowed_is_refused(agent):
    body = agent.pre_tool_use("oa__purchase_pay", {}, tool_call_id="c-9").json()
    assert body["decision"] == "pending"

    response = agent.http.post(
        "/api/v1/hooks/post-tool-use", json={"session_id": "s-1", "tool_call_id": "c-9", "result": {"ok": True}}
    )

    assert_error(response, 409, "conflict")
    assert ToolCall.objects.get().completed_at is None
