"""`python -m gateway.serve` — uvicorn's command line, every option as `uvicorn` takes it, with a server
that rests between its ticks: `approval-gateway run` starts the gateway's HTTP server with it, and
docs/operating.md names it for production.

uvicorn's server wakes ten times a second for as long as it runs (`uvicorn.Server.main_loop`: sleep
0.1 s, then `on_tick`, which refreshes the `Date` header once a second and sees whether to stop). On the
gateway's VM each of those wakes finds the process's caches cold: with nothing to do, the server alone
used 0.0045 of a core, the biggest share of an idle gateway's (docs/benchmarks.md, "idle"). `RestingServer`
ticks once a second — the `Date` header is refreshed as often as uvicorn refreshes it — and is woken at
once when told to stop (a signal, or `should_exit` set from any thread), so a shutdown is as prompt as
uvicorn's. Nothing else of uvicorn changes: its options, reloader and protocols are its own (with
`--workers N` each worker process is spawned afresh and builds uvicorn's own server: `main`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

import uvicorn


class RestingServer(uvicorn.Server):
    """`uvicorn.Server` whose main loop ticks every `TICK` seconds instead of ten times a second."""

    TICK = 1.0

    def __init__(self, config: uvicorn.Config) -> None:
        self._woken: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._should_exit = False
        super().__init__(config)

    @property  # type: ignore[override]
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        # Set by the signal handler (`handle_exit`), by uvicorn itself, or by code in another thread: the
        # resting main loop hears of it now, not at its next tick.
        self._should_exit = value
        if value and self._woken is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._woken.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        # (uvicorn's `on_tick` refreshes the Date header when its counter is a multiple of 10: every tick here)
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self.TICK)
            self._woken.clear()  # (a stop taken back before the tick saw it must not leave the loop spinning)
            should_exit = await self.on_tick(counter)


def main(argv: list[str] | None = None) -> Any:
    """uvicorn's command (`uvicorn.main.main`), building `RestingServer` where it builds its server.

    (With `--workers N` each worker is a process uvicorn spawns afresh, which builds uvicorn's own
    server: run one process per core under a process manager instead, as docs/operating.md says.)"""
    # (the module: the package's attribute `uvicorn.main` is the command, which shadows it)
    command_module = importlib.import_module("uvicorn.main")
    command_module.Server = RestingServer  # the name `uvicorn.main.run` builds its server by
    return command_module.main(args=argv, prog_name="python -m gateway.serve")


if __name__ == "__main__":
    main()
