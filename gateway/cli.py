"""The `approval-gateway` command (the installed wheel's console script; `python -m gateway.cli` too).

    approval-gateway run                    migrate, the demo, then server + worker + beat (`make run`)
    approval-gateway migrate                apply the database migrations
    approval-gateway apply-config FILE      apply a config file (validated whole first)
    approval-gateway create-api-key AGENT   print a new API key for AGENT
    approval-gateway check [--deploy]       Django's system checks
    approval-gateway NAME [ARGS]            any other manage.py command by its name (`verify-audit` or
                                            `verify_audit`); `approval-gateway help` lists them
    approval-gateway --version

The commands are manage.py's (docs/reference/commands.md); `run` is gateway/launcher.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from django.core.management import execute_from_command_line

from gateway import launcher
from gateway.version import __version__

PROG = "approval-gateway"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("--version", "version"):
        print(f"{PROG} {__version__}")
        return 0
    if args and args[0] == "run":
        return _run(args[1:])
    if not args or args[0] in ("-h", "--help"):
        usage = __doc__.split("\n\n")[1]
        print(f"{usage}\n\n`{PROG} help` lists every command; `{PROG} help NAME` tells one's options.")
        return 0 if args else 2
    name = args[0] if args[0].startswith("-") else args[0].replace("-", "_")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    try:
        execute_from_command_line([PROG, name, *args[1:]])
    except SystemExit as stopped:  # Django's commands exit with their status (a message is a failure)
        return stopped.code if isinstance(stopped.code, int) else (0 if stopped.code is None else 1)
    return 0


def _run(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} run",
        description="Migrate, apply the demo config, then run the ASGI server, a Celery worker and Celery beat "
        "until Ctrl-C (docs/operating.md).",
    )
    parser.add_argument("--host", help="address to listen on (GATEWAY_HOST; default 127.0.0.1)")
    parser.add_argument("--port", help="port to listen on (GATEWAY_PORT; default 8000)")
    options = parser.parse_args(args)
    return launcher.run(options.host, options.port)


if __name__ == "__main__":
    sys.exit(main())
