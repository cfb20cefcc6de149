"""The approver's inbox: what waits for them, filtered and grouped, and the batch that decides the rows
they selected — each on its own, exactly as its row showed it (docs/approving.md, "The inbox")."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors, services
from gateway_contract import Callback
from channels_ext.web.display import argument_preview, live_grants_for, viewer_for
from channels_ext.web.forms import AGES, BatchForm, InboxFilterForm, RequestIdsField
from channels_ext.web.views import LOGIN_URL

# The risks in the order their groups are listed: what deserves the careful read first.
RISK_ORDER = {"high": 0, "medium": 1, "low": 2}
CHANGED_SINCE_SHOWN = "changed since this page was drawn; reload the inbox and decide it again"
NOT_SHOWN = "this page did not show it as it is now; reload the inbox and decide it again"


@dataclasses.dataclass(frozen=True)
class InboxRow:
    """One request waiting for the user: the request, its arguments on one line, and the checkbox's value
    (`<id>:<digest of what the row shows>`, `selectors.confirmation_shown_digest`)."""

    c: Any
    preview: str
    shown: str


@dataclasses.dataclass(frozen=True)
class InboxGroup:
    """The rows sharing an agent, a tool or a risk (`label` empty when the inbox is not grouped)."""

    label: str
    rows: list[InboxRow]


def _group_key(by: str, confirmation: Any) -> str:
    if by == "agent":
        return confirmation.agent.name
    if by == "tool":
        return confirmation.tool_name
    return confirmation.risk


def grouped(rows: list[InboxRow], by: str) -> list[InboxGroup]:
    """`rows` (oldest first) in groups by agent, tool or risk: risks riskiest first, names in order, each
    group's rows oldest first; one unlabelled group when `by` is empty."""
    if not by:
        return [InboxGroup(label="", rows=rows)] if rows else []
    groups: dict[str, list[InboxRow]] = {}
    for row in rows:
        groups.setdefault(_group_key(by, row.c), []).append(row)
    order = (lambda key: (RISK_ORDER.get(key, 3), key)) if by == "risk" else (lambda key: key)
    return [InboxGroup(label=key, rows=groups[key]) for key in sorted(groups, key=order)]


@login_required(login_url=LOGIN_URL)
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    filters = InboxFilterForm(request.GET)
    if not filters.is_valid():
        for field, errors in filters.errors.items():
            messages.error(request, f"{field}: {' '.join(errors)}")
        return _inbox(request, filters, status=400)  # the filters are ignored, said why
    return _inbox(request, filters)


def _inbox(request: HttpRequest, filters: InboxFilterForm, status: int = 200) -> HttpResponse:
    chosen = filters.filters() if filters.is_valid() else {}
    group_by = filters.cleaned_data.get("group", "") if filters.is_valid() else ""
    pending = list(selectors.confirmations_pending_for(user=request.user, **chosen))  # of the user's teams only
    mine: list[InboxRow] = []
    others = []
    with selectors.people_memo():  # who is whom, read once for the whole list
        selectors.owners_read_at_once(pending, identity=f"web:{request.user.get_username()}")
        for confirmation in pending:
            viewer = viewer_for(request.user, confirmation)
            if viewer.can_decide:
                shown = f"{confirmation.pk}:{selectors.confirmation_shown_digest(confirmation)}"
                mine.append(InboxRow(c=confirmation, preview=argument_preview(confirmation.tool_args), shown=shown))
            elif viewer.can_view:  # others' requests stay out of sight (docs/web-and-admin.md)
                others.append(confirmation)
    # The filters' choices: the agents and tools of what this user may see now (never of requests kept out
    # of their sight), narrowed as the list is; a chosen one stays a choice even with nothing pending now.
    seen = [row.c for row in mine] + others
    facets = {
        "agents": sorted({c.agent.name for c in seen} | ({chosen["agent"]} if chosen.get("agent") else set())),
        "tools": sorted({c.tool_name for c in seen} | ({chosen["tool"]} if chosen.get("tool") else set())),
    }
    context = {
        "groups": grouped(mine, group_by),
        "waiting": len(mine),
        "group_by": group_by,
        "chosen": chosen,
        "filtered": any(chosen.values()),
        "facets": facets,
        "risks": ("high", "medium", "low"),
        "ages": _ages(chosen.get("older_than")),
        "limited": len(pending) >= selectors.INBOX_LIMIT,
        "limit": selectors.INBOX_LIMIT,
        "max_batch": RequestIdsField.MAX_BATCH,
        "others": others,
        "decided": selectors.confirmations_decided_by(user=request.user),
        "grants": live_grants_for(request.user),
        "teams": selectors.team_names_of(request.user),
    }
    return render(request, "approvals/inbox.html", context, status=status)


def _ages(chosen: int | None) -> list[tuple[int, str]]:
    """The age filter's choices, with the chosen number of minutes among them (one typed in the address)."""
    known = [minutes for minutes, _ in AGES]
    return AGES if not chosen or chosen in known else sorted([*AGES, (chosen, f"{chosen} min")])


class _NotDecidedHere(Exception):
    """A request the batch leaves as it is, found under its row lock: another team's (it does not exist for
    this user: nothing recorded), or one whose content is not what the row showed. Raised out of the click's
    transaction, which is rolled back."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _as_shown(user: Any, row: Any, digest: str) -> tuple[str, bool]:
    """`on_behalf` for one request of the batch, judged on its row as read under the lock: (the channel this
    user decides it through, whether as staff) — if it is of their teams and still what their row showed."""
    if not selectors.team_sees(user, row):
        raise _NotDecidedHere("no such request")
    if not digest:
        raise _NotDecidedHere(NOT_SHOWN)  # a page drawn before rows carried what they showed, or a forged form
    if not constant_time_compare(digest, selectors.confirmation_shown_digest(row)):
        raise _NotDecidedHere(CHANGED_SINCE_SHOWN)
    viewer = viewer_for(user, row)
    return viewer.channel_name, viewer.as_admin


@login_required(login_url=LOGIN_URL)
@require_POST
def inbox_decide(request: HttpRequest) -> HttpResponse:
    """Approve or reject the selected requests: each on its own, through the exactly-once service, with the
    approver checks of that request (a request the user may not decide is refused and recorded, like a
    click), and only as its row showed it — a request whose content changed since the page was drawn is
    left unchanged and listed."""
    form = BatchForm(request.POST)
    filters = InboxFilterForm(_query_of(request.POST.get("next", "")))
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return _inbox(request, filters, status=400)  # nothing was decided
    data = form.cleaned_data
    shown: dict[str, str] = data["ids"]
    requests = selectors.confirmations_by_ids(ids=list(shown))
    done: list[str] = []
    left: list[str] = []
    for pk, digest in shown.items():
        confirmation = requests.get(uuid.UUID(pk))
        if confirmation is None or not selectors.team_sees(request.user, confirmation):
            left.append(f"{pk[:8]}: no such request")
            continue
        label = f"{confirmation.tool_name} ({pk[:8]})"
        try:
            outcome = services.confirmation_respond(
                callback=Callback(
                    confirmation_id=pk,
                    decision=data["decision"],
                    actor=request.user.get_username(),
                    reason=data["reason"],
                ),
                actor_kind="web",
                with_card=False,
                on_behalf=lambda row, digest=digest: _as_shown(request.user, row, digest),
            )
        except _NotDecidedHere as not_here:
            left.append(f"{label}: {not_here.why}")
            continue
        (done if outcome.applied else left).append(label if outcome.applied else f"{label}: {outcome.message}")
    verb = "Approved" if data["decision"] == "approve" else "Rejected"
    if done:
        messages.success(request, f"{verb} {len(done)} request(s): {', '.join(done)}.")
    if left:
        messages.warning(request, f"Left unchanged ({len(left)}): " + "; ".join(left))
    return redirect(_inbox_url(filters))


def _query_of(next_path: str) -> QueryDict:
    """The query string of the inbox's address the form was posted from (only its filters are read)."""
    return QueryDict(urlsplit(next_path).query)


def _inbox_url(filters: InboxFilterForm) -> str:
    """Back to the inbox with the same filters and grouping — rebuilt from their cleaned values, so the
    form's `next` can send nobody anywhere else."""
    url = reverse("approval-inbox")
    if not filters.is_valid():
        return url
    kept = {key: value for key, value in filters.cleaned_data.items() if value not in ("", None)}
    return f"{url}?{urlencode(kept)}" if kept else url
