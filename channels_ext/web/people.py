"""Linking one's own chat accounts to oneself (docs/approving.md, "People").

A signed-in user names a channel and their account on it; the gateway posts a one-time link to that
account in the chat. Opening it (signed in as the same user) shows a button, and only that POST links
the account: link previewers fetch every link they see, and a GET changes nothing.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from approvals import selectors, services
from approvals.errors import GatewayError
from channels_ext.base import ChannelError

LOGIN_URL = "approval-login"


class LinkAskForm(forms.Form):
    channel = forms.ChoiceField()
    account = forms.CharField(max_length=150, help_text="Your id on that channel: Slack U…, Feishu ou_…")

    def __init__(self, *args, channels: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["channel"].choices = [(name, name) for name in channels]


@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def link_ask(request: HttpRequest) -> HttpResponse:
    """The user's linked accounts, and a form that sends a one-time link to another one."""
    channels = selectors.channels_sending_direct_messages()
    form = LinkAskForm(request.POST or None, channels=channels)
    if request.method == "POST" and form.is_valid():
        try:
            identity = services.person_link_offer(
                user=request.user, channel_name=form.cleaned_data["channel"], account=form.cleaned_data["account"]
            )
        except GatewayError as exc:
            form.add_error(None, exc.message)
        except ChannelError as exc:
            form.add_error(None, f"The link could not be sent: {exc.message}")
        else:
            messages.success(request, f"A one-time link was sent to {identity}. Open it there while signed in here.")
            return redirect("people-link")
    return render(
        request,
        "approvals/people_link.html",
        {"form": form, "identities": selectors.linked_identities(user=request.user), "channels": channels},
        status=400 if form.errors else 200,
    )


@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def link_finish(request: HttpRequest, signed: str) -> HttpResponse:
    """GET: what the link would do, and a button. POST: link it (once)."""
    if request.method == "POST":
        try:
            identity = services.person_link_redeem(user=request.user, signed=signed)
        except GatewayError as exc:
            messages.error(request, exc.message)
            return render(request, "approvals/people_link_finish.html", {"signed": signed, "done": True}, status=400)
        messages.success(request, f"{identity} is now linked to you.")
        return redirect("people-link")
    return render(request, "approvals/people_link_finish.html", {"signed": signed, "done": False})
