from django.urls import path, re_path
from django.views.generic import RedirectView

from channels_ext.web import inbox, people, sign_in, views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="approval-inbox", permanent=False)),
    path("login/", views.SignInView.as_view(), name="approval-login"),
    path("logout/", views.SignOutView.as_view(), name="approval-logout"),
    # Sign-in with the organisation's identity provider (404 unless configured). The names are
    # mozilla-django-oidc's: it reverses the callback's to build the redirect URI.
    path("oidc/authenticate/", sign_in.start, name="oidc_authentication_init"),
    path("oidc/callback/", sign_in.callback, name="oidc_authentication_callback"),
    path("approvals/", inbox.inbox, name="approval-inbox"),
    path("approvals/decide", inbox.inbox_decide, name="approval-inbox-decide"),
    path("approvals/grants/<uuid:grant_id>/revoke", views.grant_revoke, name="approval-grant-revoke"),
    path("approvals/<uuid:confirmation_id>/", views.approval_page, name="approval-page"),
    path("approvals/<uuid:confirmation_id>/state", views.approval_state, name="approval-state"),
    # Linking one's own chat accounts (docs/approving.md, "People"): asked for here, finished from the chat.
    path("people/link/", people.link_ask, name="people-link"),
    path("people/link/<str:signed>/", people.link_finish, name="people-link-finish"),
    path("people/stand-in/", people.stand_in, name="people-stand-in"),
    path("people/stand-in/<int:stand_in_id>/end", people.stand_in_end, name="people-stand-in-end"),
    # The admin's CSS and JS (a deployment behind nginx or a CDN may serve STATIC_ROOT instead).
    re_path(r"^static/(?P<path>.+)$", views.static_file, name="static-file"),
]
