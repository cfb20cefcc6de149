"""Identity provider links in the admin (docs/approving.md §7): who signs in through the organisation's
identity provider as whom. Imported by `approvals.admin` (which Django discovers).

Sign-in links a subject by e-mail only to a user who can do no more than approve (no staff, no
superuser, no password) and only once; everyone else is linked here, by a superuser — linking a subject
to a user hands that user's account to whoever holds the subject. A link is added or deleted, never
edited: its subject is the identity, and Django's admin history records who did which.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals import services
from approvals.models import IdentityProviderLink


@admin.register(IdentityProviderLink)
class IdentityProviderLinkAdmin(admin.ModelAdmin):
    """Superusers only: see the links, link a subject to any user, delete a link."""

    list_display = ("subject", "user", "email", "issuer", "created_at", "last_signed_in_at")
    search_fields = ("subject", "email", "user__username")
    list_select_related = ("user",)
    autocomplete_fields = ("user",)
    add_fields = ("user", "issuer", "subject")
    shown_fields = ("user", "issuer", "subject", "email", "created_at", "last_signed_in_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[IdentityProviderLink]:
        return super().get_queryset(request).select_related("user")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return self.add_fields if obj is None else self.shown_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return () if obj is None else self.shown_fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"issuer": getattr(settings, "GATEWAY_OIDC_ISSUER", ""), **super().get_changeform_initial_data(request)}

    def save_model(self, request: HttpRequest, obj: IdentityProviderLink, form: Any, change: bool) -> None:
        link = services.identity_provider_link_create(user=obj.user, issuer=obj.issuer, subject=obj.subject)
        obj.pk, obj.created_at = link.pk, link.created_at

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser
