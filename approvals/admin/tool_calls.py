"""Tool calls in the admin (the audited record of every call, and its export as `export_audit` writes
it: docs/audit.md) and grants ("approved for a scope": listed, revoked by an action, never edited)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html_join

from approvals import exports, services
from approvals.admin.learning import preview_view, suggestions_view
from approvals.admin.base import (
    ActionsOnlyAdmin,
    ReadOnlyAdmin,
    admin_link,
    hook_decisions_html,
    pretty_json,
    search_by_uuid,
)
from approvals.admin.scoping import TeamScoped, TeamsOnlyFilter
from approvals.models import Grant, ToolCall


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
        suggestions = self.admin_site.admin_view(lambda request: suggestions_view(self, request))
        preview = self.admin_site.admin_view(lambda request: preview_view(self, request))
        return [
            path("export/", export, name="approvals_toolcall_export"),
            path("suggestions/", suggestions, name="approvals_toolcall_suggestions"),
            path("preview/", preview, name="approvals_toolcall_preview"),
            *super().get_urls(),
        ]

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
