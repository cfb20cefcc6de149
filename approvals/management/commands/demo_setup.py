"""`python manage.py demo_setup`: what `make run` (`approval-gateway run`) does before starting: apply
the demo config (the clone's examples/gateway.yaml, packaged as gateway/demo/gateway.yaml), create a demo
staff login (embedded defaults only) and a demo API key, then print where to go — and how to try it:
the clone's demo agent, or, installed from the wheel (no examples/ at hand), the client's install line
and a curl."""

from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from approvals import selectors, services
from approvals.models import Agent

DEMO_USER = "admin"
DEMO_PASSWORD = "admin"
DEMO_KEY_NAME = "make run demo"
# The call the welcome's curl makes: gated by the demo config's `ask-a-human`.
DEMO_CALL = (
    '{"session_id": "demo", "tool_name": "oa__purchase_pay", '
    '"tool_args": {"invoice_id": "INV-2024-0117", "amount": 80}, "wait_seconds": 30}'
)


def demo_key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo_api_key"


def demo_api_key(agent: Agent) -> str:
    """The demo key kept in var/ across runs (so the printed command keeps working); a new one if it no longer works."""
    path = demo_key_file()
    if path.exists():
        raw = path.read_text().strip()
        found = selectors.api_key_lookup(raw_key=raw)
        if found is not None and found.agent_id == agent.pk:
            return raw
    _, raw = services.api_key_create(agent=agent, name=DEMO_KEY_NAME)
    path.write_text(raw + "\n")
    path.chmod(0o600)
    return raw


def shown_path(path: Path) -> str:
    """Relative to the project folder when inside it (`.venv/bin/python`, `var/demo_api_key`)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Command(BaseCommand):
    help = "Prepare the first-run demo: config, a staff login and an API key; print where to go."

    def add_arguments(self, parser):
        parser.add_argument("--config", default=settings.GATEWAY_CONFIG or str(settings.GATEWAY_DEMO_CONFIG))
        parser.add_argument("--agent", default="demo-agent")

    def handle(self, *args, config, agent, **options):
        call_command("apply_config", config, stdout=self.stdout, stderr=self.stderr)
        base = settings.GATEWAY_PUBLIC_URL
        out = self.stdout.write
        out("")
        out(self.style.SUCCESS("The gateway is starting. Where to go:"))
        out(f"  Gateway:         {base}/")
        out(f"  Approvals inbox: {base}/approvals/")
        out(f"  Admin:           {base}/admin/")
        if not settings.IS_POSTGRES:
            User = get_user_model()
            if not User.objects.filter(username=DEMO_USER).exists():
                User.objects.create_superuser(DEMO_USER, "admin@example.com", DEMO_PASSWORD)
            out(f"  Sign in as:      {DEMO_USER} / {DEMO_PASSWORD}   (demo staff login; embedded defaults only)")
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            out(f"  (no agent {agent!r} in {config}: no demo API key)")
            return
        raw = demo_api_key(found)
        out(f"  Demo API key:    {raw}   (agent {found.name}; kept in {shown_path(demo_key_file())})")
        if settings.GATEWAY_CHECKOUT:
            out("  Play an agent that asks to pay an invoice, then approve or reject it on the page it prints:")
            out(f"    GATEWAY_URL={base} GATEWAY_API_KEY={raw} {shown_path(Path(sys.executable))} examples/agent_demo.py")
        else:
            out(f"  Ask as the demo agent to pay an invoice (it waits for a human), then decide at {base}/approvals/:")
            out(f"    curl -s {base}/api/v1/hooks/pre-tool-use -H 'Authorization: Bearer {raw}' \\")
            out(f"      -H 'Content-Type: application/json' -d '{DEMO_CALL}'")
            out("  Gate your own agent's tools with the client (Python; `npm install @approval-gateway/client` for TypeScript):")
            out("    pip install approval-gateway-client")
        out("")
