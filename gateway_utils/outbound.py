"""Every call the gateway makes on someone's behalf: signed webhooks, and the guard on where they go.

Signed webhooks (Standard Webhooks: https://www.standardwebhooks.com/):
everything the gateway POSTs on someone's behalf and signs goes through here:
the decision webhooks sent to an agent's `callback_url` (`approvals.webhooks`)
and the `webhook` hook kind (`hooks.builtin.webhook`). Each POST carries
`webhook-id`, `webhook-timestamp` and `webhook-signature` (`v1,<base64
HMAC-SHA256 of "id.timestamp.body">` with the secret); receivers verify with any
Standard Webhooks library, e.g. Python's `standardwebhooks.Webhook(secret).verify(body, headers)`.

The outbound guard (SSRF): a URL someone else chose — an agent's
`callback_url`, a `webhook` hook's `url`, an `inject_tool_result` source, an
MCP server's URL — is refused when its host is, or resolves to, a loopback,
private, link-local, cloud-metadata or otherwise non-public address
(`gateway_utils.addresses`), unless `GATEWAY_OUTBOUND_ALLOW` allows that network or
host name. `check_url` says so when the URL is configured; `guarded_client`
and `guarded_async_client` check again on every connection: their transport
resolves the name once, checks every address it got, and connects to the
checked address itself, so a name that resolves differently a moment later
(DNS rebinding) cannot slip through. Guarded clients never use `HTTP(S)_PROXY`:
through a proxy the guard would only ever see the proxy.

A leaf module: it knows nothing of the gateway's models, hooks or channels.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import socket
import ssl
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx
from django.conf import settings
from standardwebhooks.webhooks import Webhook

from gateway_utils.addresses import AllowList, address_refusal, parse_address

USER_AGENT = "approval-gateway-webhook/1"

# Worth another try later: the receiver is busy, rate-limiting or briefly broken.
TRANSIENT_STATUSES = frozenset({408, 425, 429})


class DeliveryFailed(Exception):
    """An outbound call that failed. Transient ones are retried; permanent ones are recorded and given up.

    `gateway_contract.ChannelError` is the channel adapters' kind of it.
    """

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None, code: str = ""):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after
        # The vendor's own short error code where it gives one (Slack's `channel_not_found`, Feishu's
        # numeric code); a metrics label, so never free text.
        self.code = code


def signed_headers(secret: str | bytes, body: str, *, message_id: str | None = None) -> dict[str, str]:
    """The Standard Webhooks headers for `body`. A `whsec_…` string is the base64 key; bytes are the raw key."""
    message_id = message_id or f"msg_{uuid.uuid4().hex}"
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, now, body),  # type: ignore[arg-type]
    }


def post_signed(
    url: str, payload: dict[str, Any], *, secret: str, timeout: float, message_id: str | None = None
) -> httpx.Response:
    """POST `payload` signed; only a 2xx answer counts as delivered.

    Raises DeliveryFailed: transient (retried with backoff) for network errors,
    5xx, 408, 425 and 429 (honouring `Retry-After`); permanent for other 4xx,
    for an address the outbound guard refuses, and for redirects, which are not
    followed (a signed body must not be replayed to wherever a 3xx points).
    """
    body = json.dumps(payload, separators=(",", ":"), default=str)
    try:
        with guarded_client(timeout=timeout) as client:
            response = client.post(url, content=body, headers=signed_headers(secret, body, message_id=message_id))
    except OutboundRefused as exc:
        raise DeliveryFailed(f"POST {url} refused: {exc}", permanent=True) from None
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"POST {url} failed: {exc.__class__.__name__}: {exc}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise DeliveryFailed(f"POST {url} answered {status}", retry_after=retry_after(response))
    if 300 <= status < 400:
        raise DeliveryFailed(f"POST {url} answered a redirect ({status}); redirects are not followed", permanent=True)
    raise DeliveryFailed(f"POST {url} answered {status}", permanent=True)


def retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (only the delta form; capped at an hour), or None."""
    raw = response.headers.get("retry-after", "")
    try:
        return min(max(float(raw), 0.0), 3600.0)
    except ValueError:
        return None


# --------------------------------------------------------------------------- the outbound guard (SSRF)


class OutboundRefused(Exception):
    """A URL the gateway will not call: its host is, or resolves to, an address that is not public."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


ALLOW_HINT = "GATEWAY_OUTBOUND_ALLOW can allow it (docs/reference/environment.md)"


def allow_list() -> AllowList:
    return _parsed(tuple(settings.GATEWAY_OUTBOUND_ALLOW))


@functools.lru_cache(maxsize=8)
def _parsed(entries: tuple[str, ...]) -> AllowList:
    return AllowList.parse(entries)


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (itself if it is an address), in the resolver's order, once each."""
    literal = parse_address(host)
    if literal is not None:
        return [str(literal)]
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in found))


def refusal(host: str, addresses: Iterable[str]) -> str | None:
    """Why connecting to `host` at these addresses is refused; None if every one is public or allowed."""
    allowed = allow_list()
    if allowed.allows_host(host):
        return None
    for address in addresses:
        ip = parse_address(address)
        reason = address_refusal(ip) if ip is not None else "not an IP address"
        if reason and not (ip is not None and allowed.allows_address(ip)):
            named = address if parse_address(host) is not None else f"{host} resolves to {address}"
            return f"{named}, a {reason} address; {ALLOW_HINT}"
    return None


def checked_addresses(host: str, port: int) -> list[str]:
    """Resolve `host` once and check every address; the addresses to connect to, or OutboundRefused."""
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
    why = refusal(host, addresses)
    if why:
        raise OutboundRefused(why)
    return addresses


LOCALHOST_NAMES = ("localhost", "localhost.")  # loopback by definition (RFC 6761), never asked of DNS


def check_url(url: str) -> None:
    """Config time: refuse (OutboundRefused) a URL whose host is an address the guard refuses, or
    `localhost`. No DNS is asked here: a name is checked, by what it resolves to then, on every
    connection (`guarded_client`), so configuring never waits on DNS or leaks to it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise OutboundRefused("must be an http or https URL")
    if host in LOCALHOST_NAMES:
        addresses = ["127.0.0.1"]
    elif parse_address(host) is not None:
        addresses = [host]
    else:
        return
    why = refusal(host, addresses)
    if why:
        raise OutboundRefused(why)


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's own network backend, connecting only to addresses the guard checked."""

    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        error: Exception | None = None
        for address in checked_addresses(host, port):
            try:
                return self.inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error or httpcore.ConnectError(f"no address for {host}")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundRefused("unix sockets are not an outbound destination")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


@functools.lru_cache(maxsize=1)
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every guarded client (building one loads the CA bundle: worth doing once)."""
    return httpx.create_ssl_context()


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with its connection pool built on `GuardedBackend` (httpx takes no backend
    argument; its pool is the documented httpcore `ConnectionPool`, which does)."""

    def __init__(self) -> None:
        super().__init__(verify=ssl_context(), trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=ssl_context(), network_backend=GuardedBackend())


def guarded_client(*, timeout: float | httpx.Timeout) -> httpx.Client:
    """An httpx client for URLs someone else chose: every connection checked, redirects not followed."""
    return httpx.Client(transport=GuardedTransport(), timeout=timeout, follow_redirects=False, trust_env=False)


def guarded_async_client(*, timeout: float) -> Any:
    """The same guard for the MCP SDK, which speaks `httpx2`: an `httpx2.AsyncClient`."""
    import httpx2

    transport_class = _async_transport_class()
    return httpx2.AsyncClient(
        transport=transport_class(), timeout=httpx2.Timeout(timeout), trust_env=False, follow_redirects=False
    )


@functools.cache
def _async_transport_class() -> type:
    """`GuardedTransport` for httpx2 / httpcore2 (the MCP SDK's HTTP stack), built on first use:
    most processes never call an MCP server over HTTP."""
    import httpcore2
    import httpx2

    class GuardedAsyncBackend(httpcore2.AsyncNetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            try:
                addresses = await anyio.to_thread.run_sync(checked_addresses, host, port)
            except httpcore.ConnectError as exc:
                raise httpcore2.ConnectError(str(exc)) from None
            error: Exception | None = None
            for address in addresses:
                try:
                    return await self.inner.connect_tcp(
                        address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                    )
                except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                    error = exc
            raise error or httpcore2.ConnectError(f"no address for {host}")

        async def connect_unix_socket(self, path, timeout=None, socket_options=None):
            raise OutboundRefused("unix sockets are not an outbound destination")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    class GuardedAsyncTransport(httpx2.AsyncHTTPTransport):
        def __init__(self) -> None:
            super().__init__(verify=ssl_context(), trust_env=False)
            self._pool = httpcore2.AsyncConnectionPool(ssl_context=ssl_context(), network_backend=GuardedAsyncBackend())

    return GuardedAsyncTransport
