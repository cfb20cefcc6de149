"""Small helpers shared by tests (not fixtures): waiting for a condition, and seeing
what the gateway running in this process is doing (who is parked waiting, which
requests it served and what it answered)."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from gateway_utils import whole_response


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or getattr(predicate, '__name__', predicate)}")


class InThread:
    """`fn(*args, **kwargs)` running in a daemon thread (an agent waiting for its decision) while the test
    drives the gateway; `result()` is its return value, or its exception raised here."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args, **kwargs)
            except BaseException as exc:
                self._error = exc

        self.thread = threading.Thread(target=run, name=f"in-thread-{getattr(fn, '__name__', 'call')}", daemon=True)
        self.thread.start()

    def running(self) -> bool:
        return self.thread.is_alive()

    def result(self, timeout: float = 30.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout} s"
        if self._error is not None:
            raise self._error
        return self._value


@contextlib.contextmanager
def rows_locked(queryset: Any, timeout: float = 20.0) -> Iterator[None]:
    """Another connection holds the rows' locks (SELECT … FOR UPDATE, in its own transaction) while the block runs:
    whatever needs those rows — a click deciding a request — waits for the block to end."""
    from django.db import connection, transaction

    release, locked = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(queryset.select_for_update())
                locked.set()
                release.wait(timeout=timeout)
        finally:
            connection.close()

    holder = threading.Thread(target=hold, name="rows-locked", daemon=True)
    holder.start()
    try:
        assert locked.wait(timeout=timeout), "could not lock the rows"
        yield
    finally:
        release.set()
        holder.join()


def parked(confirmation_id: Any) -> bool:
    """True while an agent is parked waiting on this request in a gateway served by this process
    (the live gateway's uvicorn thread): its waiter is registered in `gateway_utils.realtime.waiters`
    and awaited, i.e. it has read the request and now sleeps until a wake-up.

    Registration alone comes before the waiter's first read; parked comes after it, so anything
    changed from now on is seen only through a wake-up (a notification, the re-check, its timer).
    """
    from gateway_utils.realtime import waiters

    # One C-level copy under the GIL: the server's thread may be adding or removing futures.
    futures = tuple(waiters._waiters.get(str(confirmation_id), ()))
    # A task awaiting a future is, for asyncio, the future's done callback (its wake-up).
    return any(not future.done() and future._callbacks for future in futures)


# --------------------------------------------------------------------------- what a test gateway served


@dataclasses.dataclass
class Exchange:
    """One HTTP request a test gateway served: what was asked, by which start of the server, and the answer."""

    server: int  # 1 for the first start of the gateway, 2 after a restart, ...
    method: str
    path: str
    started: float  # time.monotonic() when the request reached the app
    status: int | None = None
    body: bytes = b""
    ended: float | None = None  # when the app handed over the last of its answer; None while in flight

    @property
    def answered(self) -> bool:
        return self.ended is not None

    def json(self) -> Any:
        assert self.ended is not None, f"{self.method} {self.path} has not been answered"
        return json.loads(self.body)


class RequestLog:
    """A test-only ASGI wrapper: records every HTTP request the wrapped app serves (WebSockets pass through).

    Lets a test wait for a step of a client's protocol ("its second /wait round has started") and
    assert on what the gateway answered, instead of guessing either from the clock.
    """

    def __init__(self, app: Callable, *, recording: bool = True) -> None:
        self.app = app
        self.recording = recording
        self.server = 1
        self._exchanges: list[Exchange] = []

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not self.recording:
            await self.app(scope, receive, send)
            return
        exchange = Exchange(self.server, scope["method"], scope["path"], time.monotonic())
        self._exchanges.append(exchange)

        async def recorded(message: dict) -> None:
            # Recorded before it is sent: once the client has the answer, the log has it too (sending
            # first let a client read its answer and a test look at the log before the line was written).
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                if whole_response.BODY in message:  # a whole answer in one message (gateway_utils.whole_response)
                    exchange.body += message[whole_response.BODY]
                    exchange.ended = time.monotonic()
            elif message["type"] == "http.response.body":
                exchange.body += message.get("body", b"")
                if not message.get("more_body", False):
                    exchange.ended = time.monotonic()
            await send(message)

        await self.app(scope, receive, recorded)

    def start(self) -> RequestLog:
        """Forget what was recorded and record from now on."""
        self._exchanges = []
        self.recording = True
        return self

    def stop(self) -> None:
        self.recording = False
        self._exchanges = []

    def exchanges(self, method: str | None = None, path: str | None = None, server: int | None = None) -> list[Exchange]:
        """The requests served so far, oldest first; only those with this method, path or server if given."""
        return [
            e
            for e in list(self._exchanges)
            if (method is None or e.method == method)
            and (path is None or e.path == path)
            and (server is None or e.server == server)
        ]


ASK_PATH = "/api/v1/hooks/pre-tool-use"


def wait_path(confirmation_id: Any) -> str:
    return f"/api/v1/confirmations/{confirmation_id}/wait"


def waits(log: RequestLog, confirmation_id: Any, server: int | None = None) -> list[Exchange]:
    """The long-poll rounds on this request, oldest first (the last one may still be in flight)."""
    return log.exchanges("GET", wait_path(confirmation_id), server)


def answers(log: RequestLog, confirmation_id: Any = None, server: int | None = None) -> list[tuple[str, Any]]:
    """What the gateway answered an agent, in order: ("ask", decision) for each pre-tool-use call and
    ("wait", status) for each long-poll round; an error as (path, HTTP status). Only about this request
    if `confirmation_id` is given, only from that start of the gateway if `server` is; unanswered
    requests are left out."""
    found = []
    for exchange in log.exchanges(server=server):
        if not exchange.answered:
            continue
        if exchange.path == ASK_PATH and exchange.status == 200:
            body = exchange.json()
            if confirmation_id is None or body.get("confirmation_id") == str(confirmation_id):
                found.append(("ask", body["decision"]))
        elif exchange.path.startswith("/api/v1/confirmations/") and exchange.path.endswith("/wait"):
            if confirmation_id is None or exchange.path == wait_path(confirmation_id):
                found.append(("wait", exchange.json()["status"] if exchange.status == 200 else exchange.status))
        elif confirmation_id is None or str(confirmation_id) in exchange.path:
            found.append((exchange.path, exchange.status))
    return found


# --------------------------------------------------------------------------- a gateway that is down


class DeadPort:
    """Stands in for a gateway that is down, on its port: accepts each connection and closes it at once.

    A client's attempt fails as it would against a dead gateway (the connection is dropped before any
    answer), and the test can see that it was made: `attempts` counts them. Use as a context manager;
    the port is free again on exit, for the real gateway to start on.
    """

    def __init__(self, port: int) -> None:
        self.attempts = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._drop_connections, name="dead-port", daemon=True)

    def _drop_connections(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # shut down: the outage is over
                return
            connection.close()
            self.attempts += 1

    def wait_for_attempts(self, count: int = 1, timeout: float = 20.0) -> int:
        return wait_until(lambda: self.attempts >= count and self.attempts, timeout, f"{count} connection attempt(s)")

    def __enter__(self) -> DeadPort:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.thread.join(timeout=10)
        self.sock.close()


# --------------------------------------------------------------------------- a person on the gateway's pages


class SignedIn:
    """Someone signed in to the gateway's own pages (the approval page, the inbox, the admin) over real
    HTTP, as a browser without JavaScript: the session cookie kept, each form posted with its CSRF token.

    `messages(response)` are the sentences the page shows after a form: the page's flash messages,
    the admin's, and the form's own errors.
    """

    _FLASH = re.compile(r'<li class="[^"]*" role="status">(.*?)</li>', re.S)  # the approval page, the inbox
    _ADMIN = re.compile(r'<ul class="messagelist">(.*?)</ul>', re.S)
    _FORM_ERRORS = re.compile(r'<ul class="errorlist nonfield">(.*?)</ul>', re.S)  # a form sent back with why
    _ITEM = re.compile(r"<li[^>]*>(.*?)</li>", re.S)

    def __init__(self, base_url: str, username: str, password: str) -> None:
        import httpx

        self.username = username
        self.http = httpx.Client(base_url=base_url, follow_redirects=True, timeout=30)
        self.http.get("/login/")  # sets the CSRF cookie
        signed_in = self.post("/login/", {"username": username, "password": password})
        assert "sessionid" in self.http.cookies, f"{username} could not sign in: {signed_in.status_code}"

    def post(self, path: str, data: dict[str, Any]) -> Any:
        return self.http.post(path, data={**data, "csrfmiddlewaretoken": self.http.cookies["csrftoken"]})

    def get(self, path: str) -> Any:
        return self.http.get(path)

    @classmethod
    def messages(cls, response: Any) -> list[str]:
        said = cls._FLASH.findall(response.text)
        for listed in cls._ADMIN.findall(response.text) + cls._FORM_ERRORS.findall(response.text):
            said += cls._ITEM.findall(listed)
        return [html.unescape(text).strip() for text in said]

    def close(self) -> None:
        self.http.close()


def rewrite_request(confirmation_ids: Any, **fields: Any) -> None:
    """Move fields of confirmation requests for a test's setup (a deadline into the past, say), signed
    anew as the gateway signs what it writes (`decision_mac`). The ONE way tests move signed fields:
    anything else that changes them is tampering, and the gateway answers it as such (docs/audit.md)."""
    from approvals.models import ConfirmationRequest

    _rewrite(ConfirmationRequest, confirmation_ids, fields)


def rewrite_grant(grant_ids: Any, **fields: Any) -> None:
    """`rewrite_request` for grants."""
    from approvals.models import Grant

    _rewrite(Grant, grant_ids, fields)


def _rewrite(model: Any, ids: Any, fields: dict[str, Any]) -> None:
    from approvals.audit import decision_mac

    ids = list(ids) if isinstance(ids, (list, tuple, set)) else [ids]
    model.objects.filter(pk__in=ids).update(**fields)
    for row in model.objects.filter(pk__in=ids):
        model.objects.filter(pk=row.pk).update(decision_mac=decision_mac(model, row))


@contextlib.contextmanager
def on_new_connections(wrapper: Callable[..., Any]) -> Iterator[None]:
    """`wrapper` (a Django execute wrapper) on every database connection opened while the block runs, in
    any thread — the server's pools included, whose connections outlive the test: on leaving the block
    the wrapper passes every statement straight through, so it can change nothing for later tests."""
    from django.db.backends.signals import connection_created

    active = [True]

    def gated(execute, sql, params, many, context):
        if active[0]:
            return wrapper(execute, sql, params, many, context)
        return execute(sql, params, many, context)

    def install(sender, connection, **kwargs) -> None:
        if gated not in connection.execute_wrappers:
            connection.execute_wrappers.append(gated)

    connection_created.connect(install)
    try:
        yield
    finally:
        connection_created.disconnect(install)
        active[0] = False
