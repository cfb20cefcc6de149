"""Linking one's own chat accounts to oneself (docs/approving.md, "People").

A signed-in user names a channel and their account on it; the gateway posts a one-time link to that
account in the chat. Opening it (signed in as the same user) shows a button, and only that POST links
the account: link previewers fetch every link they see, and a GET changes nothing.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from approvals import selectors, services
from approvals.errors import GatewayError, NotFound, RateLimited
from gateway_contract import ChannelError

LOGIN_URL = "approval-login"


class StandInForm(forms.Form):
    delegate_email = forms.EmailField(help_text="The e-mail of the person who answers for you.")
    starts_at = forms.DateTimeField(help_text="From (YYYY-MM-DD HH:MM, UTC)")
    ends_at = forms.DateTimeField(help_text="Until (YYYY-MM-DD HH:MM, UTC)")
    note = forms.CharField(max_length=200, required=False)


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
        except RateLimited as exc:
            form.add_error(None, exc.message)
            refused = _page(request, form=form, channels=channels, status=exc.status)
            refused["Retry-After"] = str(exc.retry_after)
            return refused
        except GatewayError as exc:
            form.add_error(None, exc.message)
        except ChannelError as exc:
            form.add_error(None, f"The link could not be sent: {exc.message}")
        else:
            messages.success(request, f"A one-time link was sent to {identity}. Open it there while signed in here.")
            return redirect("people-link")
    return _page(request, form=form, channels=channels)


def _page(
    request: HttpRequest,
    *,
    form: LinkAskForm,
    channels: list[str],
    stand_in: StandInForm | None = None,
    status: int | None = None,
) -> HttpResponse:
    stand_in = stand_in or StandInForm()
    return render(
        request,
        "approvals/people_link.html",
        {
            "form": form,
            "identities": selectors.linked_identities(user=request.user),
            "channels": channels,
            "stand_in_form": stand_in,
            "stand_ins": selectors.stand_ins_of(user=request.user),
        },
        status=status or (400 if form.errors or stand_in.errors else 200),
    )


@login_required(login_url=LOGIN_URL)
@require_POST
def stand_in(request: HttpRequest) -> HttpResponse:
    """Name a stand-in for a window (out of office)."""
    form = StandInForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            named = services.stand_in_name(
                user=request.user, delegate_email=data["delegate_email"], starts_at=data["starts_at"],
                ends_at=data["ends_at"], note=data["note"],
            )  # fmt: skip
        except GatewayError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"{named.delegate.display_name} stands in for you until {named.ends_at:%Y-%m-%d %H:%M} UTC.")
            return redirect("people-link")
    channels = selectors.channels_sending_direct_messages()
    return _page(request, form=LinkAskForm(channels=channels), channels=channels, stand_in=form)


@login_required(login_url=LOGIN_URL)
@require_POST
def stand_in_end(request: HttpRequest, stand_in_id: int) -> HttpResponse:
    """End a stand-in one named, now: requests routed to the stand-in already are no longer theirs to decide."""
    try:
        row, ended = services.stand_in_end(user=request.user, stand_in_id=stand_in_id)
    except NotFound:
        raise Http404("no stand-in of yours with that id") from None
    if ended:
        messages.success(request, f"{row.delegate.display_name} no longer stands in for you.")
    else:
        messages.info(request, "That stand-in had already ended.")
    return redirect("people-link")


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
