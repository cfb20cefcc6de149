"""The web approval page, the approver's inbox, and the sign-in page approvers use."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import views as staticfiles_views
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from approvals import selectors, services
from approvals.models import ConfirmationRequest, Status
from channels_ext.base import Callback
from channels_ext.web.display import argument_rows, viewer_for
from channels_ext.web.forms import DecisionForm

# Approvers need not be staff, so they sign in here rather than on the admin's staff-only login.
LOGIN_URL = "approval-login"


class SignInView(auth_views.LoginView):
    template_name = "approvals/login.html"
    redirect_authenticated_user = True


class SignOutView(auth_views.LogoutView):
    next_page = LOGIN_URL


def _get(confirmation_id) -> ConfirmationRequest:
    confirmation = (
        ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel")
        .filter(pk=confirmation_id)
        .first()
    )
    if confirmation is None:
        raise Http404("no such approval request")
    return confirmation


@login_required(login_url=LOGIN_URL)
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    pending = (
        ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel")
        .filter(status=Status.PENDING)
        .order_by("created_at")[:500]
    )
    mine, others = [], []
    for confirmation in pending:
        (mine if viewer_for(request.user, confirmation).can_decide else others).append(confirmation)
    decided = (
        ConfirmationRequest.objects.select_related("agent")
        .filter(decided_by=request.user.get_username())
        .order_by("-decided_at")[:20]
    )
    return render(request, "approvals/inbox.html", {"rows": mine, "others": others, "decided": decided})


@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, confirmation_id) -> HttpResponse:
    confirmation = _get(confirmation_id)
    viewer = viewer_for(request.user, confirmation)
    form = DecisionForm()
    if request.method == "POST":
        form = DecisionForm(request.POST)
        if form.is_valid():
            # Every click goes through the exactly-once service, which also refuses (and records)
            # a non-approver's forged POST and tells a second click who decided first.
            outcome = services.confirmation_respond(
                channel_name=viewer.channel_name,
                callback=Callback(
                    confirmation_id=str(confirmation.pk),
                    decision=form.cleaned_data["decision"],
                    actor=request.user.get_username(),
                    reason=form.cleaned_data["reason"],
                ),
                as_admin=viewer.as_admin,
            )
            if outcome.applied:
                messages.success(request, outcome.message)
            else:
                messages.warning(request, outcome.message)
            return redirect("approval-page", confirmation_id=confirmation.pk)
    card = selectors.card_view(confirmation, channel_name=confirmation.channel.name)
    return render(
        request,
        "approvals/page.html",
        {
            "c": confirmation,
            "card": card,
            "viewer": viewer,
            "form": form,
            "can_decide": viewer.can_decide and confirmation.status == Status.PENDING,
            "arguments": argument_rows(confirmation.tool_args),
            "metadata_text": json.dumps(confirmation.metadata, indent=2, ensure_ascii=False) if confirmation.metadata else "",
            "responses": confirmation.responses.all(),
            "events": confirmation.events.all(),
        },
        status=400 if form.errors else 200,
    )


@login_required(login_url=LOGIN_URL)
@require_GET
def approval_state(request: HttpRequest, confirmation_id) -> JsonResponse:
    """The page polls this to update itself when the request is decided elsewhere."""
    confirmation = _get(confirmation_id)
    return JsonResponse(selectors.confirmation_as_dict(confirmation), headers={"Cache-Control": "no-store"})


@require_GET
def static_file(request: HttpRequest, path: str) -> HttpResponse:
    """The admin's CSS and JS, served by the gateway itself so `make run` needs no web server in
    front (DEBUG is off by default). Read whole rather than streamed: they are small, and under
    ASGI a streamed file is consumed through a sync iterator with a warning."""
    response = staticfiles_views.serve(request, path, insecure=True)
    if not response.streaming:
        return response  # 304 Not Modified
    try:
        content = b"".join(response.streaming_content)
    finally:
        response.close()
    whole = HttpResponse(content, content_type=response["Content-Type"])
    for header in ("Last-Modified", "Content-Encoding"):
        if response.has_header(header):
            whole[header] = response[header]
    whole["Cache-Control"] = "public, max-age=3600"
    return whole
