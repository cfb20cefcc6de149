"""Routes for the config file's schema, and for staff to validate and apply hook configs."""

from django.urls import path

from approvals.api import config_views

urlpatterns = [
    path("hooks/schema", config_views.HooksSchemaApi.as_view(), name="api-hooks-schema"),
    path("agents/<slug:name>/hooks", config_views.AgentHooksApi.as_view(), name="api-agent-hooks"),
    path("config/validate", config_views.ConfigValidateApi.as_view(), name="api-config-validate"),
]
