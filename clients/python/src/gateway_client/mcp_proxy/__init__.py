"""An MCP gateway proxy: `gateway-mcp-proxy --name NAME -- UPSTREAM_COMMAND [ARGS…]` (the same as
`python -m gateway_client.mcp_proxy …`; installed by `pip install 'approval-gateway-client[mcp]'`).

An MCP server over stdio that an MCP client (Claude Desktop, Cursor, Claude
Code, VS Code, an SDK's MCP support) launches in place of the upstream server.
It starts the upstream (a stdio command, or `--upstream-url` for streamable
HTTP) and relays the MCP session between the two, message by message: the
handshake, the tool list (unchanged: names, descriptions, schemas), resources,
prompts, completions, logging, notifications and the upstream's own requests
(sampling, elicitation, roots) all pass through as they are.

Every `tools/call` is the one exception. It is held and asked about as the
gateway tool `NAME__TOOL` (pre-tool-use), in the proxy's session:

- allow: the upstream is called with the arguments the gateway answered (a
  hook may have rewritten them); its result is reported (post-tool-use) and
  the gateway's answer — possibly cut by `truncate_result` — is what the
  client gets. A failure (an `isError` result or a JSON-RPC error) is
  reported as tool-error and its action followed (retry, recover, abort, raise).
- deny, reject, or nobody decided within `--max-wait`: an `isError` result
  saying why (`time__convert_time was not run: rejected by bob: not now`); the
  upstream never sees the call. Calling the same tool again with the same
  arguments picks up a decision given meanwhile.
- while a human decides, `notifications/progress` every `--progress-interval`
  seconds if the client sent a `progressToken`.
- the gateway unreachable: an `isError` result; the upstream is not called.
- the client cancels the request (`notifications/cancelled`): the confirmation
  is withdrawn (`POST /api/v1/confirmations/<id>/cancel`).

Nothing reaches the upstream as a `tools/call` without the gate. The proxy reads
the client's lines itself (`read_client_line`) and relays what it parsed, never
the raw line: a `tools/call` is gated only as a request with a string or integer
id; one with `id: null` or any other id gets a JSON-RPC error, one without an id
(a notification: nothing can answer it) is dropped and logged, and a JSON-RPC
batch (an array: MCP has none since 2025-06-18) is refused whole, each request
in it answered with an error. So is a method that is `tools/call` but for case or blanks
(`Tools/Call`), and any request reusing the id of one not yet answered (the upstream's answer to
one would be taken for the other's), a cancelled one included; the upstream's late answer to a call the
client cancelled is dropped (relayed, it would reach the client without the post-tool-use hooks).

When the client closes stdin, held calls are withdrawn, the upstream is stopped
(its stdin closed, then terminated if it lingers; an HTTP upstream's session is
ended with a DELETE) and the proxy exits 0. When the upstream goes (its process
exits or crashes, or an HTTP upstream says the session is gone) the client's requests still open get
a JSON-RPC error (held calls are withdrawn) and the proxy exits 1.

With `--ask-human` the proxy also offers the tool `ask_human` beside the
upstream's (added to each `tools/list` answer): a call asks a person through the
gateway (a question, docs/asking.md) and answers with what they said; it never
reaches the upstream. With `--elicitation gateway` an upstream's
`elicitation/create` request (a form) is not passed to the client, which may
have no person at the keyboard: the proxy asks it as a question through the
gateway and answers the upstream `accept` with the person's answer (`decline`
when nobody answered or the form cannot be asked as a question; URL-mode
elicitation too). `--elicitation client` (the default) passes it through.

Configuration: `GATEWAY_URL` and `GATEWAY_API_KEY` (or `--url`, `--api-key`),
`GATEWAY_USER_ID` (`--user-id`). The upstream command inherits the proxy's
environment without `GATEWAY_API_KEY`. See docs/integrations/mcp-proxy.md.

The package: `protocol` (the MCP messages: results, the client's lines, a held call), `transport` (the
client's stdio, an HTTP upstream's headers and session), `upstream` (a command upstream: its process and
pipes), `gating` (the proxy: the relay and each gated call), `asking` (`--ask-human`), `elicitation` (`--elicitation gateway`), `command` (the options, the
upstream, `main`).
"""

from gateway_client.extras import MissingExtra

try:  # the [mcp] extra: checked before any module of the package imports it
    import anyio  # noqa: F401
    import mcp  # noqa: F401
    import mcp_types  # noqa: F401
    import pydantic  # noqa: F401
except ImportError as exc:
    raise MissingExtra("gateway_client.mcp_proxy", "mcp", exc.name) from exc

from gateway_client.mcp_proxy.asking import ASK_HUMAN, with_ask_human  # noqa: E402
from gateway_client.mcp_proxy.command import (  # noqa: E402
    DEFAULT_RECONNECT_FOR,
    NAME_PATTERN,
    REQUEST_TIMEOUT,
    USAGE_ERROR,
    main,
    parse_arguments,
    run,
    upstream_streams,
)
from gateway_client.mcp_proxy.elicitation import elicitation_schema, with_form_elicitation  # noqa: E402
from gateway_client.mcp_proxy.gating import (  # noqa: E402
    DEFAULT_MAX_WAIT,
    DEFAULT_PROGRESS_INTERVAL,
    McpGatewayProxy,
    logger,
)
from gateway_client.mcp_proxy.protocol import (  # noqa: E402
    BAD_CALL_ID,
    BATCH_REFUSED,
    HeldCall,
    Refused,
    call_failure,
    error_answer,
    read_client_line,
    reported_result,
    text_result,
)
from gateway_client.mcp_proxy.transport import ClientStdio, HttpStamp, SessionWatch  # noqa: E402

__all__ = [
    "ASK_HUMAN", "BAD_CALL_ID", "BATCH_REFUSED", "DEFAULT_MAX_WAIT", "DEFAULT_PROGRESS_INTERVAL",
    "DEFAULT_RECONNECT_FOR", "NAME_PATTERN", "REQUEST_TIMEOUT", "USAGE_ERROR", "ClientStdio", "HeldCall",
    "HttpStamp", "McpGatewayProxy", "Refused", "SessionWatch", "call_failure", "elicitation_schema",
    "error_answer", "logger", "main", "parse_arguments", "read_client_line", "reported_result", "run",
    "text_result", "upstream_streams", "with_ask_human", "with_form_elicitation",
]  # fmt: skip
