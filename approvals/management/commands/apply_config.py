"""`python manage.py apply_config FILE`: validate the whole file, then apply it in one transaction."""

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.config_schema import load_config_file
from gateway_utils.configfile import ConfigError


class Command(BaseCommand):
    help = "Apply a gateway config file (channels, agents and their hooks). Idempotent; all or nothing."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--check", action="store_true", help="only validate; change nothing")

    def handle(self, *args, file, check, **options):
        try:
            config = load_config_file(file)
        except ConfigError as exc:
            for problem in exc.problems:
                self.stderr.write(f"{problem.path}: {problem.message}")
            raise CommandError(f"{file}: {len(exc.problems)} problem(s); nothing was changed") from None
        if check:
            self.stdout.write(f"{file}: valid")
            return
        summary = services.config_apply(config=config, source=f"apply_config {file}")
        for line in summary.lines():
            self.stdout.write(line)
