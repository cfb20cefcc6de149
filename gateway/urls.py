from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults

from approvals.api.errors import error_body
from gateway import health


def not_found(request, exception=None):
    """Under /api/ a 404 is the contract's error shape too (docs/reference/api.md); elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "no such API path"), status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/v1/", include("approvals.api.urls")),
    path("channels/", include("channels_ext.urls")),
    path("", include("channels_ext.web.urls")),
    path("admin/", admin.site.urls),
]
