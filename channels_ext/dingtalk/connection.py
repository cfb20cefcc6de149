"""DingTalk's Stream connection: card callbacks without a public URL (`mode: stream`).

dingtalk-stream's client first asks for an endpoint — `POST {api_base_url}/v1.0/gateway/connections/open`
with the app's credentials and its subscriptions, answered `{"endpoint": "wss://…", "ticket": "…"}` —
then holds a WebSocket to `endpoint?ticket=…`. Card clicks arrive as CALLBACK messages on topic
`/v1.0/card/instances/callback`; each is acknowledged with a message naming its `messageId`, whose
`data.response` may carry the redrawn card. DingTalk redelivers a callback that is not acknowledged
in time, so the ack goes out within `ACK_BUDGET_SECONDS` whatever happens.

What this module does around dingtalk-stream 0.24.3, and why:
- **Its endpoint request is ours.** `DingTalkStreamClient.open_connection` posts to the host the
  DINGTALK_OPENAPI_ENDPOINT variable named when the SDK was imported (one per process), and answers
  every failure — a refused credential included — with None and a log line, after which `start()`
  retries every 10 s forever. Here the request goes to the channel's `api_base_url`, a refusal raises
  ConnectionRefused (the `channel_connections` runner stops the process, naming the keys to fix), and
  anything else is a failed attempt the runner retries with backoff.
- **Its connection loop is ours.** `start()` never returns and reconnects on its own schedule; `serve`
  holds one WebSocket, hands each message to the SDK's own `route_message` (which routes it to the
  registered handler and sends the SDK's ack), and returns when the connection is lost or DingTalk asks
  for a new one (`disconnect`), so the runner reconnects with backoff.
- **Deciding is Django ORM work**: it runs in a thread, never on the event loop; an answer not ready
  within the budget is acknowledged without a card (the click still completes; the worker redraws).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote_plus

import requests
import websockets
from dingtalk_stream import AckMessage, CallbackHandler, CallbackMessage, Credential, DingTalkStreamClient
from dingtalk_stream.card_callback import Card_Callback_Router_Topic
from dingtalk_stream.version import VERSION_STRING
from websockets.exceptions import ConnectionClosed

from channels_ext.dingtalk.config import DingTalkChannelConfig
from gateway_contract import Decide
from gateway_contract.links import CONNECTED, RECONNECTING, ConnectionRefused, Report, run_on_own_loop

logger = logging.getLogger(__name__)


class StreamHost(Protocol):
    """What the link needs of its channel (the adapter hands itself, as slack-bolt hands its handler the app)."""

    name: str
    config: DingTalkChannelConfig

    def answer_card_callback(self, data: dict[str, Any], decide: Decide, *, delivery_id: str = "") -> tuple[int, dict[str, Any]]: ...

OPEN_CONNECTION_PATH = "/v1.0/gateway/connections/open"
ACK_BUDGET_SECONDS = 2.5
WATCH_INTERVAL_SECONDS = 0.2
HTTP_TIMEOUT_SECONDS = 10
PING_INTERVAL_SECONDS = 20.0

Answer = Callable[[dict[str, Any], str], "tuple[int, dict[str, Any]]"]  # (callback data, message id)


class _CardCallbackHandler(CallbackHandler):
    """The handler dingtalk-stream routes card callbacks to: the adapter's answer, within the budget."""

    def __init__(self, name: str, answer: Answer, budget: float):
        super().__init__()
        self.name = name
        self.answer = answer
        self.budget = budget

    async def process(self, message: CallbackMessage) -> tuple[int, Any]:
        message_id = message.headers.message_id or ""
        work = asyncio.get_running_loop().run_in_executor(None, self.answer, message.data, message_id)
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.budget)
        except asyncio.TimeoutError:
            logger.warning(
                "dingtalk channel %s: acknowledged callback %s without a card after %.1f s; the click is still "
                "being handled",
                self.name,
                message_id,
                self.budget,
            )
            return AckMessage.STATUS_OK, {"message": "Received; the card will update in a moment."}
        except Exception:
            logger.exception("dingtalk channel %s: handling callback %s failed", self.name, message_id)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, {}


class _GatewayStreamClient(DingTalkStreamClient):
    """dingtalk-stream's client with the channel's own endpoint request (module docstring)."""

    def __init__(self, credential: Credential, api_base_url: str):
        super().__init__(credential, logger=logging.getLogger("channels_ext.dingtalk.stream_sdk"))
        self.api_base_url = api_base_url
        self.disconnect_requested = False

    def open_connection(self) -> dict[str, Any]:
        """The endpoint and ticket of a new connection; ConnectionRefused if DingTalk refuses the credentials."""
        topics = [{"type": "CALLBACK", "topic": topic} for topic in self.callback_handler_map]
        body = {
            "clientId": self.credential.client_id,
            "clientSecret": self.credential.client_secret,
            "subscriptions": topics,
            "ua": f"dingtalk-sdk-python/v{VERSION_STRING}-union",
            "localIp": "",
        }
        url = self.api_base_url + OPEN_CONNECTION_PATH
        try:
            response = requests.post(url, json=body, headers={"Accept": "application/json"}, timeout=HTTP_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            raise ConnectionError(f"could not reach {self.api_base_url}: {type(exc).__name__}") from None
        if response.status_code in (400, 401, 403):
            raise ConnectionRefused(
                f"DingTalk refused the Stream connection of app {self.credential.client_id} "
                f"(HTTP {response.status_code}: {_code(response)}). Check client_id and client_secret, and that the "
                "app's robot uses Stream mode (developer console → the app → Robot → message receiving mode: Stream)."
            )
        if response.status_code != 200:
            raise ConnectionError(f"DingTalk's connection endpoint answered HTTP {response.status_code}")
        try:
            answer = response.json()
            return {"endpoint": str(answer["endpoint"]), "ticket": str(answer["ticket"])}
        except (ValueError, KeyError, TypeError):
            raise ConnectionError("DingTalk's connection endpoint answered without an endpoint and ticket") from None

    async def route_message(self, json_message: dict[str, Any]) -> str:
        result = await super().route_message(json_message)
        if result == DingTalkStreamClient.TAG_DISCONNECT:
            self.disconnect_requested = True
        return result


class DingTalkStreamLink:
    """One DingTalk channel's Stream connection (gateway_contract/links.py's contract)."""

    def __init__(self, adapter: StreamHost, decide: Decide, *, budget: float = ACK_BUDGET_SECONDS):
        self.adapter = adapter
        self.decide = decide
        self.budget = budget

    @property
    def name(self) -> str:
        return self.adapter.name

    def answer(self, data: dict[str, Any], message_id: str) -> tuple[int, dict[str, Any]]:
        """A card callback, in a worker thread: the ack's code and response."""
        return self.adapter.answer_card_callback(data, self.decide, delivery_id=message_id)

    def serve(self, stop: threading.Event, report: Report) -> None:
        """Open one Stream connection and acknowledge its messages until it is lost or `stop` is set."""
        run_on_own_loop(self._serve(stop, report))

    async def _serve(self, stop: threading.Event, report: Report) -> None:
        config = self.adapter.config
        client = _GatewayStreamClient(Credential(config.client_id, config.client_secret), config.api_base_url)
        client.register_callback_handler(Card_Callback_Router_Topic, _CardCallbackHandler(self.name, self.answer, self.budget))
        client.pre_start()
        connection = await asyncio.to_thread(client.open_connection)
        uri = f"{connection['endpoint']}?ticket={quote_plus(connection['ticket'])}"
        tasks: set[asyncio.Task[Any]] = set()
        async with websockets.connect(uri, open_timeout=10, close_timeout=2, ping_interval=PING_INTERVAL_SECONDS) as ws:
            client.websocket = ws
            report(CONNECTED, f"Stream connection open for app {config.client_id}")
            try:
                while not stop.is_set() and not client.disconnect_requested:
                    try:
                        raw = await asyncio.wait_for(ws.recv(), WATCH_INTERVAL_SECONDS)
                    except asyncio.TimeoutError:
                        continue
                    except ConnectionClosed as exc:
                        logger.warning("dingtalk channel %s: the Stream connection was lost (%s)", self.name, exc)
                        return
                    try:
                        message = json.loads(raw)
                    except ValueError:
                        logger.warning("dingtalk channel %s: a Stream message that is not JSON was ignored", self.name)
                        continue
                    # The SDK's routing: the registered handler's answer goes back as its ack.
                    task = asyncio.get_running_loop().create_task(client.background_task(message))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if client.disconnect_requested:
                    logger.info("dingtalk channel %s: DingTalk asked for a new connection", self.name)
                    report(RECONNECTING, "DingTalk asked for a new connection")
            finally:
                if tasks:
                    await asyncio.wait(tasks, timeout=self.budget + 1)


def _code(response: requests.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return "no JSON body"
    return str(answer.get("code") or answer.get("message") or "no code")[:100] if isinstance(answer, dict) else "no code"
