"""`python manage.py describe_toolcall ID [--json]`: one tool call in full, for audits."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from approvals import selectors
from approvals.errors import NotFound


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


class Command(BaseCommand):
    help = (
        "Show one tool call in full: its arguments, each hook's decision with the config version it ran "
        "under, the approval and its events, the result and the timings. ID is the record's UUID, or an "
        "agent's tool_call_id that names one record."
    )

    def add_arguments(self, parser):
        parser.add_argument("id")
        parser.add_argument("--json", action="store_true", help="print the record as one JSON document")

    def handle(self, *args, id: str, **options):
        try:
            audit = selectors.tool_call_audit(tool_call_id=id)
        except NotFound as exc:
            raise CommandError(exc.message) from None
        if options["json"]:
            self.stdout.write(_json(audit))
            return
        self.stdout.write("\n".join(self._lines(audit)))

    def _lines(self, a: dict[str, Any]) -> list[str]:
        out = [
            f"Tool call {a['id']}",
            f"  agent          {a['agent']}",
            f"  session        {a['session_id'] or '-'}",
            f"  turn           {a['turn_id'] or '-'}",
            f"  tool_call_id   {a['tool_call_id'] or '-'}",
            f"  tool           {a['tool_name']}",
            f"  user           {a['user_id'] or '-'}",
            f"  idempotency    {a['idempotency_key'] or '-'}",
            f"  decision       {a['decision']} by {a['decided_by_hook'] or '-'} (config v{a['config_version']})",
            f"  reason         {a['reason'] or '-'}",
            "Arguments proposed (as stored)",
            *self._indent(_json(a["tool_args"])),
        ]
        grant = a["allowed_by_grant"]
        if grant is not None:
            out.append(
                f"Allowed by grant {grant['id']}: {grant['scope']}, granted by {grant['granted_by']}"
                f" ({grant['granted_by_name']}) at {grant['at']} on request {grant['request']}"
            )
        if a["metadata"]:
            out += ["Metadata", *self._indent(_json(a["metadata"]))]
        out.append("Hook decisions")
        if not a["hook_decisions"]:
            out.append("  (no hook applied)")
        for d in a["hook_decisions"]:
            attempt = f" attempt {d['attempt']}" if "attempt" in d else ""
            reason = f": {d['reason']}" if d.get("reason") else ""
            out.append(
                f"  [{d['event']}{attempt}] {d['hook']} ({d.get('kind', '?')}, config v{d['config_version']}) "
                f"→ {d['decision']}{reason}"
            )
        approval = a["approval"]
        if approval is None:
            out.append("Approval: none")
        else:
            out += [
                f"Approval {approval['id']}",
                f"  status         {approval['status']}",
                f"  gate           {approval['gate']} (config v{approval['config_version']}) on {approval['channel']}",
                f"  approvers      {', '.join(approval['approvers']) or 'any member'}"
                f" ({approval['approvals_required']} required)",
                f"  decided        {approval['decided_by'] or '-'}"
                + (f" ({approval['decided_by_name']})" if approval["decided_by_name"] else "")
                + f" at {approval['decided_at'] or '-'}"
                + (f": {approval['decision_reason']}" if approval["decision_reason"] else ""),
                f"  expires        {approval['expires_at'] or 'never'}",
            ]
            if approval["edited"]:
                out += [
                    f"  approved       EDITED ({', '.join(approval['edited_paths'])}); the agent ran:",
                    *["    " + line for line in _json(approval["approved_args"]).splitlines()],
                ]
            for g in approval["grants"]:
                state = f"revoked {g['revoked_at']}" if g["revoked_at"] else f"until {g['expires_at'] or 'the session ends'}"
                out.append(f"  granted        {g['scope']} by {g['granted_by']} at {g['at']}, {state}, used {g['uses']}×")
            out.append("  events")
            for e in approval["events"]:
                who = " ".join(part for part in (e["actor"], f"via {e['channel']}" if e["channel"] else "") if part)
                message = f": {e['message']}" if e["message"] else ""
                out.append(f"    {e['at']}  {e['kind']}{' ' + who if who else ''}{message}")
        out += [
            "Completion",
            f"  outcome        {a['outcome'] or 'not completed'}",
            f"  result size    {a['result_size'] if a['result_size'] is not None else '-'} characters",
            f"  duration       {a['duration_ms'] if a['duration_ms'] is not None else '-'} ms",
            f"  created        {a['created_at']}",
            f"  completed      {a['completed_at'] or '-'}",
        ]
        if a["ran_args"] is not None:
            out += ["Ran with (post-tool-use, as stored)", *self._indent(_json(a["ran_args"]))]
        if a["outcome"]:
            out += ["Result (as stored)", *self._indent(_json(a["result"]))]
        return out

    @staticmethod
    def _indent(text: str) -> list[str]:
        return ["  " + line for line in text.splitlines()]
