"""API-key authentication: `Authorization: Bearer <key>`; the request's user is the Agent."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from approvals import selectors, services


def bearer_token(header_value: str | bytes | None) -> str:
    if not header_value:
        return ""
    if isinstance(header_value, bytes):
        header_value = header_value.decode("latin-1")
    scheme, _, token = header_value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        raw = bearer_token(header)
        if not raw:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <api key>'")
        key = selectors.api_key_lookup(raw_key=raw)
        if key is None:
            raise exceptions.AuthenticationFailed("unknown or revoked API key")
        services.api_key_touch(api_key=key)
        agent = key.agent
        agent.is_authenticated = True  # what DRF's IsAuthenticated reads
        return agent, key

    def authenticate_header(self, request):
        return 'Bearer realm="gateway"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Describes the API key to the OpenAPI document (drf-spectacular)."""

    target_class = "approvals.api.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent's API key (`manage.py create_api_key AGENT`).",
        }
