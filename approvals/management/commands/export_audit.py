"""`python manage.py export_audit --format jsonl|csv [--since DATE] [--agent NAME] [--team NAME] [--output FILE] [--heads FILE]`."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from approvals.audit import current_heads, heads_line
from approvals.exports import FORMATS, audit_records, export_lines, filtered_tool_calls
from approvals.management.arguments import agent_by_name, since_option, team_by_name

PROGRESS_EVERY = 1000


class Command(BaseCommand):
    help = (
        "Stream the audit record, one tool call per record: what was asked, every hook's decision with the "
        "config version, who decided, what ran. JSON Lines or CSV (cells guarded against formula injection); "
        "progress on stderr; constant memory. docs/audit.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, required=True)
        parser.add_argument("--since", type=since_option, help="only tool calls created since DATE (ISO 8601)")
        parser.add_argument("--agent", help="only this agent's tool calls")
        parser.add_argument("--team", help="only the tool calls of this team's agents")
        parser.add_argument("--output", help="write to this file instead of stdout")
        parser.add_argument(
            "--heads",
            help="also write each chain's head at the start of the export to this file (one JSON line), to keep "
            "outside the database for `verify_audit --expect-head FILE`",
        )

    def handle(self, *args, format: str, since=None, agent=None, team=None, output=None, heads=None, **options):
        chosen = agent_by_name(agent)
        recorded = current_heads(chosen)  # before the records: every record exported is at or below them
        records = audit_records(filtered_tool_calls(since=since, agent=chosen, team=team_by_name(team)))
        count, started = 0, time.monotonic()

        def counted():
            nonlocal count
            for record in records:
                yield record
                count += 1
                if count % PROGRESS_EVERY == 0:
                    rate = count / max(time.monotonic() - started, 1e-9)
                    self.stderr.write(f"export_audit: {count} records ({rate:.0f}/s)")

        with open(output, "w", newline="", encoding="utf-8") if output else _Stdout(self.stdout) as out:
            for piece in export_lines(counted(), format):
                out.write(piece)
        for head in recorded:
            self.stderr.write(f"export_audit: chain head {head} (keep it; verify_audit --expect-head {head})")
        self.stderr.write(f"export_audit: {count} records written")
        if heads:
            with open(heads, "a", encoding="utf-8") as out:
                out.write(heads_line(recorded) + "\n")


class _Stdout:
    """The command's stdout as a plain text file (no line endings added), for `with`."""

    def __init__(self, wrapper) -> None:
        self.wrapper = wrapper

    def write(self, text: str) -> None:
        self.wrapper.write(text, ending="")

    def __enter__(self) -> _Stdout:
        return self

    def __exit__(self, *exc) -> None:
        self.wrapper.flush()
