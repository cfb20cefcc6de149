"""Sign-in with the organisation's identity provider (OpenID Connect), on the page and the admin.

mozilla-django-oidc does the protocol (the authorization code flow with PKCE, state and nonce, the
token request, the ID token's signature against the IdP's JWKS, userinfo); `services.sign_in` says
who that is. Off unless configured (GATEWAY_OIDC_*, docs/reference/environment.md): then both views
answer 404 and the sign-in pages show no button. Local passwords keep working either way.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from approvals import selectors, services
from approvals.errors import InvalidInput, SignInNeedsAdmin

logger = logging.getLogger(__name__)


class IdentityProviderBackend(OIDCAuthenticationBackend):
    """The verified ID token and the userinfo, turned into a user by `services.user_from_identity_provider`
    (by subject first, then a verified email of a user sign-in may link, else a new user), the listed
    groups synced from the groups claim. SignInNeedsAdmin leaves it for `callback` to tell the person."""

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        issuer = settings.GATEWAY_OIDC_ISSUER
        if payload.get("iss") != issuer:
            raise SuspiciousOperation("the ID token was issued by another issuer")
        claims = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(claims, dict) or claims.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: userinfo's sub must be the ID token's, or the answer is not used.
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        try:
            return services.user_from_identity_provider(
                issuer=issuer,
                claims={**payload, **claims},
                groups_claim=settings.GATEWAY_OIDC_GROUPS_CLAIM,
                group_ids=settings.GATEWAY_OIDC_GROUPS,
            )
        except InvalidInput as exc:
            raise SuspiciousOperation(str(exc)) from None

    def get_user(self, user_id: Any) -> Any | None:
        """The user a session signed in here holds, read on every page and click: prepared
        (`selectors.user_by_id`), not composed by the ORM each time."""
        return selectors.user_by_id(user_id)


def _enabled() -> None:
    if not settings.GATEWAY_OIDC_ENABLED:
        raise Http404("sign-in with an identity provider is not configured")


def start(request: HttpRequest) -> HttpResponse:
    """Off to the identity provider (`?next=` a path of this gateway to come back to)."""
    _enabled()
    return OIDCAuthenticationRequestView.as_view()(request)


def callback(request: HttpRequest) -> HttpResponse:
    """Back from the identity provider: signed in and on to `next` (the inbox), or to the sign-in page
    saying it did not work — also when the provider refuses the code (spent, made up, another
    session's), cannot be reached, or its answer does not check out; never a server error."""
    _enabled()
    try:
        return OIDCAuthenticationCallbackView.as_view()(request)
    except SignInNeedsAdmin as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(reverse("approval-login"))
    except (requests.RequestException, SuspiciousOperation) as exc:
        logger.warning("sign-in with the identity provider failed: %s: %s", exc.__class__.__name__, exc)
        return HttpResponseRedirect(settings.LOGIN_REDIRECT_URL_FAILURE)


def sign_in_options(request: HttpRequest) -> dict[str, Any]:
    """For the sign-in pages (the approvers' and the admin's): whether to offer the IdP, and its name."""
    return {"idp_sign_in": settings.GATEWAY_OIDC_LABEL if settings.GATEWAY_OIDC_ENABLED else ""}
