"""The oversight page (docs/web-and-admin.md, "Oversight"): whether the people approving read what they
approve — time to decide, approval rate, answers faster than a card can be read, requests that expired
with nobody deciding — per day as charts, per approver and per tool as tables.

Staff who may view confirmation requests see it, for their teams' requests only (a superuser: all),
as the request list does. `?days=` is one of `selectors.oversight.WINDOWS`; anything else is a 400.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse

from approvals import selectors
from approvals.admin.charts import Series, bar_chart, count_text, line_chart, percent_text, seconds_text
from approvals.selectors.oversight import DEFAULT_WINDOW, WINDOWS, Figures, Oversight

TEMPLATE = "admin/approvals/oversight.html"


def oversight_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """The page, for `model_admin` (the confirmation requests' admin: its permission, its site)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    asked = request.GET.get("days", str(DEFAULT_WINDOW))
    if asked not in {str(days) for days in WINDOWS}:
        choices = ", ".join(str(days) for days in WINDOWS)
        return HttpResponseBadRequest(f"days must be one of {choices}, not {asked[:20]!r}", content_type="text/plain")
    fast = settings.GATEWAY_OVERSIGHT_FAST_SECONDS
    figures = selectors.oversight_figures(user=request.user, days=int(asked), fast_seconds=fast)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": f"Oversight: the last {figures.days} days",
        "oversight": figures,
        "windows": [(days, days == figures.days) for days in WINDOWS],
        "summary": _row("All approvers", "", figures.total),
        "charts": _charts(figures),
        "approvers": [_row(line.label, ", ".join(line.identities) or line.key, line.figures) for line in figures.approvers],
        "tools": [_row(line.label, "", line.figures) for line in figures.tools],
    }
    return TemplateResponse(request, TEMPLATE, context)


def _charts(figures: Oversight) -> list[Any]:
    days = [line.key for line in figures.daily]
    daily: list[Figures] = [line.figures for line in figures.daily]
    return [
        line_chart(
            title="Time to decide (from the card shown to each answer)",
            days=days,
            series=[
                Series("p50", "p50", [f.p50 for f in daily]),
                Series("p90", "p90", [f.p90 for f in daily]),
            ],
            text=seconds_text,
        ),
        line_chart(
            title="Approval rate (approvals among approvals and rejections)",
            days=days,
            series=[Series("approval rate", "rate", [f.approval_rate for f in daily])],
            text=percent_text,
            top=1.0,
        ),
        bar_chart(
            title=f"Fast answers (under {figures.fast_seconds} s)",
            days=days,
            values=[f.fast for f in daily],
            css="fast",
            name="fast answers",
        ),
        bar_chart(
            title="Requests expired with nobody deciding",
            days=days,
            values=[f.expired for f in daily],
            css="expired",
            name="expired",
        ),
    ]


def _row(label: str, key: str, figures: Figures) -> dict[str, Any]:
    """One table row, as read (the template escapes every value)."""
    return {
        "label": label,
        "key": key if key != label else "",
        "answers": figures.answers,
        "p50": seconds_text(figures.p50),
        "p90": seconds_text(figures.p90),
        "approval_rate": percent_text(figures.approval_rate),
        "fast": figures.fast,
        "fast_share": percent_text(figures.fast / figures.answers) if figures.answers else "—",
        "expired": count_text(figures.expired),
    }

