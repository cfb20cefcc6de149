"""The outbound guard (SSRF): addresses that are not public are refused — classified without
a packet sent — and every path that calls a URL someone else chose (`callback_url`, `webhook`
hooks, `inject_tool_result` URL and MCP sources) refuses a name that resolves to loopback, when
the URL is configured and again when it connects. The listener on loopback receives nothing.
Nothing here sends a packet anywhere but loopback: `no_packets_beyond_loopback` fails the test
that tries."""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading

import pytest

from approvals import services
from approvals.models import Agent, ConfirmationEvent, Outbox, OutboxKind
from gateway_utils.addresses import AllowList, address_refusal
from gateway_utils.configfile import ConfigError
from gateway_utils.outbound import OutboundRefused, check_url, guarded_client
from tests.conftest import apply_config, decide

LOOPBACK_ALLOWED = ("127.0.0.0/8", "::1")
PUBLIC = "93.184.216.34"  # only ever the answer of a faked resolver: never connected to


@pytest.fixture(autouse=True)
def no_packets_beyond_loopback(monkeypatch):
    """A guard for the guard: any attempt to connect outside loopback fails the test instead."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def checked(address) -> None:
        if isinstance(address, tuple) and not ipaddress.ip_address(address[0].split("%")[0]).is_loopback:
            raise AssertionError(f"a connection to {address[0]} was attempted")

    def connect(self, address):
        checked(address)
        return real_connect(self, address)

    def connect_ex(self, address):
        checked(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def resolver(monkeypatch):
    """Names this test decides the answer for, at the socket level; every other name resolves as usual."""
    answers: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, bytes):
            host = host.decode()
        if host in answers:
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in answers[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


class Listener:
    """A TCP listener on loopback that answers HTTP 200 `{}` and counts every connection it gets."""

    def __init__(self) -> None:
        outer = self
        self.requests: list[dict] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self._answer()

            def do_POST(self) -> None:  # noqa: N802
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                outer.requests.append({"path": self.path, "host": self.headers["host"], "body": self.rfile.read(length)})
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def verify_request(self, request, client_address) -> bool:
                outer.connections += 1
                return True

        self.connections = 0
        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, host: str = "localhost", path: str = "/hook") -> str:
        return f"http://{host}:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.stop()


@pytest.fixture
def loopback_refused(settings):
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    return settings


# --------------------------------------------------------------------------- addresses, as pure functions


@pytest.mark.parametrize(
    "address, reason",
    [
        ("169.254.169.254", "cloud metadata service"),
        ("fd00:ec2::254", "cloud metadata service"),
        ("100.100.100.200", "cloud metadata service"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "unique local"),
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.10", "private"),  # TEST-NET-1: Python counts documentation ranges as private
        ("::ffff:127.0.0.1", "loopback (as 127.0.0.1)"),
        ("::ffff:169.254.169.254", "cloud metadata service (as 169.254.169.254)"),
        ("64:ff9b::a00:1", "private (as 10.0.0.1)"),
        ("2002:7f00:1::", "loopback (as 127.0.0.1)"),
    ],
)
def test_non_public_addresses_are_refused_with_their_reason(address, reason):
    assert address_refusal(address) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address):
    assert address_refusal(address) is None


def test_the_allow_list_takes_networks_addresses_and_host_names():
    allowed = AllowList.parse(["10.0.0.0/8", " ::1 ", "opa.internal", "*.svc.cluster.local", ""])
    assert allowed.allows_address(ipaddress.ip_address("10.1.2.3"))
    assert allowed.allows_address(ipaddress.ip_address("::1"))
    assert not allowed.allows_address(ipaddress.ip_address("11.0.0.1"))
    assert allowed.allows_host("opa.internal") and allowed.allows_host("OPA.internal.")
    assert allowed.allows_host("policy.svc.cluster.local") and not allowed.allows_host("svc.cluster.local.evil")
    for bad in ("10.0.0.0/33", "http://x", "a..b", "*.", "bad host"):
        with pytest.raises(ValueError, match="is not a network"):
            AllowList.parse([bad])


REFUSED_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1:8080/",
    "https://[fd00::1]/x",
    "http://[::ffff:a9fe:a9fe]/",
    "http://0.0.0.0:80/",
    "http://localhost:8080/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_urls_naming_such_addresses_are_refused_when_configured(url, loopback_refused):
    with pytest.raises(OutboundRefused, match=r"a (cloud metadata service|private|unique local|loopback|unspecified)"):
        check_url(url)


def test_configuring_a_name_asks_no_dns(resolver, loopback_refused):
    resolver["policy.example"] = ["127.0.0.1"]  # it would resolve to loopback…
    check_url("https://policy.example/decide")  # …but that is checked when connecting, not here


@pytest.mark.parametrize("url", [*REFUSED_URLS, "http://2130706433/"])  # the last: 127.0.0.1 as one number
def test_the_guarded_client_refuses_them_without_connecting(url, loopback_refused):
    with guarded_client(timeout=2) as client, pytest.raises(OutboundRefused):
        client.get(url)


def test_every_address_a_name_resolves_to_is_checked(resolver, loopback_refused, listener):
    resolver["mixed.test"] = [PUBLIC, "127.0.0.1"]
    with guarded_client(timeout=2) as client, pytest.raises(OutboundRefused, match="mixed.test resolves to 127.0.0.1"):
        client.get(listener.url("mixed.test"))
    assert listener.connections == 0


def test_it_connects_to_the_address_it_checked_and_names_the_host(resolver, settings, listener):
    settings.GATEWAY_OUTBOUND_ALLOW = LOOPBACK_ALLOWED
    resolver["svc.test"] = ["127.0.0.1"]
    with guarded_client(timeout=5) as client:
        assert client.get(listener.url("svc.test", "/ping")).status_code == 200
    assert listener.requests == [{"path": "/ping", "host": f"svc.test:{listener.port}", "body": b""}]


def test_a_name_that_rebinds_to_loopback_is_refused_when_connecting(resolver, loopback_refused, listener):
    resolver["rebind.test"] = [PUBLIC]
    check_url(listener.url("rebind.test"))  # configured while it pointed somewhere public
    resolver["rebind.test"] = ["127.0.0.1"]  # then rebound
    with guarded_client(timeout=2) as client, pytest.raises(OutboundRefused, match="rebind.test resolves to 127.0.0.1"):
        client.post(listener.url("rebind.test"), content=b"{}")
    assert listener.connections == 0


def test_an_allowed_host_name_may_resolve_anywhere(settings, listener):
    settings.GATEWAY_OUTBOUND_ALLOW = ("localhost",)
    with guarded_client(timeout=5) as client:
        assert client.get(listener.url()).status_code == 200
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    with guarded_client(timeout=5) as client, pytest.raises(OutboundRefused):
        client.get(listener.url())
    assert listener.connections == 1


# --------------------------------------------------------------------------- each outbound path


REFUSED = "localhost resolves to 127.0.0.1, a loopback address; GATEWAY_OUTBOUND_ALLOW can allow it"


def gate_config(extra_hooks: str = "") -> str:
    return f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: bot
    hooks:
      - {{kind: approval_gate, name: gate, tools: ["pay"], channel: web, approvers: [alice]}}
{extra_hooks}
"""


@pytest.mark.django_db(transaction=True)
def test_callback_url_is_refused_when_given_and_when_the_webhook_connects(agent, listener, settings):
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    refused = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}, callback_url=listener.url())
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid" and REFUSED in error["details"]["callback_url"][0]
    assert not ConfirmationEvent.objects.exists()  # nothing written

    settings.GATEWAY_OUTBOUND_ALLOW = LOOPBACK_ALLOWED
    pending = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}, callback_url=listener.url()).json()
    settings.GATEWAY_OUTBOUND_ALLOW = ()  # e.g. the setting tightened, or the name rebound, before the decision
    decide(pending["confirmation_id"], "approve")
    row = Outbox.objects.get(confirmation_id=pending["confirmation_id"], kind=OutboxKind.WEBHOOK)
    assert not services.outbox_deliver(outbox_id=row.pk).sent
    row.refresh_from_db()
    assert row.status == "failed" and REFUSED in row.last_error  # permanent: never retried
    failed = ConfirmationEvent.objects.get(confirmation_id=pending["confirmation_id"], kind="webhook_failed")
    assert "refused" in failed.message
    assert listener.connections == 0


@pytest.mark.django_db(transaction=True)
def test_a_webhook_hook_is_refused_when_applied_and_when_it_connects(transactional_db, listener, settings):
    hook = f"      - {{kind: webhook, name: opa, event: pre_tool_use, url: '{listener.url()}'}}"
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    with pytest.raises(ConfigError) as refused:
        apply_config(gate_config(hook))
    assert [f"{p.path}: {p.message}" for p in refused.value.problems] == [
        f"agents[0].hooks[1].url: refused: {REFUSED} (docs/reference/environment.md)"
    ]

    settings.GATEWAY_OUTBOUND_ALLOW = LOOPBACK_ALLOWED
    apply_config(gate_config(hook))
    bot = Agent.objects.get(name="bot")
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    # The admin and the staff API change hooks through the same service: refused there too.
    changed = [{"kind": "webhook", "event": "pre_tool_use", "url": listener.url(path="/v2")}]
    with pytest.raises(ConfigError, match=r"^hooks\[0\]\.url: refused: localhost resolves to 127\.0\.0\.1"):
        services.agent_hooks_apply(agent=bot, hooks=changed, source="test")
    # Applied while loopback was allowed, called now that it is not: refused when connecting.
    answer = services.tool_call_pre(agent=bot, session_id="s", tool_name="ls", tool_args={})
    assert answer.decision == "deny" and "opa" in answer.reason and "refused" in answer.reason and REFUSED in answer.reason
    assert listener.connections == 0


def inject_config(source: str) -> str:
    return gate_config(
        f"""      - kind: inject_tool_result
        name: ctx
        tool_name: today
        source: {source}"""
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "source, key",
    [("{{url: '{url}'}}", "source.url"), ("{{mcp: {{url: '{url}'}}}}", "source.mcp.url")],
    ids=["http", "mcp"],
)
def test_an_injection_source_is_refused_when_applied_and_when_it_connects(transactional_db, listener, settings, source, key):
    config = inject_config(source.format(url=listener.url(path="/mcp")))
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    with pytest.raises(ConfigError) as refused:
        apply_config(config)
    assert [p.path for p in refused.value.problems] == [f"agents[0].hooks[1].{key}"]
    assert REFUSED in refused.value.problems[0].message

    settings.GATEWAY_OUTBOUND_ALLOW = LOOPBACK_ALLOWED
    apply_config(config)
    settings.GATEWAY_OUTBOUND_ALLOW = ()
    answer = services.hook_event_run(agent=Agent.objects.get(name="bot"), event="session_start", session_id="s")
    assert answer["decision"] == "allow" and answer["messages"] == []
    [skipped] = answer["side_effects"]
    assert skipped.startswith(f"injection_skipped:ctx: {'GET' if key == 'source.url' else 'MCP server'} {listener.url(path='/mcp')} refused: {REFUSED}")
    assert listener.connections == 0
