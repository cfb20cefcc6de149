"""What every list of the operator's console shares: the read-only and actions-only bases, and the
helpers that show a record (JSON, links, masked secrets, each hook's decision).

Audit rows are never added, changed or deleted here (`ReadOnlyAdmin`, `ReadOnlyInline`); rows whose
only moves are services are changed only through the admin actions (`ActionsOnlyAdmin`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join


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


def mask(value: Any) -> str:
    text = str(value)
    if not text:
        return ""
    return "••••••" + (text[-4:] if len(text) >= 16 else "")


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
