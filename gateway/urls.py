from django.contrib import admin
from django.urls import include, path

from gateway import health

# Under /api/ Django's own errors (a 404 for an unknown path among them) answer in the API's error shape:
# approvals.api.middleware.api_errors_as_json, with DEBUG on or off.
urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
    path("api/v1/", include("approvals.api.urls")),
    path("channels/", include("channels_ext.urls")),
    path("", include("channels_ext.web.urls")),
    path("admin/", admin.site.urls),
]
