"""Routes for Claude Code's `type: "http"` hooks (issue: agents await anywhere)."""

urlpatterns: list = []
