"""`python manage.py demo_setup`: what `make run` does before starting: apply the
example config, create a demo staff login (embedded defaults only) and a demo API key."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from approvals import services
from approvals.models import Agent

DEMO_USER = "admin"
DEMO_PASSWORD = "admin"


class Command(BaseCommand):
    help = "Prepare the first-run demo: config, a staff login and an API key."

    def add_arguments(self, parser):
        parser.add_argument("--config", default=settings.GATEWAY_CONFIG or "examples/gateway.yaml")
        parser.add_argument("--agent", default="demo-agent")

    def handle(self, *args, config, agent, **options):
        call_command("apply_config", config, stdout=self.stdout, stderr=self.stderr)
        lines = []
        if not settings.IS_POSTGRES:
            User = get_user_model()
            if not User.objects.filter(username=DEMO_USER).exists():
                User.objects.create_superuser(DEMO_USER, "admin@example.com", DEMO_PASSWORD)
            lines.append(f"Admin login:     {DEMO_USER} / {DEMO_PASSWORD}   (demo only: embedded defaults)")
        found = Agent.objects.filter(name=agent).first()
        if found is not None:
            _, raw = services.api_key_create(agent=found, name="make run demo")
            lines.append(f"Demo API key:    {raw}   (agent {found.name})")
        base = settings.GATEWAY_PUBLIC_URL
        self.stdout.write("")
        self.stdout.write(f"Gateway:         {base}/   (pending approvals: {base}/approvals/)")
        self.stdout.write(f"Admin:           {base}/admin/")
        for line in lines:
            self.stdout.write(line)
        if found is not None:
            self.stdout.write(
                f"Play an agent:   GATEWAY_URL={base} GATEWAY_API_KEY={raw} .venv/bin/python examples/agent_demo.py"
            )
