"""`python manage.py verify_audit [--since DATE] [--agent NAME]`: prove the record (docs/audit.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from approvals.audit import audit_verify
from approvals.management.arguments import agent_by_name, since_option
from gateway import metrics


class Command(BaseCommand):
    help = (
        "Walk every agent's audit chain, recompute each entry, and check every tool call and confirmation "
        "event against the latest entry about it. Exits non-zero naming the first entry or row that was "
        "changed, removed or inserted; prints each chain's head otherwise."
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", type=since_option, help="check only what was written since DATE (ISO 8601)")
        parser.add_argument("--agent", help="check only this agent's chain")

    def handle(self, *args, since=None, agent=None, **options):
        chosen = agent_by_name(agent)
        result = audit_verify(since=since, agent=chosen)
        # Seen by /metrics when this process shares the servers' PROMETHEUS_MULTIPROC_DIR (docs/operating.md).
        metrics.audit_verified(ok=result.ok, partial=since is not None or chosen is not None)
        for problem in sorted(result.problems)[:50]:
            self.stderr.write(f"problem: {problem.message}")
        if len(result.problems) > 50:
            self.stderr.write(f"… and {len(result.problems) - 50} more problems")
        if not result.ok:
            first = result.first
            raise CommandError(f"the audit does not verify; first problem: {first.message if first else '?'}")
        for name, (seq, head) in sorted(result.heads.items()):
            self.stdout.write(f"{name}: head #{seq} {head}")
        self.stdout.write(
            f"audit verified: {result.chains} chain(s), {result.entries} entries, {result.rows} rows checked"
        )
