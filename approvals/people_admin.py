"""The people directory in the admin (docs/approving.md, "People"): people and their linked
identities, groups, stand-ins. Imported by `approvals.admin` (which Django discovers).

Plain model admin: a person, a link, a group or a stand-in is configuration an operator types,
like a channel; "Find chat accounts by e-mail" calls the service that asks the vendors.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals import services
from approvals.models import PeopleGroup, Person, PersonIdentity, StandIn
from channels_ext.base import CHANNEL_KINDS
from approvals.services.people import identity_problem

# Kinds whose identity is a Django user (linked through `Person.user`, not typed here).
_USER_KINDS = ("web", "admin")


class PersonIdentityForm(forms.ModelForm):
    class Meta:
        model = PersonIdentity
        fields = ("identity", "source")

    def clean_identity(self) -> str:
        identity = self.cleaned_data["identity"].strip()
        problem = identity_problem(identity)
        if problem:
            raise forms.ValidationError(problem)
        return identity


class PersonIdentityInline(admin.TabularInline):
    model = PersonIdentity
    form = PersonIdentityForm
    extra = 1
    fields = ("identity", "source", "created_at")
    readonly_fields = ("created_at",)
    verbose_name_plural = "Chat identities (" + ", ".join(f"{k}:…" for k in CHANNEL_KINDS if k not in _USER_KINDS) + ")"


class StandInInline(admin.TabularInline):
    model = StandIn
    fk_name = "person"
    extra = 0
    fields = ("delegate", "starts_at", "ends_at", "note")
    autocomplete_fields = ("delegate",)
    verbose_name_plural = "Stand-ins (who answers for this person while away)"


@admin.register(Person)
class PersonAdmin(admin.ModelAdmin):
    list_display = ("display_name", "email", "active", "user", "identity_list", "group_list")
    list_filter = ("active", "groups")
    search_fields = ("display_name", "email", "identities__identity", "user__username")
    autocomplete_fields = ("user",)
    inlines = [PersonIdentityInline, StandInInline]
    actions = ["find_chat_accounts"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Person]:
        return super().get_queryset(request).select_related("user").prefetch_related("identities", "groups")

    @admin.display(description="identities")
    def identity_list(self, obj: Person) -> str:
        return ", ".join(i.identity for i in obj.identities.all())

    @admin.display(description="groups")
    def group_list(self, obj: Person) -> str:
        return ", ".join(g.name for g in obj.groups.all())

    @admin.action(description="Find their chat accounts by e-mail (Slack, Feishu)")
    def find_chat_accounts(self, request: HttpRequest, queryset: QuerySet[Person]) -> None:
        for person in queryset:
            found = services.person_link_by_email(person_id=person.pk)
            if found.linked:
                self.message_user(request, f"{person}: linked {', '.join(found.linked)}.", messages.SUCCESS)
            for problem in found.problems:
                self.message_user(request, f"{person}: {problem}", messages.WARNING)
            if not found.linked and not found.problems:
                self.message_user(request, f"{person}: no new account found.", messages.INFO)


@admin.register(PeopleGroup)
class PeopleGroupAdmin(admin.ModelAdmin):
    list_display = ("name", "description", "member_count")
    search_fields = ("name", "description")
    filter_horizontal = ("members",)

    @admin.display(description="members")
    def member_count(self, obj: PeopleGroup) -> int:
        return obj.members.count()


@admin.register(StandIn)
class StandInAdmin(admin.ModelAdmin):
    list_display = ("person", "delegate", "starts_at", "ends_at", "note")
    list_filter = ("ends_at",)
    search_fields = ("person__display_name", "delegate__display_name", "person__email", "delegate__email")
    autocomplete_fields = ("person", "delegate")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("person", "delegate")
