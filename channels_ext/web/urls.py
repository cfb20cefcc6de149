from django.urls import path
from django.views.generic import RedirectView

from channels_ext.web import views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="approval-inbox", permanent=False)),
    path("approvals/", views.inbox, name="approval-inbox"),
    path("approvals/<uuid:confirmation_id>/", views.approval_page, name="approval-page"),
    path("approvals/<uuid:confirmation_id>/state", views.approval_state, name="approval-state"),
]
