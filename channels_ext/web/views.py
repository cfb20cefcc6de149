"""The web approval page, revoking a grant, and the sign-in page approvers use (the inbox: `inbox`)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import views as staticfiles_views
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from approvals import selectors, services
from approvals.types import RequestKind, Status
from gateway_contract import answers
from gateway_contract import Callback, sign_shown_ids
from channels_ext.web.display import argument_rows, live_grants_for, may_view, risk_shown, viewer_for
from channels_ext.web.forms import DecisionForm

# Approvers need not be staff, so they sign in here rather than on the admin's staff-only login.
LOGIN_URL = "approval-login"
# A question's form posts each field as `answer.<name>` (`answer.answer` without a form).
ANSWER_PREFIX = "answer."


class SignInView(auth_views.LoginView):
    template_name = "approvals/login.html"
    redirect_authenticated_user = True


class SignOutView(auth_views.LogoutView):
    next_page = LOGIN_URL


def _get(confirmation_id) -> Any:
    confirmation = selectors.confirmation_lookup(confirmation_id=confirmation_id)
    if confirmation is None:
        raise Http404("no such approval request")
    return confirmation


@login_required(login_url=LOGIN_URL)
@require_POST
def grant_revoke(request: HttpRequest, grant_id) -> HttpResponse:
    """Revoke a grant the user may see (one they could have granted); it stops at once."""
    grant = next((g for g in live_grants_for(request.user) if g.pk == grant_id), None)
    if grant is None:
        if selectors.grant_is_revoked(grant_id=grant_id):
            messages.warning(request, "That grant was already revoked.")
            return _back(request)
        raise Http404("no live grant of yours with that id")
    if services.grant_revoke(grant_id=grant.pk, actor=f"web:{request.user.get_username()}"):
        messages.success(request, f"Revoked: {grant.tool_name} {grant.scope_label}. The next such call asks again.")
    else:
        messages.warning(request, "That grant was already revoked.")
    return _back(request)


def _back(request: HttpRequest) -> HttpResponse:
    """Back to the form's `next` page — only if it is a path of this gateway (never an open redirect
    to another site), else to the inbox."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect(target)
    return redirect("approval-inbox")


class _NotADecision(Exception):
    """A click posted to a request that is another team's (it does not exist for this user) or a question
    (its page takes answers): nothing is recorded, the transaction that read the row is rolled back."""

    def __init__(self, *, question: bool) -> None:
        super().__init__()
        self.question = question


def _standing(user, confirmation: Any) -> tuple[str, bool]:
    """(the channel this user decides `confirmation` through here, whether as staff)."""
    viewer = viewer_for(user, confirmation)
    return viewer.channel_name, viewer.as_admin


def _deciding(user, confirmation: Any) -> tuple[str, bool]:
    """`_standing` for an approval's click, judged on the row the service reads under its lock; raises
    `_NotADecision` for a request this form does not decide (a question, another team's)."""
    if confirmation.kind == RequestKind.QUESTION:
        raise _NotADecision(question=True)
    selectors.people_known(user)  # who clicked: read with their session's user, not again
    if not selectors.team_sees(user, confirmation):
        raise _NotADecision(question=False)  # another team's: it does not exist for them, nothing recorded
    return _standing(user, confirmation)


def _edit_fields(confirmation: Any, form: DecisionForm) -> list[dict[str, str]]:
    """One field per editable argument: its path and its value as JSON (as typed, after a refusal)."""
    fields = []
    for number, (path, value) in enumerate(selectors.confirmation_editable_values(confirmation=confirmation)):
        typed = form.posted_text(path)
        text = typed if typed is not None else json.dumps(value, indent=2, ensure_ascii=False)
        fields.append({"id": f"edit-{number}", "path": path, "text": text})
    return fields


def _answer_inputs(request: HttpRequest, schema: dict) -> dict:
    """What the question form posted, per field (`answer.<name>`; several choices: one value each)."""
    inputs: dict = {}
    for field in answers.fields(schema):
        key = f"{ANSWER_PREFIX}{field.name}"
        inputs[field.name] = request.POST.getlist(key) if field.kind == "choices" else request.POST.get(key)
    return inputs


def question_page(request: HttpRequest, confirmation: Any) -> HttpResponse:
    """A question's page: its text and a form for the answer (docs/asking.md). The answer goes through
    the same exactly-once service as a click, which checks it against the question's schema; a
    refused answer shows the form again, as typed, beside why (a 400)."""
    schema = confirmation.answer_schema or {}
    error, typed = "", {}
    if request.method == "POST":
        typed = _answer_inputs(request, schema)
        outcome = services.confirmation_respond(
            callback=Callback(
                confirmation_id=str(confirmation.pk),
                decision="answer",
                actor=request.user.get_username(),
                answer=answers.answer_from_inputs(schema, typed),
            ),
            actor_kind="web",
            with_card=False,
            on_behalf=lambda row: _standing(request.user, row),
        )
        if outcome.applied:
            messages.success(request, outcome.message)
            return redirect("approval-page", confirmation_id=confirmation.pk)
        if outcome.code == "answer_refused":
            error = outcome.message
        else:
            messages.warning(request, outcome.message)
            return redirect("approval-page", confirmation_id=confirmation.pk)
        confirmation = _get(confirmation.pk)
    viewer = viewer_for(request.user, confirmation)
    pending = confirmation.status == Status.PENDING
    fields = [
        {"f": f, "key": f"{ANSWER_PREFIX}{f.name}", "typed": typed.get(f.name)} for f in answers.fields(schema)
    ]
    return render(
        request,
        "approvals/question.html",
        {
            "c": confirmation,
            "viewer": viewer,
            "can_answer": viewer.can_decide and pending,
            "fields": fields,
            "error": error,
            "answer_text": answers.answer_text(confirmation.answer, schema) if confirmation.answer is not None else "",
            "default_text": (
                answers.answer_text(confirmation.default_answer, schema) if confirmation.default_answer is not None else ""
            ),
            "decider": selectors.decider(confirmation),
            "events": confirmation.events.all(),
        },
        status=400 if error else 200,
    )


@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, confirmation_id) -> HttpResponse:
    form = DecisionForm(request.POST) if request.method == "POST" else DecisionForm()
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        # Every click goes through the exactly-once service, which also refuses (and records)
        # a non-approver's forged POST, an edit the gate does not allow, and tells a second
        # click who decided first. Whether this page decides the request at all (its team, its
        # kind), through which channel this user decides and whether as staff: judged on the
        # row the service reads under its lock — the request is read once.
        try:
            outcome = services.confirmation_respond(
                callback=Callback(
                    confirmation_id=str(confirmation_id),
                    decision=data["decision"],
                    actor=request.user.get_username(),
                    reason=data["reason"],
                    typed_edits=data["typed_edits"] or None,
                    grant=data["grant"],
                    whole_turn=data["whole_turn"],
                    shown_ids=data["shown_ids"],
                ),
                actor_kind="web",  # recorded as web:<username>
                with_card=False,  # the page reads the request itself
                on_behalf=lambda confirmation: _deciding(request.user, confirmation),
            )
        except _NotADecision as not_here:
            if not not_here.question:
                raise Http404("no such approval request") from None
            outcome = None  # a question: its own page answers the POST, below
        if outcome is None:
            pass
        elif outcome.code == "not_found":
            raise Http404("no such approval request")
        elif outcome.code == "edit_refused":
            # Nothing was decided: the page again, what they typed kept beside why (a 400).
            form.add_error(None, outcome.message)
        elif outcome.applied:
            messages.success(request, outcome.message)
            return redirect("approval-page", confirmation_id=confirmation_id)
        else:
            messages.warning(request, outcome.message)  # (the service recorded the refused click)
            if not may_view(request.user, _get(confirmation_id)):
                return redirect("approval-inbox")  # not back to a page they may not read
            return redirect("approval-page", confirmation_id=confirmation_id)
    confirmation = _get(confirmation_id)  # the page: as it is now (after a refused edit, as that left it)
    if confirmation.kind == RequestKind.QUESTION:
        if not may_view(request.user, confirmation):
            raise Http404("no such approval request")
        return question_page(request, confirmation)
    if request.method == "POST" and not selectors.team_sees(request.user, confirmation):
        raise Http404("no such approval request")  # another team's (a POST the form refused): nothing recorded
    viewer = viewer_for(request.user, confirmation)
    if not viewer.can_view:
        raise Http404("no such approval request")
    owner = selectors.card_owner(confirmation)
    card = selectors.card_view(owner, channel_name=owner.channel.name)
    tool_call = getattr(confirmation, "tool_call", None)
    pending = confirmation.status == Status.PENDING
    turn = list(card.items)
    offered = card.offered_ids()  # "Approve all" decides these: the pending calls listed below
    return render(
        request,
        "approvals/page.html",
        {
            "c": confirmation,
            "card": selectors.card_view(confirmation, channel_name=confirmation.channel.name),
            "risk": risk_shown(confirmation.risk),
            "viewer": viewer,
            "form": form,
            "can_decide": viewer.can_decide and pending,
            "decider": selectors.decider(confirmation),
            "arguments": argument_rows(confirmation.tool_args),
            "approved_arguments": argument_rows(confirmation.approved_args) if confirmation.edited else None,
            "changed_arguments": {path.split(".")[0] for path in confirmation.arg_edits or {}},
            "ran_arguments": argument_rows(tool_call.ran_args) if tool_call and tool_call.ran_args is not None else None,
            "edit_fields": _edit_fields(confirmation, form) if viewer.can_decide and pending else [],
            "grant_options": card.grant_options if viewer.can_decide and pending else (),
            "grants": selectors.grants_of_confirmation(confirmation=confirmation),
            "turn": turn,
            "turn_pending": len(offered),
            "turn_shown": sign_shown_ids(card.confirmation_id, offered) if len(offered) > 1 else "",
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
    if not may_view(request.user, confirmation):
        raise Http404("no such approval request")
    return JsonResponse(selectors.request_as_dict(confirmation), headers={"Cache-Control": "no-store"})


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
