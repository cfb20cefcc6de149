"""Routes for validating and applying hook configs over the API (issue: declarative policies)."""

urlpatterns: list = []
