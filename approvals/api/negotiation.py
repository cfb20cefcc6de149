"""The API answers JSON whatever a request's `Accept` header says (docs/reference/api.md).

DRF answers 406 when no renderer matches `Accept`; the ASGI hot path (`approvals.api.asgi`) never looks at
it. So that every route behaves alike, and the OpenAPI document needs no 406 anywhere, a request whose
`Accept` nothing matches gets the view's first renderer (JSON for every API view) instead of a 406.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class FirstRendererIfNoneAccepted(DefaultContentNegotiation):
    """DRF's negotiation (`?format=` and `Accept`, as the schema view uses them), falling back to the first
    renderer rather than answering 406."""

    def select_renderer(self, request: Any, renderers: list[Any], format_suffix: str | None = None) -> tuple[Any, str]:
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type
