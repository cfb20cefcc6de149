"""The agent API (docs/reference/api.md): one APIView per operation, thin callers of services.

`wait_seconds` on pre-tool-use and the `/wait` long-poll are served by the
thin ASGI layer in `approvals.api.longpoll` without holding a thread; the
views here answer at once (the `/wait` view is the same wait, for non-ASGI use).
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals import selectors, services
from approvals.errors import InvalidInput
from approvals.waiting import parse_timeout, wait_for_final


class StrictCharField(serializers.CharField):
    """A string, and only a string: 5 is a type error, not "5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer, and only an integer: "5" and true are type errors."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a typo is an error rather than ignored."""

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError({k: ["unknown field"] for k in sorted(unknown)})
        return attrs


class ConfirmationOutput(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=["pending", "approved", "rejected", "expired", "cancelled"])
    tool_name = serializers.CharField()
    tool_args = serializers.DictField()
    reason = serializers.CharField()
    decided_by = serializers.CharField(
        allow_null=True, help_text="Channel-qualified: slack:U…, feishu:ou_…, web:<user>, admin:<user>, gateway, agent:<name>."
    )
    decided_by_name = serializers.CharField(allow_null=True, help_text="The decider's display name.")
    decided_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    edited = serializers.BooleanField(help_text="The approver changed the arguments before approving.")
    approved_args = serializers.DictField(allow_null=True, help_text="What was approved, when edited (as stored).")
    url = serializers.URLField()


class HookDecisionOutput(serializers.Serializer):
    hook = serializers.CharField()
    kind = serializers.CharField()
    decision = serializers.CharField()
    reason = serializers.CharField()


class PreToolUseApi(APIView):
    @extend_schema_serializer(component_name="PreToolUseInput")
    class InputSerializer(StrictSerializer):
        session_id = StrictCharField(max_length=200)
        tool_name = StrictCharField(max_length=200)
        tool_args = serializers.DictField(required=False, default=dict)
        tool_call_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        turn_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        user_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        metadata = serializers.DictField(required=False, default=dict)
        idempotency_key = StrictCharField(max_length=255, required=False, allow_null=True, default=None)
        wait_seconds = StrictIntegerField(min_value=0, required=False, default=0)
        callback_url = serializers.URLField(max_length=2000, required=False, allow_blank=True, default="")

        def validate_wait_seconds(self, value: int) -> int:
            if value > settings.GATEWAY_WAIT_MAX_SECONDS:
                raise serializers.ValidationError(f"must be at most {settings.GATEWAY_WAIT_MAX_SECONDS}")
            return value

    @extend_schema_serializer(component_name="PreToolUseOutput")
    class OutputSerializer(serializers.Serializer):
        decision = serializers.ChoiceField(choices=["allow", "deny", "pending", "skip"])
        tool_args = serializers.DictField()
        reason = serializers.CharField()
        confirmation_id = serializers.UUIDField(allow_null=True)
        side_effects = serializers.ListField(child=serializers.CharField())
        hook_decisions = HookDecisionOutput(many=True)
        result = serializers.JSONField(required=False)

    @extend_schema(request=InputSerializer, responses=OutputSerializer, summary="Ask before a tool call")
    def post(self, request):
        if not isinstance(request.data, dict):
            raise InvalidInput("the body must be a JSON object")
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        answer = services.tool_call_pre(
            agent=request.user,
            session_id=data["session_id"],
            tool_name=data["tool_name"],
            tool_args=data["tool_args"],
            tool_call_id=data["tool_call_id"],
            turn_id=data["turn_id"],
            user_id=data["user_id"],
            metadata=data["metadata"],
            idempotency_key=data["idempotency_key"],
            callback_url=data["callback_url"],
            fingerprint=services.request_fingerprint(request.data),
        )
        return Response(answer.as_dict())


class ConfirmationDetailApi(APIView):
    @extend_schema(responses=ConfirmationOutput, summary="One confirmation request")
    def get(self, request, confirmation_id):
        confirmation = selectors.confirmation_for_agent(agent=request.user, confirmation_id=confirmation_id)
        return Response(selectors.confirmation_as_dict(confirmation))


class ConfirmationWaitApi(APIView):
    """Long-poll. Under ASGI this path is served by `approvals.api.longpoll` without a thread."""

    @extend_schema(
        parameters=[OpenApiParameter("timeout", int, description="seconds to hold the request (default 25)")],
        responses=ConfirmationOutput,
        summary="Wait for a decision",
    )
    def get(self, request, confirmation_id):
        confirmation = selectors.confirmation_for_agent(agent=request.user, confirmation_id=confirmation_id)
        timeout = parse_timeout(request.query_params.get("timeout"))
        final = async_to_sync(wait_for_final)(confirmation_id=confirmation.pk, agent_id=request.user.pk, timeout=timeout)
        return Response(selectors.confirmation_as_dict(final or confirmation))


class ConfirmationCancelApi(APIView):
    @extend_schema(request=None, responses=ConfirmationOutput, summary="Withdraw a pending request")
    def post(self, request, confirmation_id):
        confirmation = services.confirmation_cancel(agent=request.user, confirmation_id=confirmation_id)
        return Response(selectors.confirmation_as_dict(confirmation))


class HookEventApi(APIView):
    """The lifecycle events other than pre-tool-use (docs/reference/api.md)."""

    event: str = ""

    @extend_schema_serializer(component_name="HookEventInput")
    class InputSerializer(StrictSerializer):
        session_id = StrictCharField(max_length=200)
        turn_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        tool_name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        tool_args = serializers.DictField(required=False, default=dict)
        tool_call_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        user_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        metadata = serializers.DictField(required=False, default=dict)
        result = serializers.JSONField(required=False, default=None)
        error = StrictCharField(required=False, allow_blank=True, default="")
        attempt = StrictIntegerField(min_value=1, required=False, default=1)
        elapsed_seconds = serializers.FloatField(min_value=0, required=False, default=0.0)
        duration_ms = StrictIntegerField(min_value=0, required=False, allow_null=True, default=None)
        outcome = serializers.ChoiceField(choices=["success", "error"], required=False, default="success")

    @extend_schema(
        request=InputSerializer,
        responses=inline_serializer(
            "HookEventAnswer",
            {
                "decision": serializers.CharField(required=False),
                "reason": serializers.CharField(required=False),
                "result": serializers.JSONField(required=False),
                "messages": serializers.ListField(child=serializers.DictField(), required=False),
                "action": serializers.CharField(required=False),
                "delay_seconds": serializers.FloatField(required=False),
                "side_effects": serializers.ListField(child=serializers.CharField()),
            },
        ),
        summary="Run the hooks of one lifecycle event",
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise InvalidInput("the body must be a JSON object")
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answer = services.hook_event_run(agent=request.user, event=self.event, **serializer.validated_data)
        return Response(answer)
