"""`python manage.py create_api_key AGENT`: prints a new key as the last line of output."""

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.models import Agent


class Command(BaseCommand):
    help = "Create an API key for an agent. The key is printed once, as the last line; only its hash is kept."

    def add_arguments(self, parser):
        parser.add_argument("agent")
        parser.add_argument("--name", default="", help="a label to tell keys apart in the admin")

    def handle(self, *args, agent, name, **options):
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            known = ", ".join(Agent.objects.values_list("name", flat=True)) or "none (run apply_config first)"
            raise CommandError(f"no agent named {agent!r}; known agents: {known}")
        key, raw = services.api_key_create(agent=found, name=name)
        self.stderr.write(f"Created key {key.key_prefix}… for agent {found.name}. Store it now: it is not shown again.")
        self.stdout.write(raw)
