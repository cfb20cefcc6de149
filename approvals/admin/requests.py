"""Confirmation requests in the admin, and what is written beside them: their history (events), the
approvers' responses, their deliveries (outbox).

A request's only moves are the approve / reject / cancel actions, each through the exactly-once
service and recorded as the staff user; the other rows are audit, shown and never changed.
"""

from __future__ import annotations

from collections import Counter

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil

from approvals import selectors, services
from approvals.admin.base import (
    ActionsOnlyAdmin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    admin_link,
    hook_decisions_html,
    pretty_json,
    search_by_uuid,
)
from approvals.admin.oversight import oversight_view
from approvals.admin.scoping import TeamScoped, TeamsOnlyFilter
from approvals.models import (
    ApproverResponse,
    ConfirmationEvent,
    ConfirmationRequest,
    Grant,
    Outbox,
    Status,
    ToolCall,
)
from gateway_contract import Callback


# Recorded as the channel of decisions made with the admin's actions.
ADMIN_CHANNEL = "admin"


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
    fields = ("kind", "channel", "status", "digest", "attempts", "last_error", "created_at", "sent_at")
    readonly_fields = fields


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
    change_list_template = "admin/approvals/confirmationrequest/change_list.html"
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

    def get_urls(self):
        # Before the default routes, whose `<object_id>/` would take "oversight/" for a request's id.
        oversight = self.admin_site.admin_view(lambda request: oversight_view(self, request))
        return [path("oversight/", oversight, name="approvals_oversight"), *super().get_urls()]

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


@admin.register(Outbox)
class OutboxAdmin(TeamScoped, ReadOnlyAdmin):
    team_path = "confirmation__agent__team"
    list_display = ("id", "kind", "channel", "status", "digest", "attempts", "last_error", "next_attempt_at",
                    "created_at", "sent_at", "confirmation_link")  # fmt: skip
    list_filter = ("status", "kind", ("channel", TeamsOnlyFilter))
    search_fields = ("dedupe_key", "last_error")
    list_select_related = ("channel", "confirmation", "digest", "digest__channel")

    @admin.display(description="request")
    def confirmation_link(self, obj: Outbox) -> str:
        return admin_link(obj.confirmation, f"{obj.confirmation.tool_name} {str(obj.confirmation_id)[:8]}")
