"""The local OpenID Connect provider (tests/oidc/provider.js, panva's oidc-provider under node), run for
a test session, and a person signing in through it over real HTTP.

`scripts/ensure-oidc-provider.sh` installs its npm package (from package-lock.json) before `make test`.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import httpx

HERE = Path(__file__).resolve().parent
CLIENT_ID = "approval-gateway"
CLIENT_SECRET = "test-client-secret-of-the-approval-gateway"
# The provider's people: the login its development form takes is the subject (provider.js).
SUBJECTS = {"dana": "7f3a91c2", "erik": "b40e5d17", "fay": "c9d2e8a0"}
# The groups claim carries the groups' ids at the IdP (provider.js), which the gateway maps to its own.
GROUP_IDS = {"payments": "5f2d1c9a-7b3e-4e8a-9c61-2a4f0e7d3b15", "research": "9a8e2b41-3c7d-4f06-b5e2-71c0d6a9f384"}

_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', re.S)


class LocalProvider:
    """`node tests/oidc/provider.js` on 127.0.0.1:<free port>, its discovery document read once."""

    def __init__(self, redirect_uri: str) -> None:
        if not (HERE / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError("oidc-provider is not installed: run scripts/ensure-oidc-provider.sh")
        self.process = subprocess.Popen(
            ["node", str(HERE / "provider.js")],
            cwd=HERE,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "OIDC_REDIRECT_URIS": redirect_uri, "NODE_ENV": "test"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()  # the provider says where it listens, or dies saying why
        if not line:
            raise RuntimeError("the OIDC provider did not start: " + self.process.stderr.read())
        self.issuer = json.loads(line)["issuer"]
        # Its warnings (development keys, dev interactions) are expected; drain them so it never blocks.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()
        self.discovery = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=10).json()

    def gateway_settings(self) -> dict[str, object]:
        """What GATEWAY_OIDC_* set in production (gateway/settings.py), pointed at this provider."""
        return {
            "GATEWAY_OIDC_ENABLED": True,
            "GATEWAY_OIDC_ISSUER": self.discovery["issuer"],
            "OIDC_RP_CLIENT_ID": CLIENT_ID,
            "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": self.discovery["authorization_endpoint"],
            "OIDC_OP_TOKEN_ENDPOINT": self.discovery["token_endpoint"],
            "OIDC_OP_USER_ENDPOINT": self.discovery["userinfo_endpoint"],
            "OIDC_OP_JWKS_ENDPOINT": self.discovery["jwks_uri"],
            "OIDC_RP_SCOPES": "openid email profile groups",
            "GATEWAY_OIDC_GROUPS_CLAIM": "groups",
            "GATEWAY_OIDC_GROUPS": {GROUP_IDS["payments"]: "payments", GROUP_IDS["research"]: "research"},
            "GATEWAY_OIDC_LABEL": "Example Corp SSO",
            "AUTHENTICATION_BACKENDS": [
                "channels_ext.web.sign_in.IdentityProviderBackend",
                "gateway.auth_backends.PasswordBackend",
                "django.contrib.auth.backends.ModelBackend",
            ],
        }

    def put_account(self, subject: str, **account: object) -> None:
        """Add or change the IdP's account `subject` as its owner (or the IdP's admin) could: `username`,
        `email`, `email_verified` (true unless given), `name`, `groups` (the claim's values)."""
        httpx.put(f"{self.issuer}/test/accounts/{subject}", json=account, timeout=10).raise_for_status()

    def stop(self) -> None:
        self.process.stdin.close()  # it exits when its stdin closes
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _post_form(client: httpx.Client, page: httpx.Response, fields: dict[str, str], *, follow: bool = True) -> httpx.Response:
    """Post the page's (first) form with its hidden fields and `fields`, as a browser would."""
    found = _FORM.search(page.text)
    assert found, f"no form on {page.url}: {page.text[:500]}"
    action, body = found.groups()
    data = {name: unescape(value) for name, value in _HIDDEN.findall(body)}
    return client.post(urljoin(str(page.url), unescape(action)), data={**data, **fields}, follow_redirects=follow)


def callback_from_the_provider(client: httpx.Client, login: str, *, start: str = "/oidc/authenticate/?next=/approvals/") -> str:
    """As `sign_in_through_the_provider`, but stopping where the provider sends the browser back: the
    gateway's callback URL (with the authorization code and the state), not opened."""
    page = client.get(start)
    assert "/interaction/" in str(page.url), f"not at the provider's login: {page.url}"
    page = _post_form(client, page, {"login": SUBJECTS.get(login, login), "password": "any password"}, follow=False)
    while page.is_redirect or "/interaction/" in str(page.url):
        if page.is_redirect:
            following = page.next_request
            if following.url.path == "/oidc/callback/":
                return str(following.url)
            page = client.send(following, follow_redirects=False)
        else:  # the consent form
            page = _post_form(client, page, {}, follow=False)
    raise AssertionError(f"the provider did not send the browser back: {page.url}")


def sign_in_through_the_provider(client: httpx.Client, login: str, *, start: str = "/oidc/authenticate/?next=/approvals/") -> httpx.Response:
    """From the gateway's "Sign in with …" link through the provider's login and consent forms, and
    back: the page the gateway lands the person on. `client` follows redirects and keeps cookies."""
    page = client.get(start)
    assert "/interaction/" in str(page.url), f"not at the provider's login: {page.url}"
    page = _post_form(client, page, {"login": SUBJECTS.get(login, login), "password": "any password"})
    if "/interaction/" in str(page.url):  # the consent form (the first time a client asks)
        page = _post_form(client, page, {})
    return page
