"""`python manage.py hooks_schema`: print the config file's JSON Schema, for editors."""

import json
from typing import Any

from django.core.management.base import BaseCommand

from approvals.config_schema import config_json_schema


class Command(BaseCommand):
    help = "Print the JSON Schema of the gateway's config file (channels, agents, hooks)."
    requires_system_checks: list[str] = []  # printing a schema needs no database, URLs or secrets

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps(config_json_schema(), indent=2))
