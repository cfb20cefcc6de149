"""`python manage.py set_read_only AGENT on|off`: the switch readonly_guard hooks obey."""

from django.core.management.base import BaseCommand, CommandError

from approvals import services
from approvals.models import Agent


class Command(BaseCommand):
    help = "Turn an agent's read-only switch on or off."

    def add_arguments(self, parser):
        parser.add_argument("agent")
        parser.add_argument("state", choices=["on", "off"])

    def handle(self, *args, agent, state, **options):
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            raise CommandError(f"no agent named {agent!r}")
        services.agent_set_read_only(agent=found, read_only=state == "on")
        self.stdout.write(f"{found.name}: read-only {state}")
