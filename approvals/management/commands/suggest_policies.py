"""`python manage.py suggest_policies [--min-approvals N] [--days T] [--agent NAME]`: what people always
approved, as config YAML to adopt through `apply_config` (docs/policies.md, "Learning from what people approved")."""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.management.arguments import agent_by_name
from approvals.models import Agent


def _positive(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {raw!r}")
    return value


class Command(BaseCommand):
    help = (
        "Print, as config YAML, the patterns of calls (agent, tool, arguments' shape and ranges) approved at least "
        "--min-approvals times and never rejected in the last --days days, each with the number of past calls it "
        "would have allowed. Applies nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--min-approvals", type=_positive, default=10)
        parser.add_argument("--days", type=_positive, default=30)
        parser.add_argument("--agent", help="only this agent's calls")

    def handle(self, *args, min_approvals, days, agent=None, **options):
        chosen = agent_by_name(agent)
        agents = Agent.objects.filter(pk=chosen.pk) if chosen is not None else Agent.objects.all()
        if days > 3660:
            raise CommandError("--days: at most 3660", returncode=2)
        found = services.policies_suggest(min_approvals=min_approvals, days=days, agents=agents)
        self.stdout.write(found.yaml(), ending="")
        self.stderr.write(f"suggest_policies: {len(found.suggestions)} suggestion(s)")
