"""Hook configs over the API: the JSON Schema (public), and for staff, validating and applying.

Only Django staff users may change a policy — by HTTP Basic or a session, never
with an agent's API key: an agent must not be able to change its own rules.
Every change goes through the one service (`services.agent_hooks_apply`: lock,
validate, version); a refused config answers 400 with each problem as
`{"path", "message"}` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiTypes, extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals import selectors, services
from approvals.api.schema import error_responses
from approvals.api.views import StrictSerializer
from approvals.config_schema import config_json_schema, parse_config_text
from approvals.errors import GatewayError, InvalidInput, NotFound
from approvals.models import Agent
from gateway_utils.configfile import ConfigError
from hooks.registry import KNOWN_KINDS

SEE_SCHEMA = (
    "validated whole like the config file (docs/reference/config.md; its JSON Schema: GET /api/v1/hooks/schema)"
)
# What the OpenAPI document says of a config's shape: each hook names a known kind, a file has only its two
# lists. Each kind's keys are in the config's own JSON Schema; rules no schema can state (a gate's channel
# exists, `when` is valid CEL, a regex compiles) are checked too, and refused as 400 `invalid_config`.
HOOK_LIST = {
    "type": "array",
    "items": {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": list(KNOWN_KINDS)}}},
    "description": f"The ordered hook list, {SEE_SCHEMA}.",
}
CONFIG_FILE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "channels": {"type": "array", "items": {"type": "object", "required": ["name", "kind"]}},
        "agents": {
            "type": "array",
            "items": {"type": "object", "required": ["name"], "properties": {"hooks": HOOK_LIST}},
        },
    },
    "description": f"A whole config file (YAML, or JSON, which is YAML too), {SEE_SCHEMA}.",
}


@extend_schema_field(HOOK_LIST)
class HookListField(serializers.ListField):
    """An agent's hook list (objects; validated whole by `services.agent_hooks_apply`)."""

    child = serializers.DictField()


class ConfigInvalid(GatewayError):
    status = 400
    code = "invalid_config"

    def __init__(self, error: ConfigError):
        count = len(error.problems)
        super().__init__(
            f"{count} problem{'s' if count != 1 else ''} in the config; nothing was changed",
            details=[{"path": problem.path, "message": problem.message} for problem in error.problems],
        )


class StaffOnly:
    """Staff users by HTTP Basic or session; agent API keys are not accepted here."""

    authentication_classes = [BasicAuthentication, SessionAuthentication]
    permission_classes = [IsAdminUser]


class HooksSchemaApi(APIView):
    """The config file's JSON Schema, for editors' autocompletion (same as `manage.py hooks_schema`)."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="JSON Schema of the config file and its hooks")
    def get(self, request):
        return Response(config_json_schema())


def _agent_config(agent: Agent) -> dict[str, Any]:
    current = agent.current_config
    return {
        "agent": agent.name,
        "read_only": agent.read_only,
        "version": current.version if current else 0,
        "hooks": current.hooks if current else [],
    }


class AgentHooksApi(StaffOnly, APIView):
    """Read or replace one agent's hooks. A replacement is validated whole and becomes a new version."""

    class AgentHooksInput(StrictSerializer):
        hooks = HookListField()

    output = inline_serializer(
        "AgentHooks",
        {
            "agent": serializers.CharField(),
            "read_only": serializers.BooleanField(),
            "version": serializers.IntegerField(),
            "hooks": serializers.ListField(child=serializers.DictField()),
            "changed": serializers.BooleanField(required=False),
        },
    )

    @extend_schema(
        responses={200: output, **error_responses(401, 403, 404)}, summary="An agent's current hooks and their version"
    )
    def get(self, request, name):
        return Response(_agent_config(_agent(name, request.user)))

    @extend_schema(
        request=AgentHooksInput,
        responses={200: output, **error_responses(400, 401, 403, 404)},
        summary="Validate and apply an agent's hooks",
    )
    def put(self, request, name):
        if not isinstance(request.data, dict) or set(request.data) != {"hooks"}:
            raise InvalidInput('the body must be a JSON object with one key, "hooks"')
        agent = _agent(name, request.user)
        try:
            version = services.agent_hooks_apply(
                agent=agent, hooks=request.data["hooks"], source=f"api:{request.user.get_username()}"
            )
        except ConfigError as exc:
            raise ConfigInvalid(exc) from None
        return Response({**_agent_config(agent), "changed": version is not None})


class ConfigValidateApi(StaffOnly, APIView):
    """Validate a whole config file, as `manage.py apply_config --check` would on this server.

    The body is the file itself (YAML, or JSON, which is YAML too); `${NAME}`
    is substituted from the server's environment. Nothing is applied.
    """

    @extend_schema(
        request={"application/yaml": CONFIG_FILE, "application/json": CONFIG_FILE},
        responses={
            200: inline_serializer(
                "ConfigValid",
                {
                    "valid": serializers.BooleanField(),
                    "channels": serializers.ListField(child=serializers.CharField()),
                    "agents": serializers.ListField(child=serializers.CharField()),
                },
            ),
            **error_responses(400, 401, 403),
        },
        summary="Validate a config file",
    )
    def post(self, request):
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("the body must be UTF-8 text") from None
        try:
            config = parse_config_text(text)
        except ConfigError as exc:
            raise ConfigInvalid(exc) from None
        return Response(
            {
                "valid": True,
                "channels": [channel.name for channel in config.channels],
                "agents": [agent.name for agent in config.agents],
            }
        )


def _agent(name: str, user: Any) -> Agent:
    """The agent named, if it is of one of `user`'s teams (staff of a team administer only it)."""
    agent = selectors.of_teams(Agent.objects.filter(name=name), user, path="team").first()
    if agent is None:
        raise NotFound(f"no agent named {name!r}")
    return agent
