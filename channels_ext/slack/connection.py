"""Slack Socket Mode: the outbound WebSocket that brings a channel's clicks (`mode: socket`).

slack-sdk's built-in `SocketModeClient` opens the connection: it calls
`apps.connections.open` with the app-level token (`xapp-…`), connects to the
WebSocket URL it gets, and Slack greets it with `hello`. Interactions then
arrive as envelopes `{"envelope_id", "type": "interactive", "payload"}`; each
must be acknowledged with `{"envelope_id", "payload"}` within 3 seconds, and
the ack's payload is what an HTTP Request URL would have answered (empty for a
button click, `response_action` for the reject form's submission). The payload
goes through the adapter's `handle_interaction`, exactly as over HTTP.
https://docs.slack.dev/apis/events-api/using-socket-mode/

What this module does around slack-sdk 3.47's built-in client, and why:
- **Reconnects are ours.** The SDK's own auto-reconnect retries every
  `ping_interval` forever, without backoff, and only logs a refused token. It
  is turned off; `serve` returns when the connection is lost and the
  `channel_connections` runner reconnects with backoff, stopping the process
  on a refused token. (A `disconnect` message from Slack — a routine refresh —
  is still followed by the SDK itself, under its connect lock.)
- **A peer that closes the TCP connection without a close frame** makes the
  built-in receive loop spin on empty reads, and the SDK notices only after
  five failed pings (`5 × ping_interval`). `serve` looks at the socket itself
  every 200 ms and drops a connection whose peer has gone.
- **A refresh blocks reading for 3 s.** On Slack's `disconnect`, the SDK
  connects a new session, then closes the old one under the lock the old
  session's reader holds for up to 3 s (its `receive_timeout`), and only then
  reads the new one: envelopes would wait past their 3-second ack deadline.
  `_GatewaySocketModeClient.connect` ends the old session's reads first.
- **The 3-second ack.** A handler that runs past `ACK_BUDGET_SECONDS` is
  acknowledged without a payload (the click still completes; the card is
  redrawn by the worker as always).
- **Redeliveries.** Each delivery is de-duplicated on the interaction's
  `trigger_id` (unique per user action, the same in every delivery of it,
  whichever connection or gateway process gets it); see `delivery_key`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Protocol

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from channels_ext.slack.config import SlackChannelConfig
from gateway_contract import CallbackError, Decide
from gateway_contract.links import CONNECTED, RECONNECTING, ConnectionRefused, Report

if TYPE_CHECKING:
    from slack_sdk.socket_mode.builtin.connection import Connection


logger = logging.getLogger(__name__)


class SocketModeHost(Protocol):
    """What the link needs of its channel (the adapter hands itself, as slack-bolt hands its handler the app)."""

    name: str
    config: SlackChannelConfig

    def handle_interaction(self, payload: dict[str, Any], decide: Decide, *, dedupe_key: str = "") -> dict[str, Any] | None: ...
# The SDK narrates every session at INFO; its warnings and errors are enough here.
sdk_logger = logging.getLogger("channels_ext.slack.socket_mode_sdk")
sdk_logger.setLevel(logging.WARNING)

ACK_BUDGET_SECONDS = 2.5  # Slack waits 3 s for an envelope's ack
HELLO_TIMEOUT_SECONDS = 10.0
PING_INTERVAL_SECONDS = 5.0  # slack-sdk's default
WATCH_INTERVAL_SECONDS = 0.2

# apps.connections.open errors that a later attempt can get past; any other error means
# the token or the app's settings are wrong, and the process stops with the hint below.
# https://docs.slack.dev/reference/methods/apps.connections.open
TRANSIENT_OPEN_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "request_timeout", "service_unavailable", "team_added_to_org"}
)
_HINTS = {
    "invalid_auth": "the app-level token is not valid; create one under Basic Information → App-Level Tokens "
    "(scope connections:write), set it as app_token and run apply_config",
    "not_authed": "no token reached Slack; set app_token (an xapp- token)",
    "not_allowed_token_type": "app_token must be an app-level token (xapp-…), not a bot or user token",
    "token_revoked": "the app-level token was revoked; create a new one and set it as app_token",
    "token_expired": "the app-level token expired; create a new one and set it as app_token",
    "account_inactive": "the app or its workspace is inactive",
    "missing_scope": "the app-level token lacks the connections:write scope",
}


def delivery_key(request: SocketModeRequest) -> str:
    """What de-duplicates a delivered interaction (`Callback.dedupe_key`).

    The payload's `trigger_id` is minted per user action and repeated in every
    delivery of it; the envelope id is the fallback for payloads without one.
    """
    trigger_id = request.payload.get("trigger_id") if isinstance(request.payload, dict) else None
    if isinstance(trigger_id, str) and trigger_id:
        return f"slack:trigger:{trigger_id}"
    return f"slack:envelope:{request.envelope_id}"


class _GatewaySocketModeClient(SocketModeClient):
    """slack-sdk's built-in client, with a session swap that does not stall reading (module docstring)."""

    def connect(self) -> None:
        old = self.current_session
        if old is not None and old.sock is not None:
            try:
                old.sock.shutdown(socket.SHUT_RD)  # its reader sees EOF now and lets go of its lock
            except OSError:
                pass
        super().connect()


class SlackSocketModeLink:
    """One Slack channel's Socket Mode connection (gateway_contract/links.py's contract)."""

    def __init__(
        self,
        adapter: SocketModeHost,
        decide: Decide,
        *,
        ping_interval: float = PING_INTERVAL_SECONDS,
        ack_budget: float = ACK_BUDGET_SECONDS,
        hello_timeout: float = HELLO_TIMEOUT_SECONDS,
    ):
        self.adapter = adapter
        self.decide = decide
        self.ping_interval = ping_interval
        self.ack_budget = ack_budget
        self.hello_timeout = hello_timeout

    @property
    def name(self) -> str:
        return self.adapter.name

    def serve(self, stop: threading.Event, report: Report) -> None:
        """Open one Socket Mode session and answer its envelopes until it is lost or `stop` is set."""
        hello = threading.Event()
        handlers = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"slack-{self.name}")
        client = _GatewaySocketModeClient(
            app_token=self.adapter.config.app_token,
            web_client=WebClient(base_url=self.adapter.config.api_base_url, timeout=10),
            logger=sdk_logger,
            auto_reconnect_enabled=False,  # see the module docstring
            ping_interval=self.ping_interval,
            concurrency=4,
        )
        client.on_message_listeners.append(lambda raw: self._on_message(raw, hello, report))
        client.socket_mode_request_listeners.append(
            lambda client_, request: self._on_request(client_, request, handlers)
        )
        try:
            try:
                client.connect_to_new_endpoint()  # apps.connections.open, then the WebSocket handshake
            except SlackApiError as err:
                raise self._open_failure(err) from None
            deadline = time.monotonic() + self.hello_timeout
            while not hello.wait(WATCH_INTERVAL_SECONDS):
                if stop.is_set():
                    return
                if time.monotonic() > deadline:
                    raise ConnectionError(f"Slack sent no hello within {self.hello_timeout:g} s")
            while not stop.wait(WATCH_INTERVAL_SECONDS):
                if not self._alive(client):
                    return
        finally:
            _interrupt_reads(client.current_session)
            client.close()
            handlers.shutdown(wait=False)

    # --- the connection ----------------------------------------------------------

    def _open_failure(self, err: SlackApiError) -> Exception:
        code = str(err.response.get("error") or f"http_{err.response.status_code}")
        if code in TRANSIENT_OPEN_ERRORS or err.response.status_code >= 500:
            return ConnectionError(f"apps.connections.open failed: {code}")
        hint = _HINTS.get(code, "check the channel's app_token and that Socket Mode is enabled for the app")
        return ConnectionRefused(
            f"Slack refused the app-level token of channel {self.name!r} (apps.connections.open: {code}): {hint}."
        )

    def _alive(self, client: SocketModeClient) -> bool:
        # The SDK replaces a session (Slack's `disconnect` refresh) while holding this lock:
        # judge and close sessions only outside a swap, never the one being swapped in.
        if not client.connect_operation_lock.acquire(timeout=5):
            return True  # a reconnection is under way (e.g. a slow apps.connections.open)
        try:
            session = client.current_session
            if session is None or not session.is_active():
                return False
            if not _peer_closed(session):
                return True
            logger.warning("slack channel %s: Slack closed the connection without a close frame", self.name)
            _interrupt_reads(session)
            try:
                session.disconnect()
            except (AttributeError, OSError):
                pass  # the SDK's own threads closed it at the same moment
            return False
        finally:
            client.connect_operation_lock.release()

    def _on_message(self, raw: str, hello: threading.Event, report: Report) -> None:
        """Every text frame, in the SDK's receive thread: watch for `hello` and `disconnect`.

        (Envelopes are the request listener's; the SDK handles `disconnect` without
        calling request or message listeners, hence this raw listener.)
        """
        try:
            message = json.loads(raw)
        except ValueError:
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "hello":
            count = message.get("num_connections")
            report(CONNECTED, f"Socket Mode session open (Slack counts {count} connection(s) for this app)")
            hello.set()
        elif kind == "disconnect":
            reason = message.get("reason")
            if reason == "link_disabled":
                logger.error(
                    "slack channel %s: Socket Mode was turned off for this Slack app (link_disabled); "
                    "turn it on under Settings → Socket Mode",
                    self.name,
                )
            else:
                logger.info("slack channel %s: Slack asked for a new connection (%s)", self.name, reason)
            report(RECONNECTING, f"Slack asked for a new connection ({reason})")

    # --- envelopes ---------------------------------------------------------------

    def _on_request(self, client: SocketModeClient, request: SocketModeRequest, handlers: ThreadPoolExecutor) -> None:
        """An envelope, in one of the SDK's worker threads: answer it, then ack within Slack's 3 s."""
        if request.type != "interactive":
            # Events API deliveries and slash commands are not used; an ack stops Slack retrying them.
            self._ack(client, request.envelope_id, None)
            return
        started = time.monotonic()
        future = handlers.submit(self._answer, request.payload, delivery_key(request))
        try:
            answer = future.result(timeout=self.ack_budget)
        except FutureTimeout:
            answer = None
            logger.warning(
                "slack channel %s: acknowledged envelope %s without an answer after %.1f s; the click is still "
                "being handled",
                self.name,
                request.envelope_id,
                time.monotonic() - started,
            )
        except Exception:
            answer = None
            logger.exception("slack channel %s: handling envelope %s failed", self.name, request.envelope_id)
        self._ack(client, request.envelope_id, answer)

    def _answer(self, payload: dict[str, Any], dedupe_key: str) -> dict[str, Any] | None:
        try:
            return self.adapter.handle_interaction(payload, self.decide, dedupe_key=dedupe_key)
        except CallbackError as exc:
            logger.warning("slack channel %s: interaction refused: %s", self.name, exc.message)
            return None

    def _ack(self, client: SocketModeClient, envelope_id: str, payload: dict[str, Any] | None) -> None:
        try:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=envelope_id, payload=payload))
        except SlackClientError as err:
            # The connection went away: Slack redelivers the envelope, and the dedupe key absorbs it.
            logger.warning("slack channel %s: could not acknowledge envelope %s: %s", self.name, envelope_id, err)


def _interrupt_reads(session: Connection | None) -> None:
    """End a blocked read at once: the SDK closes a session only under the lock its reader
    holds for up to 3 s (`receive_timeout`), which would make every close that slow."""
    sock = session.sock if session is not None else None
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _peer_closed(session: Connection) -> bool:
    """True once the peer has closed the TCP connection (EOF) or reset it.

    Peeks at a duplicate of the socket's descriptor without blocking, so the SDK's
    own reads (and TLS state) are untouched.
    """
    sock = session.sock
    try:
        if sock is None or sock.fileno() < 0:
            return True
        with socket.socket(fileno=os.dup(sock.fileno())) as probe:
            return probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except (OSError, AttributeError):
        return True
