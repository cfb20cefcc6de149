"""The web approval page and the approver's inbox."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from approvals import selectors, services
from approvals.models import ConfirmationRequest, Status
from channels_ext.base import Callback


def _get(confirmation_id) -> ConfirmationRequest:
    confirmation = (
        ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel")
        .filter(pk=confirmation_id)
        .first()
    )
    if confirmation is None:
        raise Http404("no such approval request")
    return confirmation


def can_decide(request: HttpRequest, confirmation: ConfirmationRequest) -> bool:
    """Web approvers decide web-channel requests; staff with change rights may decide any."""
    if request.user.has_perm("approvals.change_confirmationrequest"):
        return True
    if confirmation.channel.kind != "web":
        return False
    return selectors.approver_refusal(confirmation, channel_name=confirmation.channel.name, actor=request.user.get_username()) is None


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    pending = ConfirmationRequest.objects.select_related("agent", "channel").filter(status=Status.PENDING)
    rows = [c for c in pending.order_by("created_at")[:200] if can_decide(request, c)]
    return render(request, "approvals/inbox.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, confirmation_id) -> HttpResponse:
    confirmation = _get(confirmation_id)
    allowed = can_decide(request, confirmation)
    if request.method == "POST":
        decision = request.POST.get("decision")
        if decision not in ("approve", "reject"):
            messages.error(request, "Choose Approve or Reject.")
        elif not allowed:
            messages.error(request, "You are not one of the approvers of this request.")
        else:
            outcome = services.confirmation_respond(
                channel_name=confirmation.channel.name,
                callback=Callback(
                    confirmation_id=str(confirmation.pk),
                    decision=decision,
                    actor=request.user.get_username(),
                    reason=request.POST.get("reason", "").strip()[:2000],
                ),
                as_admin=request.user.has_perm("approvals.change_confirmationrequest"),
            )
            (messages.success if outcome.applied else messages.warning)(request, outcome.message)
        return redirect("approval-page", confirmation_id=confirmation.pk)
    card = selectors.card_view(confirmation, channel_name=confirmation.channel.name)
    return render(
        request,
        "approvals/page.html",
        {
            "c": confirmation,
            "card": card,
            "can_decide": allowed and confirmation.status == Status.PENDING,
            "events": confirmation.events.all(),
        },
    )


@login_required
def approval_state(request: HttpRequest, confirmation_id) -> JsonResponse:
    confirmation = _get(confirmation_id)
    return JsonResponse(selectors.confirmation_as_dict(confirmation))
