"""The people directory in the admin (docs/approving.md, "People"): people and their linked
identities, groups, stand-ins. Imported by `approvals.admin` (which Django discovers).

Plain model admin: a person, a link, a group or a stand-in is configuration an operator types,
like a channel; "Find chat accounts by e-mail" calls the service that asks the vendors.

Scoped by team like the rest of the admin (docs/approving.md, "Teams"): a team's staff list, reach,
are offered and may save only the people and groups all of whose teams are theirs
(`approvals.selectors.people_teams`), and a change that would bring a person or a group into another team's
approvals (an identity, an e-mail, a user, a group's name another team's gates name) is refused.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from approvals import selectors, services
from approvals.selectors import people_teams
from approvals.models import PeopleGroup, Person, PersonIdentity, StandIn, Team
from approvals.services.people import identity_problem
from gateway_contract import CHANNEL_KINDS

# Kinds whose identity is a Django user (linked through `Person.user`, not typed here).
_USER_KINDS = ("web", "admin")

ANOTHER_TEAM = (
    "This would make {what} part of the approvals of a team you do not administer "
    "(or of every team: a group of no team); a superuser can do it."
)


def _for_user(form_class: type, request: HttpRequest) -> type:
    """`form_class` knowing who fills it in (its choices and checks follow their teams)."""
    return type(form_class.__name__, (form_class,), {"admin_user": request.user})


def _is_superuser(user: Any) -> bool:
    return selectors.team_ids_of(user) is None


def _refuse_other_teams(user: Any, teams: people_teams.Teams, what: str) -> None:
    """A ValidationError if rows of `teams` are not all `user`'s to administer (a superuser's always are)."""
    if people_teams.foreign_teams(user, teams) != frozenset():
        raise forms.ValidationError(ANOTHER_TEAM.format(what=what))


class PersonForm(forms.ModelForm):
    """A person, with the groups they are in (a team's staff: one of their teams' groups at least)."""

    admin_user: Any = None
    groups = forms.ModelMultipleChoiceField(
        queryset=PeopleGroup.objects.none(),
        required=False,
        widget=FilteredSelectMultiple("groups", is_stacked=False),
        help_text="A person belongs to the teams of their groups (docs/approving.md, \"Teams\").",
    )

    class Meta:
        model = Person
        fields = ("display_name", "email", "active", "user")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["groups"].queryset = people_teams.groups_administered(self.admin_user)
        if self.instance.pk is not None:
            self.fields["groups"].initial = list(self.instance.groups.values_list("pk", flat=True))
        if not _is_superuser(self.admin_user):
            self.fields["groups"].required = True  # else nobody of a team would administer them
            self.fields["user"].queryset = people_teams.users_linkable(self.admin_user, person_id=self.instance.pk)

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if (problem := services.email_conflict(person_id=self.instance.pk, email=email)) is not None:
            raise forms.ValidationError(problem)
        return email

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if _is_superuser(self.admin_user) or self.errors:
            return data
        changed = people_teams.person_state(
            self.instance,
            email=data.get("email") or "",
            user_id=data["user"].pk if data.get("user") else None,
            group_ids=[group.pk for group in data.get("groups") or ()],
        )
        _refuse_other_teams(self.admin_user, people_teams.people_teams(changed=changed)[changed.person_id], "this person")
        return data


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


class PersonIdentityFormSet(forms.BaseInlineFormSet):
    """A person's identities; for a team's staff, none that another team's gates name as a channel id."""

    admin_user: Any = None

    def clean(self) -> None:
        super().clean()
        if _is_superuser(self.admin_user) or any(self.errors):
            return
        kept = [
            f.cleaned_data["identity"]
            for f in self.forms
            if f.cleaned_data.get("identity") and not (self.can_delete and self._should_delete_form(f))
        ]
        person = self.instance  # (as the person's form is about to save it: its e-mail, its user)
        changed = people_teams.person_state(
            person if person.pk is not None else None, email=person.email, user_id=person.user_id, identities=kept
        )
        _refuse_other_teams(self.admin_user, people_teams.people_teams(changed=changed)[changed.person_id], "this person")


class PersonIdentityInline(admin.TabularInline):
    model = PersonIdentity
    form = PersonIdentityForm
    formset = PersonIdentityFormSet
    extra = 1
    fields = ("identity", "source", "created_at")
    readonly_fields = ("created_at",)
    verbose_name_plural = "Chat identities (" + ", ".join(f"{k}:…" for k in CHANNEL_KINDS if k not in _USER_KINDS) + ")"

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        return _for_user(super().get_formset(request, obj, **kwargs), request)


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

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return people_teams.stand_ins_administered(request.user, super().get_queryset(request))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is Person:
            kwargs["queryset"] = people_teams.people_administered(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class GroupsAdministeredFilter(admin.RelatedFieldListFilter):
    """Filter people by a group the user administers (never another team's group names)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        return [(g.pk, str(g)) for g in people_teams.groups_administered(request.user).order_by("name")]

    def has_output(self) -> bool:
        return True


class TeamsOfTheUserFilter(admin.RelatedFieldListFilter):
    """Filter groups by one of the user's teams (never another team's name)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        return [(t.pk, str(t)) for t in selectors.of_teams(Team.objects.order_by("name"), request.user, path="pk")]

    def has_output(self) -> bool:
        return True


@admin.register(Person)
class PersonAdmin(admin.ModelAdmin):
    form = PersonForm
    list_display = ("display_name", "email", "active", "user", "identity_list", "group_list")
    list_filter = ("active", ("groups", GroupsAdministeredFilter))
    search_fields = ("display_name", "email", "identities__identity", "user__username")
    autocomplete_fields = ("user",)
    inlines = [PersonIdentityInline, StandInInline]
    actions = ["find_chat_accounts"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Person]:
        """The people the user administers (a team's staff: those all of whose teams are theirs): listed,
        reached by id, offered in the stand-ins' autocomplete."""
        people = super().get_queryset(request).select_related("user").prefetch_related("identities", "groups")
        return people_teams.people_administered(request.user, people)

    def get_autocomplete_fields(self, request: HttpRequest) -> tuple[str, ...]:
        # A team's staff pick among the users they may link (a list), not from every user of the gateway.
        return self.autocomplete_fields if _is_superuser(request.user) else ()

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        return _for_user(super().get_form(request, obj, change=change, **kwargs), request)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        offered = form.fields["groups"].queryset
        kept = form.instance.groups.exclude(pk__in=offered.values("pk"))  # groups not offered here stay as they are
        form.instance.groups.set([*form.cleaned_data["groups"], *kept])

    @admin.display(description="identities")
    def identity_list(self, obj: Person) -> str:
        return ", ".join(i.identity for i in obj.identities.all())

    @admin.display(description="groups")
    def group_list(self, obj: Person) -> str:
        return ", ".join(g.name for g in obj.groups.all())

    @admin.action(description="Find their chat accounts by e-mail (Slack, Feishu)")
    def find_chat_accounts(self, request: HttpRequest, queryset: QuerySet[Person]) -> None:
        for person in queryset:
            # A team's staff link no account that another team's gates name as a channel id.
            found = services.person_link_by_email(person_id=person.pk, within_teams=selectors.team_ids_of(request.user))
            if found.linked:
                self.message_user(request, f"{person}: linked {', '.join(found.linked)}.", messages.SUCCESS)
            for problem in found.problems:
                self.message_user(request, f"{person}: {problem}", messages.WARNING)
            if not found.linked and not found.problems:
                self.message_user(request, f"{person}: no new account found.", messages.INFO)


class PeopleGroupForm(forms.ModelForm):
    """A group; a team's staff give it one of their teams, its members among the people they administer
    (and keep those it has), and no name another team's gates route to."""

    admin_user: Any = None

    class Meta:
        model = PeopleGroup
        fields = ("name", "description", "team", "members")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if _is_superuser(self.admin_user):
            return
        administered = people_teams.people_administered(self.admin_user).values("pk")
        current = self.instance.members.values("pk") if self.instance.pk is not None else Person.objects.none()
        self.fields["members"].queryset = Person.objects.filter(Q(pk__in=administered) | Q(pk__in=current))
        self.fields["team"].required = True  # a group of no team is everyone's: the superusers'

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not _is_superuser(self.admin_user) and data.get("team") and data.get("name"):
            teams = people_teams.group_teams(team_id=data["team"].pk, name=data["name"])
            _refuse_other_teams(self.admin_user, teams, f"group:{data['name']}")
        return data


@admin.register(PeopleGroup)
class PeopleGroupAdmin(admin.ModelAdmin):
    form = PeopleGroupForm
    list_display = ("name", "description", "team", "member_count")
    list_filter = (("team", TeamsOfTheUserFilter),)
    search_fields = ("name", "description")
    filter_horizontal = ("members",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """A team's staff see (and change) only the groups all of whose teams are theirs: never a group of
        no team (everyone's) nor one another team's gates name."""
        return people_teams.groups_administered(request.user, super().get_queryset(request))

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        return _for_user(super().get_form(request, obj, change=change, **kwargs), request)

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
        """A team's staff see the stand-ins between people they administer, both of them."""
        return people_teams.stand_ins_administered(request.user, super().get_queryset(request).select_related("person", "delegate"))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is Person:  # (the autocomplete lists them through PersonAdmin's queryset)
            kwargs["queryset"] = people_teams.people_administered(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
