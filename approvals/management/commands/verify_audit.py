"""`python manage.py verify_audit [--since DATE] [--agent NAME] [--expect-head H|FILE]… [--resign]`:
prove the record (docs/audit.md)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals.audit import ExpectedHead, audit_verify, heads_from_text, resign_chains, sign_decisions
from approvals.management.arguments import agent_by_name, since_option
from gateway_utils import metrics


def expected_heads(values: list[str]) -> list[ExpectedHead]:
    """`--expect-head` values: `<agent>@<seq>:<hash>`, or a file of them (the beat checkpoint's, or
    `export_audit --heads`)."""
    heads = []
    for value in values:
        try:
            if "@" in value and not Path(value).exists():
                heads.append(ExpectedHead.parse(value))
            else:
                heads += heads_from_text(Path(value).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"--expect-head {value}: {exc}") from None
    return heads


class Command(BaseCommand):
    help = (
        "Walk every agent's audit chain, recompute each entry's signature (HMAC under the audit key), check "
        "every tool call and confirmation event against the latest entry about it and every decision row "
        "against its signature, and — with --expect-head — that each chain still reaches the heads recorded "
        "outside the database. Exits non-zero naming the first entry or row that was changed, removed or "
        "inserted; prints each chain's head otherwise."
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", type=since_option, help="check only what was written since DATE (ISO 8601)")
        parser.add_argument("--agent", help="check only this agent's chain")
        parser.add_argument(
            "--expect-head",
            action="append",
            default=[],
            metavar="H",
            help="a head recorded earlier, `<agent>@<seq>:<hash>` (as printed here and by export_audit), or a file "
            "of them (GATEWAY_AUDIT_HEADS_FILE, export_audit --heads); repeatable. The chain must still hold it.",
        )
        parser.add_argument(
            "--resign",
            action="store_true",
            help="after a key rotation: if everything verifies (old keys listed in GATEWAY_AUDIT_OLD_KEYS), sign "
            "every entry and decision row again under GATEWAY_AUDIT_KEY, so the old keys can be dropped",
        )

    def handle(self, *args, since=None, agent=None, expect_head=(), resign=False, **options):
        chosen = agent_by_name(agent)
        heads = expected_heads(list(expect_head))
        result = audit_verify(since=since, agent=chosen, expected_heads=heads)
        # Seen by /metrics when this process shares the servers' PROMETHEUS_MULTIPROC_DIR (docs/operating.md).
        metrics.audit_verified(ok=result.ok, partial=since is not None or chosen is not None)
        for problem in sorted(result.problems)[:50]:
            self.stderr.write(f"problem: {problem.message}")
        if len(result.problems) > 50:
            self.stderr.write(f"… and {len(result.problems) - 50} more problems")
        if not result.ok:
            first = result.first
            raise CommandError(f"the audit does not verify; first problem: {first.message if first else '?'}")
        if resign:
            if since is not None or chosen is not None:
                raise CommandError("--resign signs everything: it takes neither --since nor --agent")
            with transaction.atomic():
                entries = resign_chains()
                rows = sign_decisions(only_valid=True)
            self.stdout.write(f"signed again under the current key: {entries} entries, {rows} decision rows")
            result = audit_verify()
        for name, (seq, head) in sorted(result.heads.items()):
            self.stdout.write(f"{name}: head #{seq} {head}  (--expect-head {name}@{seq}:{head})")
        if heads:
            self.stdout.write(f"recorded heads checked: {len(heads)}")
        self.stdout.write(
            f"audit verified: {result.chains} chain(s), {result.entries} entries, {result.rows} rows checked"
        )
