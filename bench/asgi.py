"""`bench.asgi:application`: the gateway's ASGI app (with `bench.settings`) plus
`GET /bench/stats` — waiters registered in this process, its threads and RSS —
so the benchmark knows when every waiter is in place."""

import json
import os

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from gateway.asgi import application as gateway_application  # noqa: E402
from gateway_utils.realtime import waiters  # noqa: E402


def _proc_stats() -> dict:
    rss_kib = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return {"pid": os.getpid(), "rss_kib": rss_kib, "threads": len(os.listdir("/proc/self/task"))}


async def _stats(send) -> None:
    body = json.dumps({"waiters": waiters.count, **_proc_stats()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def application(scope, receive, send):
    """Not a coroutine function on purpose: it hands back the gateway's own coroutine, so a
    held waiter carries no extra frame of ours (run with `uvicorn --interface asgi3`)."""
    if scope["type"] == "http" and scope["path"] == "/bench/stats":
        return _stats(send)
    return gateway_application(scope, receive, send)
