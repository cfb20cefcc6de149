"""What the fake vendor servers share: canned failures for the next requests, and JSON answers."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit


@dataclasses.dataclass
class Failure:
    method: str | None  # None: any method
    path_prefix: str
    status: int
    body: Mapping[str, Any]
    headers: dict[str, str]
    times: int


class FailureQueue:
    """Failures to answer the next matching requests with (`fail_next`), each used `times` times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[Failure] = []

    def add(self, failure: Failure) -> None:
        with self._lock:
            self._failures.append(failure)

    def take(self, method: str, path: str) -> Failure | None:
        """The failure this request is to get, if any (and one use of it spent)."""
        with self._lock:
            for failure in self._failures:
                if failure.times > 0 and path.startswith(failure.path_prefix) and failure.method in (None, method):
                    failure.times -= 1
                    return failure
        return None


def send_json(
    handler: BaseHTTPRequestHandler, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> None:
    """Answer a request with `body` as JSON (and these headers)."""
    payload = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json; charset=utf-8")
    handler.send_header("Content-Length", str(len(payload)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(payload)


class JsonApiHandler(BaseHTTPRequestHandler):
    """A fake API's request handler: quiet, every method read the same way and handed to `answer`."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

    def do_GET(self) -> None:
        self._read_and_answer()

    def do_POST(self) -> None:
        self._read_and_answer()

    def do_PUT(self) -> None:
        self._read_and_answer()

    def do_PATCH(self) -> None:
        self._read_and_answer()

    def _read_and_answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.answer(self.command, urlsplit(self.path).path, headers, body)

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        """Answer one request (`send_json`); `headers` have lower-cased names."""
        raise NotImplementedError
