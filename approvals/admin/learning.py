"""The admin's pages for learning from the record (docs/policies.md): the policies people always
approved (`policies_suggest`, shown as YAML to copy — nothing here applies it), and a draft config tried
on the recorded calls (`config_simulate`, the config preview). Both are read-only, for staff who may
view tool calls, over their teams' agents only (`scoping.of_users_teams`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from approvals import services
from approvals.admin.scoping import of_users_teams
from approvals.config_schema import parse_config_text
from approvals.models import Agent
from gateway_utils.configfile import ConfigError


class SuggestionsForm(forms.Form):
    min_approvals = forms.IntegerField(min_value=1, max_value=100000, initial=10, label="approved at least")
    days = forms.IntegerField(min_value=1, max_value=3660, initial=30, label="in the last (days)")
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), required=False, empty_label="every agent of my teams")

    def __init__(self, *args: Any, agents: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = agents.order_by("name")


class PreviewForm(forms.Form):
    draft = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false",
                                     "style": "font-family:monospace;font-size:13px"}),  # fmt: skip
        max_length=200_000,
        help_text="A whole config file (YAML or JSON), as <code>apply_config</code> reads it. Nothing is applied.",
    )
    days = forms.IntegerField(min_value=1, max_value=3660, initial=7, label="replay the last (days)")


class _Unsubstituted(Mapping[str, str]):
    """`${NAME}` left as written: a draft pasted in the admin never reads the server's environment
    (its values could otherwise come back in a rule's reason)."""

    def __getitem__(self, name: str) -> str:
        return "${" + name + "}"

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


def _page(model_admin: admin.ModelAdmin, request: HttpRequest, template: str, **context: Any) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    base = {**model_admin.admin_site.each_context(request), "opts": model_admin.model._meta}
    return TemplateResponse(request, f"admin/approvals/toolcall/{template}", {**base, **context})


def suggestions_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> TemplateResponse:
    """What people of the admin's teams always approved, as YAML to copy into the config file."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    agents = of_users_teams(Agent, request)
    form = SuggestionsForm(request.GET or None, agents=agents)
    found = None
    if form.is_bound and form.is_valid():
        chosen = form.cleaned_data["agent"]
        scope = agents.filter(pk=chosen.pk) if chosen is not None else agents
        found = services.policies_suggest(
            min_approvals=form.cleaned_data["min_approvals"], days=form.cleaned_data["days"], agents=scope
        )
    elif not form.is_bound:
        found = services.policies_suggest(agents=agents)
    return _page(model_admin, request, "suggestions.html", title="Policies people always approved", form=form, found=found)


def preview_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> TemplateResponse:
    """A pasted draft config tried on the recorded calls of the admin's teams' agents."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    form = PreviewForm(request.POST or None)
    report, problems = None, []
    if request.method == "POST" and form.is_valid():
        try:
            config = parse_config_text(form.cleaned_data["draft"], environ=_Unsubstituted())
        except ConfigError as exc:
            problems = [f"{p.path}: {p.message}" for p in exc.problems]
        else:
            since = timezone.now() - dt.timedelta(days=form.cleaned_data["days"])
            report = services.config_simulate(config=config, since=since, agents=of_users_teams(Agent, request))
    return _page(
        model_admin, request, "preview.html", title="Try a config on the past", form=form, report=report, problems=problems
    )
