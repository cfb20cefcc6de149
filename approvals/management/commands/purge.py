"""`python manage.py purge --older-than DAYS`: retention that keeps the audit verifiable (docs/audit.md)."""

from __future__ import annotations

import argparse
import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.errors import GatewayError


def days(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of days, not {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Command(BaseCommand):
    help = (
        "Remove tool calls, confirmation requests (with their events, responses and deliveries) and audit "
        "entries older than DAYS days; each agent's chain is cut at a checkpoint so verify_audit still "
        "passes. Refuses, changing nothing, if the audit does not verify first."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=days, required=True, metavar="DAYS")

    def handle(self, *args, older_than: int, **options):
        try:
            result = services.audit_purge(older_than=dt.timedelta(days=older_than))
        except GatewayError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"purged records older than {result.cutoff.isoformat()}: {result.tool_calls_removed} tool calls, "
            f"{result.confirmations_removed} confirmation requests, {result.entries_removed} audit entries "
            f"({result.chains_cut} chains cut at a checkpoint; {result.entries_retained} kept rows re-linked)"
        )
