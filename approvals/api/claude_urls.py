"""Routes for Claude Code's `type: "http"` hooks (see approvals.api.claude_code)."""

from django.urls import path

from approvals.api.claude_code import claude_code_hook

urlpatterns = [
    path("claude-code/hooks", claude_code_hook, name="api-claude-code-hooks"),
]
