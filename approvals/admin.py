"""The operator's console.

Decisions, key creation and revocation, the read-only switch and hook changes go
through `approvals.services`, like every other path. Audit rows (events,
responses, tool calls, config versions, outbox) are never added, changed or
deleted here; neither are confirmation requests, whose only moves are the
approve / reject / cancel actions.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import yaml
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince, timeuntil

from approvals import exports, selectors, services
from approvals.models import (
    Agent,
    AgentConfigVersion,
    ApiKey,
    ApproverResponse,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    Grant,
    Outbox,
    Status,
    Team,
    ToolCall,
)
from gateway_contract import Callback, get_config_model, secret_keys
from gateway_utils.configfile import ConfigError, InvalidYaml, load_yaml
from hooks.registry import validate_agent_hooks

admin.site.site_header = "Approval gateway"
admin.site.site_title = "Approval gateway admin"
admin.site.index_title = "Operator console"

# Recorded as the channel of decisions made with the admin's actions.
ADMIN_CHANNEL = "admin"


def pretty_json(value: Any) -> str:
    return format_html(
        '<pre style="white-space:pre-wrap;margin:0">{}</pre>',
        json.dumps(value, indent=2, ensure_ascii=False, default=str),
    )


def admin_link(obj: Any, text: str | None = None) -> str:
    if obj is None:
        return "—"
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text or str(obj))


def search_by_uuid(queryset: QuerySet, search_term: str) -> QuerySet:
    """Rows (among those the filters left) whose primary key is the pasted id."""
    try:
        return queryset.filter(pk=uuid.UUID(search_term.strip()))
    except ValueError:
        return queryset.none()


# From a team-owned model to its team, for the choices the admin offers.
TEAM_PATHS: dict[type, str] = {Team: "pk", Agent: "team", Channel: "team"}


def of_users_teams(model: type, request: HttpRequest) -> QuerySet:
    return selectors.of_teams(model.objects.all(), request.user, path=TEAM_PATHS[model])


class TeamsOnlyFilter(admin.RelatedFieldListFilter):
    """A filter of agents, channels or teams that lists only the user's teams' (never another team's names)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        allowed = of_users_teams(field.related_model, request).values("pk")
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(include_blank=False, limit_choices_to={"pk__in": allowed}, ordering=ordering)

    def has_output(self) -> bool:
        return True  # applied even with one choice: a filter by a team not offered lists nothing, not everything


class TeamScoped:
    """Staff of a team administer only it; superusers all (docs/approving.md, "Teams"). Rows of other
    teams are not listed, not found by id (Django's "does not exist"), not reached by an action, and
    not offered as a choice; `team_path` leads from a row to its team."""

    team_path = "agent__team"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return selectors.of_teams(super().get_queryset(request), request.user, path=self.team_path)  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model in TEAM_PATHS:
            kwargs["queryset"] = of_users_teams(db_field.related_model, request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


class ReadOnlyAdmin(admin.ModelAdmin):
    """An audit record: shown, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ActionsOnlyAdmin(admin.ModelAdmin):
    """Rows that change only through the admin actions (services), never through the form.

    Change permission is granted on the list (so the actions show) and refused on
    each object (so its page is view-only and a POST to it is 403).
    """

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --------------------------------------------------------------------------- confirmation requests


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        max_length=2000,
        help_text="Told to the agent; kept in the request's history.",
    )


class ConfirmationEventInline(ReadOnlyInline):
    model = ConfirmationEvent
    verbose_name_plural = "History"
    fields = ("created_at", "kind", "actor", "channel", "message")
    readonly_fields = fields


class ApproverResponseInline(ReadOnlyInline):
    model = ApproverResponse
    verbose_name_plural = "Approver responses"
    fields = ("created_at", "approver", "approver_name", "on_behalf_of_name", "decision", "reason", "channel")
    readonly_fields = fields


class GrantInline(ReadOnlyInline):
    model = Grant
    verbose_name_plural = "Approved for a scope (grants)"
    fields = ("grant", "granted_by", "granted_by_name", "created_at", "expires_at", "uses", "revoked_at", "revoked_by")
    readonly_fields = fields

    @admin.display(description="grant")
    def grant(self, obj: Grant) -> str:
        return admin_link(obj, obj.scope_label)


class ToolCallInline(ReadOnlyInline):
    model = ToolCall
    fk_name = "confirmation"
    verbose_name_plural = "Tool call"
    fields = ("call", "decision", "decided_by_hook", "hook_decisions_table", "outcome", "completed_at")
    readonly_fields = fields

    @admin.display(description="record")
    def call(self, obj: ToolCall) -> str:
        return admin_link(obj, f"{obj.tool_name} · {obj.tool_call_id or obj.pk}")

    @admin.display(description="each hook's decision")
    def hook_decisions_table(self, obj: ToolCall) -> str:
        return hook_decisions_html(obj.hook_decisions)


class OutboxInline(ReadOnlyInline):
    model = Outbox
    verbose_name_plural = "Deliveries (outbox)"
    fields = ("kind", "channel", "status", "attempts", "last_error", "created_at", "sent_at")
    readonly_fields = fields


def hook_decisions_html(decisions: list[dict[str, Any]]) -> str:
    if not decisions:
        return "—"
    rows = format_html_join(
        "",
        "<tr><td><code>{}</code></td><td>{}</td><td><strong>{}</strong></td><td>{}</td></tr>",
        (
            (d.get("hook", ""), d.get("kind", ""), d.get("decision", ""), d.get("reason", ""))
            for d in decisions
            if isinstance(d, dict)
        ),
    )
    return format_html(
        "<table><thead><tr><th>hook</th><th>kind</th><th>decision</th><th>reason</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        rows,
    )


@admin.register(ConfirmationRequest)
class ConfirmationRequestAdmin(TeamScoped, ActionsOnlyAdmin):
    list_display = ("short_id", "status_badge", "agent", "tool_name", "age", "channel", "user_id", "decided_by",
                    "decided_by_name")  # fmt: skip
    list_display_links = ("short_id", "tool_name")
    list_filter = ("status", ("agent__team", TeamsOnlyFilter), ("agent", TeamsOnlyFilter), "tool_name",
                   ("channel", TeamsOnlyFilter), "created_at")  # fmt: skip
    search_fields = ("tool_name", "session_id", "user_id")
    search_help_text = "Search by request id, tool, session or end user."
    list_select_related = ("agent", "channel")
    date_hierarchy = "created_at"
    list_per_page = 50
    actions = ("approve_selected", "reject_selected", "cancel_selected")
    inlines = (ApproverResponseInline, GrantInline, ConfirmationEventInline, ToolCallInline, OutboxInline)
    fieldsets = (
        (None, {"fields": ("id", "status", "agent", "tool_name", "user_id", "session_id", "turn_id",
                           "tool_call_id", "approval_page")}),
        ("Proposed, approved, ran", {"fields": ("arguments", "approved_arguments", "ran_arguments", "editable_paths",
                                                "grant_options")}),
        ("Why it was gated", {"fields": ("reason", "hook_name", "config_version", "channel", "approvers",
                                         "approvals_required", "allow_self_approval")}),
        ("Decision", {"fields": ("decided_by", "decided_by_name", "decided_at", "decision_reason", "created_at",
                                 "expires_at", "time_left", "on_timeout", "warn_at")}),
        ("Reminders, escalation and webhook", {
            "classes": ("collapse",),
            "fields": ("remind_at", "escalate_at", "escalate_channel", "escalate_approvers", "escalated_at",
                       "callback_url"),
        }),
        ("Metadata", {"classes": ("collapse",), "fields": ("metadata_pretty",)}),
    )
    readonly_fields = (
        "id", "status", "agent", "tool_name", "arguments", "user_id", "session_id", "turn_id", "tool_call_id",
        "approval_page", "reason", "hook_name", "config_version", "channel", "approvers", "approvals_required",
        "allow_self_approval", "decided_by", "decided_by_name", "decided_at", "decision_reason", "created_at",
        "expires_at", "warn_at", "approved_arguments", "ran_arguments", "editable_paths", "grant_options",
        "time_left", "on_timeout", "remind_at", "escalate_at", "escalate_channel", "escalate_approvers",
        "escalated_at", "callback_url", "metadata_pretty",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip():
            results = results | search_by_uuid(queryset, search_term)
        return results, may_have_duplicates

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Confirmation requests", **(extra_context or {})})

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: ConfirmationRequest) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: ConfirmationRequest) -> str:
        colours = {"pending": "#fff3cd", "approved": "#d1f2d9", "rejected": "#f8d7da"}
        return format_html(
            '<span style="background:{};color:#1d2330;padding:1px 8px;border-radius:9px">{}</span>',
            colours.get(obj.status, "#e2e3e5"),
            obj.get_status_display(),
        )

    @admin.display(description="age", ordering="-created_at")
    def age(self, obj: ConfirmationRequest) -> str:
        return timesince(obj.created_at, timezone.now())

    @admin.display(description="proposed by the agent (as stored)")
    def arguments(self, obj: ConfirmationRequest) -> str:
        return pretty_json(obj.tool_args)

    @admin.display(description="approved")
    def approved_arguments(self, obj: ConfirmationRequest) -> str:
        if not obj.edited:
            return "as proposed" if obj.status == Status.APPROVED else "—"
        return format_html("<strong>edited</strong> ({}){}", ", ".join(sorted(obj.arg_edits)), pretty_json(obj.approved_args))

    @admin.display(description="ran (post-tool-use)")
    def ran_arguments(self, obj: ConfirmationRequest) -> str:
        call = ToolCall.objects.filter(confirmation=obj).first()
        if call is None or call.ran_args is None:
            return "not reported"
        return pretty_json(call.ran_args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: ConfirmationRequest) -> str:
        return pretty_json(obj.metadata)

    @admin.display(description="approval page")
    def approval_page(self, obj: ConfirmationRequest) -> str:
        url = reverse("approval-page", args=[obj.pk])
        return format_html('<a href="{}">{}</a> (decide there with a reason)', url, selectors.confirmation_url(obj))

    @admin.display(description="time left")
    def time_left(self, obj: ConfirmationRequest) -> str:
        if obj.status != Status.PENDING:
            return "—"
        if obj.expires_at is None:
            return "no deadline"
        return timeuntil(obj.expires_at, timezone.now())

    # -- actions: every decision through the exactly-once service, recorded as this staff user

    @admin.action(description="Approve selected pending requests", permissions=["change"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._respond(request, queryset, decision="approve", reason="")

    @admin.action(description="Reject selected pending requests…", permissions=["change"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        return self._with_reason(request, queryset, action="reject_selected", title="Reject requests",
                                 button="Reject", decision="reject")  # fmt: skip

    @admin.action(description="Cancel selected pending requests…", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        return self._with_reason(request, queryset, action="cancel_selected", title="Cancel requests",
                                 button="Cancel them", decision="cancel")  # fmt: skip

    def _with_reason(
        self, request: HttpRequest, queryset: QuerySet, *, action: str, title: str, button: str, decision: str
    ) -> HttpResponse | None:
        """Ask for the reason on an intermediate page, then apply; None returns to the list."""
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            if decision == "cancel":
                self._cancel(request, queryset, reason=form.cleaned_data["reason"])
            else:
                self._respond(request, queryset, decision=decision, reason=form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "queryset": queryset,
            "pending": [c for c in queryset.select_related("agent") if c.status == Status.PENDING],
            "form": form,
            "action": action,
            "button": button,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "admin/approvals/confirmationrequest/action_reason.html", context)

    def _respond(self, request: HttpRequest, queryset: QuerySet, *, decision: str, reason: str) -> None:
        actor = request.user.get_username()
        codes: Counter[str] = Counter()
        refusals: list[str] = []
        for pk in queryset.values_list("pk", flat=True):
            outcome = services.confirmation_respond(
                channel_name=ADMIN_CHANNEL,
                callback=Callback(confirmation_id=str(pk), decision=decision, actor=actor, reason=reason),
                as_admin=True,
                actor_kind="admin",  # recorded as admin:<username>
                with_card=False,
            )
            codes[outcome.code] += 1
            if not outcome.applied:
                refusals.append(f"{str(pk)[:8]}: {outcome.message}")
        done = codes["decided"]
        verb = "Approved" if decision == "approve" else "Rejected"
        if done:
            self.message_user(
                request, f"{verb} {done} request{'s' if done != 1 else ''} as admin:{actor}.", messages.SUCCESS
            )
        if codes["recorded"]:
            self.message_user(
                request,
                f"Recorded your approval on {codes['recorded']} request(s) that need more approvals.",
                messages.SUCCESS,
            )
        if refusals:
            self.message_user(request, "Left unchanged — " + " ".join(refusals), messages.WARNING)

    def _cancel(self, request: HttpRequest, queryset: QuerySet, *, reason: str) -> None:
        actor = request.user.get_username()
        cancelled, unchanged = 0, 0
        for pk in queryset.values_list("pk", flat=True):
            if services.confirmation_cancel_by_staff(confirmation_id=pk, actor=actor, reason=reason):
                cancelled += 1
            else:
                unchanged += 1
        if cancelled:
            self.message_user(request, f"Cancelled {cancelled} request(s) as admin:{actor}.", messages.SUCCESS)
        if unchanged:
            self.message_user(request, f"{unchanged} request(s) were already decided; left unchanged.", messages.WARNING)


@admin.register(ConfirmationEvent)
class ConfirmationEventAdmin(TeamScoped, ReadOnlyAdmin):
    team_path = "confirmation__agent__team"
    list_display = ("created_at", "kind", "actor", "channel", "confirmation_link", "message")
    list_filter = ("kind", "channel", "created_at")
    search_fields = ("actor", "message")
    list_select_related = ("confirmation",)

    @admin.display(description="request")
    def confirmation_link(self, obj: ConfirmationEvent) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.tool_name} {str(obj.confirmation_id)[:8]}")


@admin.register(ApproverResponse)
class ApproverResponseAdmin(TeamScoped, ReadOnlyAdmin):
    team_path = "confirmation__agent__team"
    list_display = (
        "created_at", "approver", "approver_name", "on_behalf_of_name", "decision", "channel", "confirmation_link", "reason"
    )
    list_filter = ("decision", "channel")
    search_fields = ("approver", "approver_name", "reason")
    list_select_related = ("confirmation",)

    @admin.display(description="request")
    def confirmation_link(self, obj: ApproverResponse) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.tool_name} {str(obj.confirmation_id)[:8]}")


# --------------------------------------------------------------------------- tool calls and outbox


@admin.register(ToolCall)
class ToolCallAdmin(TeamScoped, ReadOnlyAdmin):
    list_display = ("created_at", "agent", "tool_name", "decision", "decided_by_hook", "user_id", "session_id",
                    "outcome", "confirmation_link")  # fmt: skip
    list_filter = ("decision", ("agent__team", TeamsOnlyFilter), ("agent", TeamsOnlyFilter), "tool_name", "outcome",
                   "created_at")  # fmt: skip
    search_fields = ("tool_name", "session_id", "user_id", "tool_call_id")
    search_help_text = "Search by tool call id, tool, session or end user."
    list_select_related = ("agent", "confirmation")
    date_hierarchy = "created_at"
    fields = readonly_fields = (
        "id", "agent", "session_id", "turn_id", "tool_call_id", "tool_name", "arguments", "ran_arguments", "user_id",
        "metadata_pretty", "decision", "reason", "decided_by_hook", "each_hooks_decision", "config_version",
        "confirmation_link", "grant_link", "idempotency_key", "created_at", "outcome", "result_pretty", "result_size",
        "duration_ms", "completed_at",
    )  # fmt: skip

    change_list_template = "admin/approvals/toolcall/change_list.html"

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip():
            results = results | search_by_uuid(queryset, search_term)
        return results, may_have_duplicates

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_view)
        return [path("export/", export, name="approvals_toolcall_export"), *super().get_urls()]

    def export_view(self, request: HttpRequest) -> StreamingHttpResponse:
        """The list as filtered (filters, search, dates), streamed as `export_audit` writes it (docs/audit.md)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        request.GET = request.GET.copy()
        fmt = request.GET.pop("format", ["jsonl"])[-1]
        if fmt not in exports.FORMATS:
            fmt = "jsonl"
        queryset = self.get_changelist_instance(request).get_queryset(request)
        lines = exports.export_lines(exports.audit_records(queryset), fmt)
        if isinstance(request, ASGIRequest):  # served by the ASGI server: stream without a list in between
            lines = exports.export_lines_async(lines)
        response = StreamingHttpResponse(lines, content_type=exports.CONTENT_TYPES[fmt])
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="tool-calls-{stamp}.{fmt}"'
        return response

    @admin.display(description="tool arguments (as stored)")
    def arguments(self, obj: ToolCall) -> str:
        return pretty_json(obj.tool_args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: ToolCall) -> str:
        return pretty_json(obj.metadata)

    @admin.display(description="ran with (post-tool-use, as stored)")
    def ran_arguments(self, obj: ToolCall) -> str:
        return pretty_json(obj.ran_args) if obj.ran_args is not None else "not reported"

    @admin.display(description="allowed by grant")
    def grant_link(self, obj: ToolCall) -> str:
        return admin_link(obj.grant, obj.grant.scope_label) if obj.grant else "—"

    @admin.display(description="result")
    def result_pretty(self, obj: ToolCall) -> str:
        return pretty_json(obj.result) if obj.result is not None else "—"

    @admin.display(description="each hook's decision")
    def each_hooks_decision(self, obj: ToolCall) -> str:
        return hook_decisions_html(obj.hook_decisions)

    @admin.display(description="confirmation request")
    def confirmation_link(self, obj: ToolCall) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.status} {str(obj.confirmation_id)[:8]}") if obj.confirmation else "—"


@admin.register(Grant)
class GrantAdmin(TeamScoped, ActionsOnlyAdmin):
    """Approvals for a scope: listed, and revoked here (the revoke action); never edited."""

    list_display = ("short_id", "state", "agent", "tool_name", "session_id", "user_id", "scope_label", "granted_by",
                    "granted_by_name", "created_at", "expires_at", "uses")  # fmt: skip
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "scope", ("agent", TeamsOnlyFilter), "tool_name")
    search_fields = ("tool_name", "session_id", "user_id", "granted_by", "granted_by_name")
    list_select_related = ("agent", "confirmation")
    actions = ("revoke_selected",)
    fields = readonly_fields = (
        "id", "agent", "session_id", "user_id", "tool_name", "gate", "scope_label", "args_fingerprint", "granted_by",
        "granted_by_name", "channel", "source_request", "created_at", "expires_at", "uses", "last_used_at",
        "revoked_at", "revoked_by", "calls_allowed",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="id")
    def short_id(self, obj: Grant) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="state")
    def state(self, obj: Grant) -> str:
        if obj.revoked_at:
            return f"revoked by {obj.revoked_by}"
        if obj.expires_at and obj.expires_at <= timezone.now():
            return "expired"
        return "live"

    @admin.display(description="scope")
    def scope_label(self, obj: Grant) -> str:
        return obj.scope_label

    @admin.display(description="from the request")
    def source_request(self, obj: Grant) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.tool_name} {str(obj.confirmation_id)[:8]}")

    @admin.display(description="calls it allowed")
    def calls_allowed(self, obj: Grant) -> str:
        calls = list(obj.tool_calls.order_by("created_at")[:50])
        if not calls:
            return "none yet"
        return format_html_join(", ", "{}", ((admin_link(c, str(c.created_at)[:19]),) for c in calls))

    @admin.action(description="Revoke selected grants (they stop at once)", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        actor = f"admin:{request.user.get_username()}"
        revoked = sum(services.grant_revoke(grant_id=pk, actor=actor) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Revoked {revoked} grant(s) as {actor}.", messages.SUCCESS)


@admin.register(Outbox)
class OutboxAdmin(TeamScoped, ReadOnlyAdmin):
    team_path = "confirmation__agent__team"
    list_display = ("id", "kind", "channel", "status", "attempts", "last_error", "next_attempt_at", "created_at",
                    "sent_at", "confirmation_link")  # fmt: skip
    list_filter = ("status", "kind", ("channel", TeamsOnlyFilter))
    search_fields = ("dedupe_key", "last_error")
    list_select_related = ("channel", "confirmation")

    @admin.display(description="request")
    def confirmation_link(self, obj: Outbox) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.tool_name} {str(obj.confirmation_id)[:8]}")


# --------------------------------------------------------------------------- agents and their hooks


def hooks_as_text(hooks: list[dict[str, Any]]) -> str:
    """An agent's stored hooks as YAML for editing, defaults left out (they are filled in on save)."""
    try:
        validated = validate_agent_hooks(hooks, check_outbound=False)  # shown, not applied
        compact = [h.model_dump(mode="json", exclude_defaults=True) for h in validated]
    except ConfigError:
        compact = hooks  # stored under an older schema: show it as it is
    if not compact:
        return "[]\n"
    return yaml.safe_dump(compact, sort_keys=False, allow_unicode=True, default_flow_style=False)


class AgentForm(forms.ModelForm):
    # Optional: left out, a new agent is in the default team (`services.agent_create`).
    hooks = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 22, "cols": 90, "spellcheck": "false",
                                     "style": "font-family:monospace;font-size:13px"}),  # fmt: skip
        help_text=(
            "This agent's hook list in YAML or JSON, exactly as under <code>agents[].hooks</code> in the "
            "config file. Validated like <code>apply_config</code>; a change is saved as a new config version."
        ),
    )

    class Meta:
        model = Agent
        fields = ("name", "team", "read_only")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        current = self.instance.current_config if self.instance.pk else None
        self.fields["hooks"].initial = hooks_as_text(current.hooks if current else [])
        if "team" in self.fields:
            self.fields["team"].required = False
        self.validated_hooks: list[Any] = []

    def clean_hooks(self) -> str:
        """Read the YAML with the config file's own loader and validate it with the one validator;
        `save_model` applies it through `services.agent_hooks_apply`, which validates again under a lock."""
        text = self.cleaned_data.get("hooks") or ""
        try:
            data = load_yaml(text, path="hooks") if text.strip() else []
        except InvalidYaml as exc:
            where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
            raise ValidationError(f"hooks: not valid YAML or JSON{where}: {exc.problem}") from None
        try:
            if data is None:
                data = []
            if isinstance(data, dict) and set(data) == {"hooks"}:
                data = data["hooks"] or []  # pasted with its `hooks:` key from the config file
            validate_agent_hooks(data, channel_names=selectors.channel_names())
        except ConfigError as exc:
            raise ValidationError([f"{p.path}: {p.message}" for p in exc.problems]) from None
        self.validated_hooks = data
        return text


class AgentConfigVersionInline(ReadOnlyInline):
    model = AgentConfigVersion
    verbose_name_plural = "Hook configuration history"
    fields = ("version", "created_at", "source", "hooks_summary")
    readonly_fields = fields
    ordering = ("-version",)
    show_change_link = True

    @admin.display(description="hooks")
    def hooks_summary(self, obj: AgentConfigVersion) -> str:
        return ", ".join(f"{h.get('name') or h.get('kind')} ({h.get('kind')})" for h in obj.hooks) or "none"


class ApiKeyInline(ReadOnlyInline):
    model = ApiKey
    verbose_name_plural = "API keys"
    fields = ("key_prefix", "name", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    show_change_link = True


@admin.register(Agent)
class AgentAdmin(TeamScoped, admin.ModelAdmin):
    team_path = "team"
    form = AgentForm
    list_display = ("name", "team", "read_only", "config_version", "live_keys", "created_at")
    list_filter = (("team", TeamsOnlyFilter), "read_only")
    search_fields = ("name",)
    actions = ("read_only_on", "read_only_off")
    inlines = (AgentConfigVersionInline, ApiKeyInline)

    def get_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        if obj is None:
            return ["name", "team", "read_only", "hooks"]
        return ["name", "team", "read_only", "config_version", "hooks", "webhook_secret_masked", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("name", "team", "config_version", "webhook_secret_masked", "created_at")

    def has_delete_permission(self, request: HttpRequest, obj: Agent | None = None) -> bool:
        return False  # its requests and tool calls are the audit trail

    @admin.display(description="hooks version")
    def config_version(self, obj: Agent) -> str:
        current = obj.current_config
        return f"v{current.version}" if current else "none"

    @admin.display(description="live API keys")
    def live_keys(self, obj: Agent) -> int:
        return obj.api_keys.filter(revoked_at__isnull=True).count()

    @admin.display(description="webhook secret")
    def webhook_secret_masked(self, obj: Agent) -> str:
        return format_html(
            "<details><summary>{}</summary><code>{}</code></details>"
            '<div class="help">Signs the decision webhooks sent to this agent\'s callback_url.</div>',
            mask(obj.webhook_secret),
            obj.webhook_secret,
        )

    def save_model(self, request: HttpRequest, obj: Agent, form: AgentForm, change: bool) -> None:
        if not change:
            created = services.agent_create(
                name=obj.name, read_only=form.cleaned_data["read_only"], team=form.cleaned_data["team"]
            )
            obj.pk, obj.webhook_secret, obj.created_at = created.pk, created.webhook_secret, created.created_at
        elif "read_only" in form.changed_data:
            services.agent_set_read_only(agent=obj, read_only=form.cleaned_data["read_only"])
        try:
            version = services.agent_hooks_apply(
                agent=obj, hooks=form.validated_hooks, source=f"admin:{request.user.get_username()}"
            )
        except ConfigError as exc:  # a channel removed since the form was checked
            self.message_user(request, "Hooks not saved: " + str(exc), messages.ERROR)
            return
        if version is not None:
            self.message_user(request, f"Hooks of {obj.name} saved as version {version.version}.", messages.SUCCESS)

    @admin.action(description="Switch read-only ON (block write tools)", permissions=["change"])
    def read_only_on(self, request: HttpRequest, queryset: QuerySet) -> None:
        for agent in queryset:
            services.agent_set_read_only(agent=agent, read_only=True)
        self.message_user(request, f"Read-only switched on for {queryset.count()} agent(s).", messages.SUCCESS)

    @admin.action(description="Switch read-only OFF", permissions=["change"])
    def read_only_off(self, request: HttpRequest, queryset: QuerySet) -> None:
        for agent in queryset:
            services.agent_set_read_only(agent=agent, read_only=False)
        self.message_user(request, f"Read-only switched off for {queryset.count()} agent(s).", messages.SUCCESS)


@admin.register(AgentConfigVersion)
class AgentConfigVersionAdmin(TeamScoped, ReadOnlyAdmin):
    list_display = ("agent", "version", "source", "created_at")
    list_filter = (("agent", TeamsOnlyFilter),)
    fields = readonly_fields = ("agent", "version", "source", "created_at", "hooks_pretty")

    @admin.display(description="hooks (normalised, as stored)")
    def hooks_pretty(self, obj: AgentConfigVersion) -> str:
        return pretty_json(obj.hooks)


# --------------------------------------------------------------------------- API keys


@admin.register(ApiKey)
class ApiKeyAdmin(TeamScoped, ActionsOnlyAdmin):
    list_display = ("key", "agent", "name", "created_at", "last_used_at", "state")
    list_filter = (("agent__team", TeamsOnlyFilter), ("agent", TeamsOnlyFilter), ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("key_prefix", "name", "agent__name")
    list_select_related = ("agent",)
    actions = ("revoke_selected",)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return ["agent", "name"]
        return ["key", "agent", "name", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        return () if obj is None else ("key", "agent", "name", "created_at", "last_used_at", "revoked_at")

    @admin.display(description="key", ordering="key_prefix")
    def key(self, obj: ApiKey) -> str:
        return f"{obj.key_prefix}…"

    @admin.display(description="state")
    def state(self, obj: ApiKey) -> str:
        return f"revoked {timesince(obj.revoked_at, timezone.now())} ago" if obj.revoked_at else "live"

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        if change:
            return  # keys are never edited; they are revoked
        key, raw = services.api_key_create(agent=obj.agent, name=obj.name)
        obj.pk, obj.key_prefix, obj.created_at = key.pk, key.key_prefix, key.created_at
        self.message_user(
            request,
            format_html(
                "New API key for agent {}: <code>{}</code> — copy it now; it is stored hashed and "
                "will not be shown again.",
                obj.agent.name,
                raw,
            ),
            messages.WARNING,
        )

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        live = list(queryset.filter(revoked_at__isnull=True))
        for key in live:
            services.api_key_revoke(api_key=key)
        self.message_user(request, f"Revoked {len(live)} key(s).", messages.SUCCESS)


# --------------------------------------------------------------------------- channels


def mask(value: Any) -> str:
    text = str(value)
    if not text:
        return ""
    return "••••••" + (text[-4:] if len(text) >= 16 else "")


def masked_config(channel: Channel) -> dict[str, Any]:
    """The channel's config with the keys its kind marks as secret masked (every key, for an unknown kind)."""
    config = channel.config if isinstance(channel.config, dict) else {}
    try:
        secrets = secret_keys(get_config_model(channel.kind))
    except ValueError:
        secrets = frozenset(config)
    return {k: mask(v) if k in secrets and v not in (None, "") else v for k, v in config.items()}


@admin.register(Channel)
class ChannelAdmin(TeamScoped, ReadOnlyAdmin):
    """Channels come from the config file (`manage.py apply_config`); here they are shown with their health."""

    team_path = "team"
    list_display = ("name", "kind", "team", "last_delivery_error", "last_error_at", "settings_masked")
    list_filter = ("kind", ("team", TeamsOnlyFilter))
    search_fields = ("name",)
    fields = readonly_fields = ("name", "kind", "team", "config_masked", "last_error", "last_error_at", "created_at")

    @admin.display(description="last delivery error", ordering="last_error_at")
    def last_delivery_error(self, obj: Channel) -> str:
        return obj.last_error or "—"

    @admin.display(description="settings")
    def settings_masked(self, obj: Channel) -> str:
        items = masked_config(obj)
        return ", ".join(f"{k}={v}" for k, v in items.items() if v not in (None, "", [], {})) or "—"

    @admin.display(description="config (secrets masked)")
    def config_masked(self, obj: Channel) -> str:
        return pretty_json(masked_config(obj))


# --------------------------------------------------------------------------- teams


@admin.register(Team)
class TeamAdmin(TeamScoped, admin.ModelAdmin):
    """Teams are made and staffed by superusers; a team's staff see their team here."""

    team_path = "pk"
    list_display = ("name", "everyone", "agent_count", "channel_count", "group_list", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)
    fields = ("name", "everyone", "members", "group_list")
    readonly_fields = ("group_list",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser and (obj is None or not (obj.agents.exists() or obj.channels.exists()))

    @admin.display(description="agents")
    def agent_count(self, obj: Team) -> int:
        return obj.agents.count()

    @admin.display(description="channels")
    def channel_count(self, obj: Team) -> int:
        return obj.channels.count()

    @admin.display(description="groups (their members are members; a group's team is set on the group)")
    def group_list(self, obj: Team) -> str:
        return ", ".join(obj.groups.values_list("name", flat=True)) if obj.pk else "—"


from approvals import people_admin, sign_in_admin  # noqa: E402,F401  (the people directory's, the sign-in links')
