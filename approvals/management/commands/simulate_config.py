"""`python manage.py simulate_config FILE [--since 7d] [--format text|json]`: the recorded calls replayed
through a draft config, and each whose outcome would change (docs/policies.md, "Trying a config on the past")."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.config_schema import load_config_file
from approvals.management.arguments import ago_or_since_option
from gateway_utils.configfile import ConfigError


class Command(BaseCommand):
    help = (
        "Replay the tool calls recorded since --since (default 7d) through FILE's hooks, changing nothing, and "
        "report each call whose outcome would change (allow / ask / deny) with the counts per tool."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--since", type=ago_or_since_option, default="7d", help="7d, 12h, 30m or an ISO 8601 date")
        parser.add_argument("--format", choices=["text", "json"], default="text")

    def handle(self, *args, file, since, format, **options):
        if isinstance(since, str):  # given to call_command as a keyword: not parsed by argparse
            since = ago_or_since_option(since)
        try:
            config = load_config_file(file)
        except ConfigError as exc:
            for problem in exc.problems:
                self.stderr.write(f"{problem.path}: {problem.message}")
            raise CommandError(f"{file}: {len(exc.problems)} problem(s); nothing was replayed", returncode=2) from None
        report = services.config_simulate(config=config, since=since)
        if format == "json":
            self.stdout.write(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
            return
        for line in report.lines():
            self.stdout.write(line)
