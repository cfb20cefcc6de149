"""The agent API (docs/reference/api.md): one APIView per operation, thin callers of services.

`wait_seconds` on pre-tool-use and the `/wait` long-poll are served by the
thin ASGI layer in `approvals.api.asgi` without holding a thread; the
views here answer at once (the `/wait` view is the same wait, for non-ASGI use).
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals import selectors, services
from approvals.api.schema import callback_url_pattern, error_responses
from approvals.errors import InvalidInput
from approvals.waiting import parse_timeout, wait_for_final
from gateway_contract import answers
from gateway_utils.outbound import OutboundRefused, check_url


def storable_text(value: str) -> bool:
    """Whether PostgreSQL can store this string: UTF-8 encodable (no lone surrogates) and no NUL."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unstorable_path(value: Any, path: str = "") -> str | None:
    """Where in a JSON value a string (key or value) is not `storable_text`, or None."""
    if isinstance(value, str):
        return None if storable_text(value) else (path or "the value")
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if not storable_text(str(key)):
                return f"a key in {path or 'the object'}"
            found = unstorable_path(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


class StrictCharField(serializers.CharField):
    """A string, and only a string: 5 is a type error, not "5". Never NUL (U+0000) or a lone surrogate.
    Kept exactly as sent (no trimming): ids are opaque, and the record is what was asked."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if not storable_text(data):
            raise serializers.ValidationError("must not contain NUL (U+0000) characters or lone surrogates")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer, and only an integer: "5", 1.5 and true are type errors; 5.0 is 5, as JSON Schema
    counts it (the OpenAPI document says `integer`)."""

    def to_internal_value(self, data):
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class JsonObjectField(serializers.DictField):
    """A JSON object whose strings PostgreSQL can store (no NUL, no lone surrogates)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        where = unstorable_path(value)
        if where:
            raise serializers.ValidationError(f"{where}: must not contain NUL (U+0000) characters or lone surrogates")
        return value


class JsonValueField(serializers.JSONField):
    """Any JSON value whose strings PostgreSQL can store."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        where = unstorable_path(value)
        if where:
            raise serializers.ValidationError(f"{where}: must not contain NUL (U+0000) characters or lone surrogates")
        return value


def _nested(field: serializers.Field) -> bool:
    """A field holding other fields (a serializer, a list's or dict's child)."""
    return isinstance(field, serializers.BaseSerializer) or hasattr(field, "child")


def _holds_serializer(field: serializers.Field) -> bool:
    """A serializer, or a list or dict of them."""
    return isinstance(field, serializers.BaseSerializer) or isinstance(getattr(field, "child", None), serializers.BaseSerializer)


_SHARED_FIELDS: dict[type, Any] = {}  # StrictSerializer class -> its fields, bound once


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a typo is an error rather than ignored, and a body giving both
    fields of an `exclusive` pair (the OpenAPI document says so too: `approvals.api.schema`)."""

    exclusive: tuple[tuple[str, str], ...] = ()  # pairs of fields a body may give one of, not both

    def get_fields(self):
        # DRF deep-copies every declared field for each serializer, which re-runs each field's
        # __init__. A flat field keeps no per-call state, so a shallow copy (to bind to this
        # serializer) is enough; nested ones are still deep-copied.
        return {
            name: copy.deepcopy(field) if _nested(field) else copy.copy(field)
            for name, field in self._declared_fields.items()
        }  # fmt: skip

    @functools.cached_property
    def fields(self):
        # Copying and binding the fields anew for every body still cost ~140 µs of a pre-tool-use call
        # (two thirds of its validation). Fields keep no state of the call — it is the serializer's —
        # and read their serializer only for its context and `partial`: a serializer of its own (not a
        # field of another), with neither and no serializer among its fields, uses its class's fields,
        # bound once to an instance that never holds data.
        if self.parent is not None or self._context or self.partial or any(map(_holds_serializer, self._declared_fields.values())):
            return serializers.Serializer.fields.func(self)
        cls = type(self)
        shared = _SHARED_FIELDS.get(cls)
        if shared is None:
            shared = _SHARED_FIELDS[cls] = serializers.Serializer.fields.func(cls())
        return shared

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError({k: ["unknown field"] for k in sorted(unknown)})
        for first, second in self.exclusive:
            if first in self.initial_data and second in self.initial_data:
                raise serializers.ValidationError({second: [f"give {first} or {second}, not both"]})
        return attrs


class CallbackUrlField(StrictCharField):
    """The decision webhook's URL (`callback_url_pattern`), under the outbound guard: a host that is
    a non-public address is refused now, a name again when the webhook connects."""

    def __init__(self, **kwargs):
        super().__init__(max_length=2000, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value:
            try:
                check_url(value)
            except OutboundRefused as exc:
                raise serializers.ValidationError(f"refused: {exc.message}") from None
            if not re.fullmatch(callback_url_pattern(), value):
                raise serializers.ValidationError(
                    "must be an http or https URL naming its host (docs/reference/api.md)"
                )
        return value


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
    risk = serializers.ChoiceField(
        choices=["low", "medium", "high"], help_text="How risky the call is, as its gate or policy rated it."
    )
    url = serializers.URLField()


class HookDecisionOutput(serializers.Serializer):
    hook = serializers.CharField()
    kind = serializers.CharField()
    decision = serializers.CharField()
    reason = serializers.CharField()


class StrictFloatField(serializers.FloatField):
    """A number, and only a number: "5" and true are type errors."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class PreToolUseApi(APIView):
    @extend_schema_serializer(component_name="PreToolUseInput")
    class InputSerializer(StrictSerializer):
        session_id = StrictCharField(min_length=1, max_length=200)
        tool_name = StrictCharField(min_length=1, max_length=200)
        tool_args = JsonObjectField(required=False, default=dict)
        tool_call_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        turn_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        user_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        metadata = JsonObjectField(required=False, default=dict)
        idempotency_key = StrictCharField(
            max_length=255, required=False, allow_blank=True, allow_null=True, default=None,
            help_text="The same key from the same agent answers the same (docs/reference/api.md); blank = none.",
        )  # fmt: skip
        wait_seconds = StrictIntegerField(
            min_value=0, max_value=settings.GATEWAY_WAIT_MAX_SECONDS, required=False, default=0
        )
        callback_url = CallbackUrlField(required=False, allow_blank=True, default="")

    @extend_schema_serializer(component_name="PreToolUseOutput")
    class OutputSerializer(serializers.Serializer):
        decision = serializers.ChoiceField(choices=["allow", "deny", "pending", "skip"])
        tool_args = serializers.DictField()
        reason = serializers.CharField()
        confirmation_id = serializers.UUIDField(allow_null=True)
        side_effects = serializers.ListField(child=serializers.CharField())
        hook_decisions = HookDecisionOutput(many=True)
        result = serializers.JSONField(required=False)

    @extend_schema(
        request=InputSerializer,
        responses={200: OutputSerializer, **error_responses(400, 401, 422)},
        summary="Ask before a tool call",
    )
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
            idempotency_key=data["idempotency_key"] or None,
            callback_url=data["callback_url"],
            fingerprint=services.request_fingerprint(request.data),
        )
        return Response(answer.as_dict())


CONFIRMATION_ID = OpenApiParameter(
    "confirmation_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The request's id (`confirmation_id`)."
)


class ConfirmationDetailApi(APIView):
    @extend_schema(
        parameters=[CONFIRMATION_ID],
        responses={200: ConfirmationOutput, **error_responses(401, 404)},
        summary="One confirmation request",
    )
    def get(self, request, confirmation_id):
        confirmation = selectors.confirmation_for_agent(agent=request.user, confirmation_id=confirmation_id)
        return Response(selectors.confirmation_as_dict(confirmation))


class ConfirmationWaitApi(APIView):
    """Long-poll. Under ASGI this path is served by `approvals.api.asgi` without a thread."""

    @extend_schema(
        parameters=[
            CONFIRMATION_ID,
            OpenApiParameter(
                "timeout",
                {"type": "number", "minimum": 0, "maximum": settings.GATEWAY_WAIT_MAX_SECONDS},
                description="Seconds to hold the request (default 25, or GATEWAY_WAIT_MAX_SECONDS if that is less).",
            ),
        ],
        responses={200: ConfirmationOutput, **error_responses(400, 401, 404)},
        summary="Wait for a decision",
    )
    def get(self, request, confirmation_id):
        confirmation = selectors.confirmation_for_agent(agent=request.user, confirmation_id=confirmation_id)
        timeout = parse_timeout(request.query_params.get("timeout"))
        final = async_to_sync(wait_for_final)(confirmation_id=confirmation.pk, agent_id=request.user.pk, timeout=timeout)
        return Response(selectors.confirmation_as_dict(final or confirmation))


class ConfirmationCancelApi(APIView):
    @extend_schema(
        parameters=[CONFIRMATION_ID],
        request=None,
        responses={200: ConfirmationOutput, **error_responses(401, 404, 409)},
        summary="Withdraw a pending request",
    )
    def post(self, request, confirmation_id):
        confirmation = services.confirmation_cancel(agent=request.user, confirmation_id=confirmation_id)
        return Response(selectors.confirmation_as_dict(confirmation))


HOOK_EVENT_ANSWER = inline_serializer(
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
)


class HookEventInput(StrictSerializer):
    session_id = StrictCharField(min_length=1, max_length=200)
    turn_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    tool_name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    tool_args = JsonObjectField(required=False, default=dict)
    tool_call_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    user_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    metadata = JsonObjectField(required=False, default=dict)
    result = JsonValueField(required=False, allow_null=True, default=None)
    error = StrictCharField(required=False, allow_blank=True, default="")
    attempt = StrictIntegerField(min_value=1, max_value=10_000, required=False, default=1)
    # Durations are stored in milliseconds as a 32-bit integer: at most 2147483647 ms (24.8 days).
    elapsed_seconds = StrictFloatField(min_value=0, max_value=2_147_483, required=False, default=0.0)
    duration_ms = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True, default=None)
    outcome = serializers.ChoiceField(choices=["success", "error"], required=False, default="success")


class CompletionEventInput(HookEventInput):
    """After a call: which call is required (the `tool_call_id` its pre-tool-use gave)."""

    tool_call_id = StrictCharField(min_length=1, max_length=200)


class HookEventApi(APIView):
    """The lifecycle events around the tool calls: session-start, pre-turn, post-turn, session-end
    (docs/reference/api.md)."""

    event: str = ""
    InputSerializer: type[StrictSerializer] = HookEventInput

    @extend_schema(
        request=HookEventInput,
        responses={200: HOOK_EVENT_ANSWER, **error_responses(400, 401)},
        summary="Run the hooks of one lifecycle event",
    )
    def post(self, request):
        return self.run(request)

    def run(self, request):
        if not isinstance(request.data, dict):
            raise InvalidInput("the body must be a JSON object")
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answer = services.hook_event_run(agent=request.user, event=self.event, **serializer.validated_data)
        return Response(answer)


class CompletionEventApi(HookEventApi):
    """post-tool-use and tool-error: about one call a pre-tool-use allowed (404 if never announced,
    409 if never allowed)."""

    InputSerializer = CompletionEventInput

    @extend_schema(
        request=CompletionEventInput,
        responses={200: HOOK_EVENT_ANSWER, **error_responses(400, 401, 404, 409)},
        summary="Report how an allowed tool call went",
    )
    def post(self, request):
        return self.run(request)


# --------------------------------------------------------------------------- questions (docs/asking.md)


@extend_schema_field(
    {
        "description": "The answer given (answered), or the question's default_answer once it expired "
        "(defaulted); null while pending, once cancelled, or when it expired without a default."
    }
)
class AnswerField(serializers.JSONField):
    pass


class QuestionOutput(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=["pending", "answered", "expired", "cancelled", "rejected"],
        help_text="rejected: its card could not be delivered anywhere (`reason` says why).",
    )
    question = serializers.CharField()
    answer = AnswerField()
    defaulted = serializers.BooleanField(help_text="True once the question expired unanswered: `answer` is the default.")
    answered_by = serializers.CharField(allow_null=True, help_text="Channel-qualified: slack:U…, feishu:ou_…, web:<user>.")
    answered_by_name = serializers.CharField(allow_null=True)
    answered_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="Why it ended, once final (expiry, cancel).")
    expires_at = serializers.DateTimeField(allow_null=True)
    url = serializers.URLField(help_text="The question's web page, where it can be answered.")


class EscalateToInput(serializers.Serializer):
    channel = StrictCharField(min_length=1, max_length=64)
    approvers = serializers.ListField(child=StrictCharField(min_length=1, max_length=200), max_length=50, default=list)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        return super().to_internal_value(data)


@extend_schema_field(
    {
        **answers.openapi_schema(),
        "description": "The answer's JSON Schema, in the subset docs/asking.md lists: a choice "
        "(`{type: string, enum}`), several choices (`{type: array, items: {type: string, enum}}`), text "
        "(`{type: string, maxLength}`), a number (`{type: number|integer, minimum, maximum}`), yes/no "
        "(`{type: boolean}`), or a form of up to 8 of these (`{type: object, properties, required}`). "
        "Checked beyond its shape too (minimum <= maximum, required names the form's fields): a 400 says what.",
    }
)
class AnswerSchemaField(JsonObjectField):
    pass


class QuestionCreateApi(APIView):
    @extend_schema_serializer(component_name="QuestionInput")
    class InputSerializer(StrictSerializer):
        exclusive = (("channel", "gate"),)
        question = StrictCharField(min_length=1, max_length=4000)
        answer_schema = AnswerSchemaField()
        channel = StrictCharField(
            min_length=1, max_length=64, required=False, default="",
            help_text="The channel that asks (its name). Default: the channel of `gate`.",
        )  # fmt: skip
        gate = StrictCharField(
            min_length=1, max_length=100, required=False, default="",
            help_text="Without a channel: the agent's approval gate whose channel, approvers, reminder and "
            "escalation the question uses (default: its first).",
        )  # fmt: skip
        approvers = serializers.ListField(
            child=StrictCharField(min_length=1, max_length=200), max_length=50, required=False, default=None,
            help_text="Channel-native ids of who may answer; empty: any member. Default: the gate's, or any member.",
        )  # fmt: skip
        timeout_seconds = StrictIntegerField(
            min_value=1, max_value=30 * 24 * 3600, required=False, allow_null=True, default=3600,
            help_text="Seconds until the question expires (null: never).",
        )  # fmt: skip
        default_answer = JsonValueField(
            required=False, allow_null=True, default=None,
            help_text="What the agent gets if nobody answers in time; must fit answer_schema.",
        )  # fmt: skip
        session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        user_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        metadata = JsonObjectField(required=False, default=dict)
        callback_url = CallbackUrlField(required=False, allow_blank=True, default="")
        remind_after_seconds = StrictIntegerField(min_value=1, max_value=30 * 24 * 3600, required=False, default=None)
        warn_before_seconds = StrictIntegerField(min_value=1, max_value=30 * 24 * 3600, required=False, default=None)
        escalate_after_seconds = StrictIntegerField(min_value=1, max_value=30 * 24 * 3600, required=False, default=None)
        escalate_to = EscalateToInput(required=False, default=None)
        wait_seconds = StrictIntegerField(
            min_value=0, max_value=settings.GATEWAY_WAIT_MAX_SECONDS, required=False, default=0,
            help_text="Hold the answer until the question is final or this many seconds pass.",
        )  # fmt: skip

    @extend_schema(
        request=InputSerializer,
        responses={201: QuestionOutput, **error_responses(400, 401)},
        summary="Ask a human a question",
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise InvalidInput("the body must be a JSON object")
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        escalate = data["escalate_to"] or {}
        question = services.question_create(
            agent=request.user,
            text=data["question"],
            answer_schema=data["answer_schema"],
            channel=data["channel"],
            gate=data["gate"],
            approvers=data["approvers"],
            timeout_seconds=data["timeout_seconds"],
            default_answer=data["default_answer"],
            session_id=data["session_id"],
            user_id=data["user_id"],
            metadata=data["metadata"],
            callback_url=data["callback_url"],
            remind_after_seconds=data["remind_after_seconds"],
            warn_before_seconds=data["warn_before_seconds"],
            escalate_after_seconds=data["escalate_after_seconds"],
            escalate_channel=escalate.get("channel", ""),
            escalate_approvers=escalate.get("approvers", []),
        )
        return Response(selectors.question_as_dict(question), status=201)


QUESTION_ID = OpenApiParameter("question_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The question's id.")


class QuestionDetailApi(APIView):
    @extend_schema(
        parameters=[QUESTION_ID], responses={200: QuestionOutput, **error_responses(401, 404)}, summary="One question"
    )
    def get(self, request, question_id):
        question = selectors.question_for_agent(agent=request.user, question_id=question_id)
        return Response(selectors.question_as_dict(question))


class QuestionWaitApi(APIView):
    """Long-poll. Under ASGI this path is served by `approvals.api.asgi` without a thread."""

    @extend_schema(
        parameters=[
            QUESTION_ID,
            OpenApiParameter(
                "timeout",
                {"type": "number", "minimum": 0, "maximum": settings.GATEWAY_WAIT_MAX_SECONDS},
                description="Seconds to hold the request (default 25, or GATEWAY_WAIT_MAX_SECONDS if that is less).",
            ),
        ],
        responses={200: QuestionOutput, **error_responses(400, 401, 404)},
        summary="Wait for an answer",
    )
    def get(self, request, question_id):
        question = selectors.question_for_agent(agent=request.user, question_id=question_id)
        timeout = parse_timeout(request.query_params.get("timeout"))
        final = async_to_sync(wait_for_final)(confirmation_id=question.pk, agent_id=request.user.pk, timeout=timeout)
        return Response(selectors.question_as_dict(final or question))


class QuestionCancelApi(APIView):
    @extend_schema(
        parameters=[QUESTION_ID],
        request=None,
        responses={200: QuestionOutput, **error_responses(401, 404, 409)},
        summary="Withdraw a pending question",
    )
    def post(self, request, question_id):
        question = selectors.question_for_agent(agent=request.user, question_id=question_id)
        question = services.confirmation_cancel(agent=request.user, confirmation_id=question.pk, kind="question")
        return Response(selectors.question_as_dict(question))
