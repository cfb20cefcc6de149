from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from approvals.api import root, views

EVENTS = {
    "session-start": "session_start",
    "pre-turn": "pre_turn",
    "post-tool-use": "post_tool_use",
    "tool-error": "tool_error",
    "post-turn": "post_turn",
    "session-end": "session_end",
}

# The events about one allowed call (their input names it; 404 / 409 when it was never announced / allowed).
COMPLETION_EVENTS = {"post_tool_use", "tool_error"}

urlpatterns = [
    path("", root.ApiRootApi.as_view(), name="api-root"),
    path("hooks/pre-tool-use", views.PreToolUseApi.as_view(), name="api-pre-tool-use"),
    *[
        path(
            f"hooks/{slug}",
            (views.CompletionEventApi if event in COMPLETION_EVENTS else views.HookEventApi).as_view(event=event),
            name=f"api-{slug}",
        )
        for slug, event in EVENTS.items()
    ],
    path("confirmations/<str:confirmation_id>", views.ConfirmationDetailApi.as_view(), name="api-confirmation"),
    path("confirmations/<str:confirmation_id>/wait", views.ConfirmationWaitApi.as_view(), name="api-confirmation-wait"),
    path(
        "confirmations/<str:confirmation_id>/cancel",
        views.ConfirmationCancelApi.as_view(),
        name="api-confirmation-cancel",
    ),
    path("questions", views.QuestionCreateApi.as_view(), name="api-questions"),
    path("questions/<str:question_id>", views.QuestionDetailApi.as_view(), name="api-question"),
    path("questions/<str:question_id>/wait", views.QuestionWaitApi.as_view(), name="api-question-wait"),
    path("questions/<str:question_id>/cancel", views.QuestionCancelApi.as_view(), name="api-question-cancel"),
    path("", include("approvals.api.config_urls")),
    path("", include("approvals.api.claude_urls")),
    path("schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="api-schema"),
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema", authentication_classes=[], permission_classes=[]),
        name="api-docs",
    ),
]
