"""The people directory in the admin (docs/approving.md, "People"): people and their linked
identities, groups, stand-ins. Imported by `approvals.admin` (which Django discovers).

Plain model admin: a person, a link, a group or a stand-in is configuration an operator types,
like a channel; "Find chat accounts by e-mail" calls the service that asks the vendors.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from approvals import selectors, services
from approvals.models import PeopleGroup, Person, PersonIdentity, StandIn, Team
from approvals.services.people import identity_problem
from channels_ext.base import CHANNEL_KINDS

# Kinds whose identity is a Django user (linked through `Person.user`, not typed here).
_USER_KINDS = ("web", "admin")


class PersonIdentityForm(forms.ModelForm):
    class Meta:
        model = PersonIdentity
        fields = ("identity", "source")

    def clean_identity(self) -> str:
        identity = self.cleaned_data["identity"].strip()
        # (The inline's person is the page's, set on the instance before validation.)
        problem = identity_problem(identity) or services.identity_conflict(person_id=self.instance.person_id, identity=identity)
        if problem:
            raise forms.ValidationError(problem)
        return identity


class PersonForm(forms.ModelForm):
    class Meta:
        model = Person
        fields = "__all__"

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if (problem := services.email_conflict(person_id=self.instance.pk, email=email)) is not None:
            raise forms.ValidationError(problem)
        return email


class PersonIdentityInline(admin.TabularInline):
    model = PersonIdentity
    form = PersonIdentityForm
    extra = 1
    fields = ("identity", "source", "created_at")
    readonly_fields = ("created_at",)
    verbose_name_plural = "Chat identities (" + ", ".join(f"{k}:…" for k in CHANNEL_KINDS if k not in _USER_KINDS) + ")"


class StandInForm(forms.ModelForm):
    """A stand-in is of a team of the person they stand in for (docs/approving.md, "Stand-ins")."""

    class Meta:
        model = StandIn
        fields = ("person", "delegate", "starts_at", "ends_at", "note")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        # (On a person's page the person is the page's: the inline form has no field for it.)
        person = cleaned.get("person") or (self.instance.person if self.instance.person_id else None)
        delegate = cleaned.get("delegate")
        if person is not None and delegate is not None:
            problem = services.stand_in_team_problem(person=person, delegate=delegate)
            if problem is not None:
                raise forms.ValidationError(problem)
        return cleaned


class StandInInline(admin.TabularInline):
    model = StandIn
    form = StandInForm
    fk_name = "person"
    extra = 0
    fields = ("delegate", "starts_at", "ends_at", "note")
    autocomplete_fields = ("delegate",)
    verbose_name_plural = "Stand-ins (who answers for this person while away)"


@admin.register(Person)
class PersonAdmin(admin.ModelAdmin):
    form = PersonForm
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
    list_display = ("name", "description", "team", "member_count")
    list_filter = ("team",)
    search_fields = ("name", "description")
    filter_horizontal = ("members",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """A team's staff see (and change the members of) their teams' groups and groups of no team."""
        groups = super().get_queryset(request)
        teams = selectors.team_ids_of(request.user)
        return groups if teams is None else groups.filter(Q(team__isnull=True) | Q(team__in=teams))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is Team:  # a group's members join its team: only a team of one's own
            kwargs["queryset"] = selectors.of_teams(Team.objects.all(), request.user, path="pk")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="members")
    def member_count(self, obj: PeopleGroup) -> int:
        return obj.members.count()


@admin.register(StandIn)
class StandInAdmin(admin.ModelAdmin):
    form = StandInForm
    list_display = ("person", "delegate", "starts_at", "ends_at", "note")
    list_filter = ("ends_at",)
    search_fields = ("person__display_name", "delegate__display_name", "person__email", "delegate__email")
    autocomplete_fields = ("person", "delegate")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("person", "delegate")
