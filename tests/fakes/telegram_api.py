"""A fake Telegram Bot API on 127.0.0.1 for the real python-telegram-bot to talk to, plus update builders.

Register with `pytest_plugins = ["tests.fakes.telegram_api"]` (tests/conftest.py does) to get the
`fake_telegram` fixture. Paths are `/bot<token>/<method>`, as on api.telegram.org; the channel's
`api_base_url` is `fake.base_url` (`http://127.0.0.1:<port>/bot`, the SDK appends the token).
python-telegram-bot POSTs each method's parameters as a form, complex values JSON-encoded.

Answers follow https://core.telegram.org/bots/api: `{"ok": true, "result": …}`, or `{"ok": false,
"error_code", "description"}` with that HTTP status; flood control is a 429 whose `parameters`
hold `retry_after`. getUpdates long-polls a queue that tests fill (`push`), confirming what is
below `offset`, and answers 409 while a webhook is set.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

BOT_TOKEN = "7000000001:AAFakeTelegramTokenForTheGatewayTests01"
BOT_ID = 7000000001
_JSON_PARAMETERS = {"reply_markup", "entities", "reply_parameters", "link_preview_options", "allowed_updates"}


@dataclasses.dataclass(frozen=True)
class Call:
    """One Bot API call the fake received."""

    method: str
    token: str
    params: dict[str, Any]
    at: float


@dataclasses.dataclass
class _Failure:
    status: int
    description: str
    retry_after: int | None
    drop: bool  # close the connection without answering


class FakeTelegram:
    """A threaded HTTP server speaking enough of the Bot API for approval messages."""

    def __init__(self, tokens: tuple[str, ...] = (BOT_TOKEN,)) -> None:
        self.tokens = set(tokens)
        self.calls_: list[Call] = []
        self.messages: dict[tuple[str, int], dict[str, Any]] = {}  # (chat id, message id) -> the message
        self.webhook: dict[str, Any] | None = None
        self._lose_confirmation = False
        self.public_chats: dict[str, int] = {"ops_approvals": -1009876543210}  # @username -> chat id
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._query_ids = itertools.count(9000)
        self._lock = threading.Condition()
        self._failures: dict[str, deque[_Failure]] = {}
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeTelegram:
        fake = self

        class Handler(_Handler):
            telegram = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """What to configure as the channel's `api_base_url`."""
        assert self._server is not None, "FakeTelegram is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/bot"

    # --- programming and inspecting --------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        status: int = 500,
        description: str = "Internal Server Error",
        retry_after: int | None = None,
        times: int = 1,
        drop: bool = False,
    ) -> None:
        """The next `times` calls of `method` fail: with `status` and `description` (a 429 with
        `retry_after` is flood control), or with the connection closed unanswered (`drop`)."""
        with self._lock:
            self._failures.setdefault(method, deque()).extend(
                _Failure(status, description, retry_after, drop) for _ in range(times)
            )

    def lose_next_confirmation(self) -> None:
        """The next getUpdates that confirms updates (`offset`) is dropped unanswered and confirms nothing: the
        poller's connection is lost after it handled a batch, and Telegram hands the batch out again."""
        with self._lock:
            self._lose_confirmation = True

    def _loses(self, method: str, params: dict[str, Any]) -> bool:
        with self._lock:
            lost = self._lose_confirmation and method == "getUpdates" and bool(params.get("offset"))
            if lost:
                self._lose_confirmation = False
            return lost

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self.calls_ if method is None or c.method == method]

    def sent(self) -> list[dict[str, Any]]:
        """The messages sent with sendMessage, oldest first, as they are now."""
        with self._lock:
            return [copy.deepcopy(m) for m in self.messages.values()]

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates (its update_id assigned); the update."""
        with self._lock:
            update = {"update_id": next(self._update_ids), **update}
            self._updates.append(update)
            self._lock.notify_all()
        return update

    def pending_updates(self) -> int:
        with self._lock:
            return len(self._updates)

    def new_update_id(self) -> int:
        return next(self._update_ids)

    def new_query_id(self) -> str:
        return str(next(self._query_ids))

    def new_message_id(self) -> int:
        return next(self._message_ids)

    # --- the API ---------------------------------------------------------------------

    def _failure(self, method: str) -> _Failure | None:
        with self._lock:
            queue = self._failures.get(method)
            return queue.popleft() if queue else None

    def _record(self, method: str, token: str, params: dict[str, Any]) -> None:
        with self._lock:
            self.calls_.append(Call(method, token, params, time.monotonic()))

    def answer(self, method: str, token: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if token not in self.tokens:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
        return handler(params)

    @staticmethod
    def _ok(result: Any) -> tuple[int, dict[str, Any]]:
        return 200, {"ok": True, "result": result}

    @staticmethod
    def _bad(description: str, status: int = 400) -> tuple[int, dict[str, Any]]:
        return status, {"ok": False, "error_code": status, "description": description}

    def _bot(self) -> dict[str, Any]:
        return {"id": BOT_ID, "is_bot": True, "first_name": "Approval Gateway", "username": "approval_gateway_bot"}

    def _api_getMe(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self._ok(self._bot())

    def _api_sendMessage(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id, text = str(params.get("chat_id", "")), params.get("text", "")
        if not chat_id:
            return self._bad("Bad Request: chat not found")
        if not text:
            return self._bad("Bad Request: message text is empty")
        if len(text) > 4096 * 2:
            return self._bad("Bad Request: message is too long")
        for row in (params.get("reply_markup") or {}).get("inline_keyboard", []):
            for button in row:
                if len(button.get("callback_data", "").encode()) > 64:
                    return self._bad("Bad Request: BUTTON_DATA_INVALID")
        chat = self._chat(chat_id)
        if chat is None:
            return self._bad("Bad Request: chat not found")
        message = {
            "message_id": self.new_message_id(),
            "date": int(time.time()),
            "chat": chat,
            "from": self._bot(),
            "text": text,
            "parse_mode": params.get("parse_mode"),
        }
        for key in ("entities", "reply_parameters"):
            if params.get(key) is not None:
                message[key] = params[key]
        markup = params.get("reply_markup") or {}
        if "inline_keyboard" in markup:
            message["reply_markup"] = markup  # a Message carries only an inline keyboard back
        elif markup.get("force_reply"):
            message["force_reply"] = markup  # kept for the tests' eyes only
        with self._lock:
            self.messages[(str(chat["id"]), message["message_id"])] = message
        return self._ok(_as_sent(message))

    def _chat(self, chat_id: str) -> dict[str, Any] | None:
        """The chat a sendMessage names: a numeric id, or a public chat's @username (`public_chats`)."""
        if chat_id.startswith("@"):
            found = self.public_chats.get(chat_id[1:])
            return None if found is None else {"id": found, "type": "supergroup", "username": chat_id[1:]}
        return {"id": int(chat_id), "type": "group"} if chat_id.lstrip("-").isdigit() else None

    def _api_editMessageText(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = (str(params.get("chat_id", "")), int(params.get("message_id", 0)))
        with self._lock:
            message = self.messages.get(key)
            if message is None:
                return self._bad("Bad Request: message to edit not found")
            markup = params.get("reply_markup")
            if message["text"] == params.get("text") and message.get("reply_markup") == markup:
                return self._bad(
                    "Bad Request: message is not modified: specified new message content and reply markup are "
                    "exactly the same as a current content and reply markup of the message"
                )
            message["text"] = params.get("text", "")
            message["edit_date"] = int(time.time())
            if markup is None:
                message.pop("reply_markup", None)
            else:
                message["reply_markup"] = markup
            return self._ok(_as_sent(message))

    def _api_answerCallbackQuery(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answered = [
            c
            for c in self.calls("answerCallbackQuery")[:-1]
            if c.params.get("callback_query_id") == params.get("callback_query_id")
        ]
        if answered:
            return self._bad("Bad Request: query is too old and response timeout expired or query ID is invalid")
        return self._ok(True)

    def _api_setWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if params.get("url") and not str(params["url"]).startswith("https://"):
            return self._bad("Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        with self._lock:
            self.webhook = dict(params) if params.get("url") else None
        return self._ok(True)

    def _api_deleteWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.webhook = None
            if str(params.get("drop_pending_updates", "false")).lower() == "true":
                self._updates.clear()
        return self._ok(True)

    def _api_getWebhookInfo(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            url = (self.webhook or {}).get("url", "")
        return self._ok({"url": url, "has_custom_certificate": False, "pending_update_count": len(self._updates)})

    def _api_getUpdates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self._lock:
            if self.webhook is not None:
                return self._bad(
                    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the "
                    "webhook first",
                    409,
                )
            if offset:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]  # confirmed
            while not self._updates and time.monotonic() < deadline and self._server is not None:
                self._lock.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            return self._ok(copy.deepcopy(self._updates[:100]))


def _as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the Bot API returns it (without what only the tests look at)."""
    return {
        k: copy.deepcopy(v) for k, v in message.items() if k not in ("force_reply", "parse_mode", "reply_parameters")
    }


class _Handler(BaseHTTPRequestHandler):
    telegram: FakeTelegram
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path  # /bot<token>/<method>
        token, _, method = path.removeprefix("/bot").partition("/")
        if "json" in self.headers.get("Content-Type", ""):
            params = json.loads(raw or b"{}")
        else:
            params = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
            for key in _JSON_PARAMETERS & set(params):
                params[key] = json.loads(params[key])
        self.telegram._record(method, token, params)
        failure = self.telegram._failure(method)
        if self.telegram._loses(method, params):
            failure = _Failure(0, "", None, drop=True)
        if failure is not None and failure.drop:
            self.close_connection = True
            self.connection.shutdown(2)  # closed without an answer: the client sees a network error
            return
        if failure is not None:
            body: dict[str, Any] = {"ok": False, "error_code": failure.status, "description": failure.description}
            if failure.retry_after is not None:
                body["parameters"] = {"retry_after": failure.retry_after}
            self._send(failure.status, body)
            return
        self._send(*self.telegram.answer(method, token, params))

    do_GET = do_POST

    def _send(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


# --- updates, as Telegram sends them ---------------------------------------------------


def user(user_id: int, first_name: str, username: str = "") -> dict[str, Any]:
    found = {"id": user_id, "is_bot": False, "first_name": first_name}
    if username:
        found["username"] = username
    return found


def tap(
    fake: FakeTelegram, message: dict[str, Any], data: str, sender: dict[str, Any], query_id: str | None = None
) -> dict[str, Any]:
    """The update for a tap on a button whose callback_data is `data`, on `message` (as the fake holds it)."""
    return {
        "update_id": fake.new_update_id(),
        "callback_query": {
            "id": query_id or fake.new_query_id(),
            "from": sender,
            "message": copy.deepcopy(message),
            "chat_instance": "-5000000000000000001",
            "data": data,
        },
    }


def reply(fake: FakeTelegram, to: dict[str, Any], text: str, sender: dict[str, Any]) -> dict[str, Any]:
    """The update for `sender` replying `text` to the bot's message `to`."""
    replied = _as_sent(to)
    message_id = fake.new_message_id()
    return {
        "update_id": fake.new_update_id(),
        "message": {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": to["chat"],
            "from": sender,
            "text": text,
            "reply_to_message": replied,
        },
    }
