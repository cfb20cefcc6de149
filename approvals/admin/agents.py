"""Agents in the admin: the read-only switch, the hook list's editor (a change is saved as a new
config version through `services.agent_hooks_apply`), its config versions, and API keys (created and
revoked through the services, never edited)."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from approvals import selectors, services
from approvals.admin.base import ActionsOnlyAdmin, ReadOnlyAdmin, ReadOnlyInline, mask, pretty_json
from approvals.admin.scoping import TeamScoped, TeamsOnlyFilter
from approvals.models import Agent, AgentConfigVersion, ApiKey
from gateway_utils.configfile import ConfigError, InvalidYaml, load_yaml
from hooks.registry import validate_agent_hooks


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
