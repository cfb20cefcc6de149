"""The approval page's forms: Approve (as proposed, with edited arguments, or for a scope), or Reject
with a reason; and the inbox's batch of the same."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms

# An edited argument is posted as `edit.<path>` = its new value as typed (read by the gateway as the
# JSON type of the value it replaces: docs/approving.md).
EDIT_PREFIX = "edit."
REJECT_NEEDS_REASON = "Say why you reject this request; the agent is told your reason."


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")], required=False)
    grant = forms.IntegerField(required=False, min_value=0, max_value=99)  # approve for the offered scope at this index
    whole_turn = forms.BooleanField(required=False)  # decide every pending call of the turn
    reason = forms.CharField(required=False, max_length=2000, strip=True)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("grant") is not None:
            data["decision"] = "approve"
        if not data.get("decision"):
            self.add_error("decision", "Choose Approve or Reject.")
        if data.get("decision") == "reject" and not data.get("reason"):
            # The agent (and the person behind it) is told why; an empty reason tells them nothing.
            self.add_error("reason", REJECT_NEEDS_REASON)
        data["typed_edits"] = self._typed_edits() if data.get("decision") == "approve" else {}
        return data

    def _typed_edits(self) -> dict[str, str]:
        """Every `edit.<path>` posted, as typed. What each text means (its JSON type), which paths
        may change and whether a value changed at all is the service's to say, so a forged field is
        refused, not dropped."""
        return {key[len(EDIT_PREFIX) :]: self.data.get(key, "") for key in self.data if key.startswith(EDIT_PREFIX)}

    def posted_text(self, path: str) -> str | None:
        """What was typed for an edited argument (to show it again beside its error)."""
        return self.data.get(EDIT_PREFIX + path) if self.is_bound else None


class RequestIdsField(forms.Field):
    """Several request ids (checkboxes of the same name); each must be a UUID, at most `MAX_BATCH`."""

    widget = forms.MultipleHiddenInput
    MAX_BATCH = 100

    def to_python(self, value: Any) -> list[str]:
        values = list(value or [])
        if len(values) > self.MAX_BATCH:
            raise forms.ValidationError(f"At most {self.MAX_BATCH} requests at once.")
        try:
            return list(dict.fromkeys(str(uuid.UUID(str(v))) for v in values))
        except ValueError:
            raise forms.ValidationError("Not a request id.") from None


class BatchForm(forms.Form):
    """The inbox: several requests decided at once, each on its own."""

    ids = RequestIdsField(error_messages={"required": "Select requests first."})
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(required=False, max_length=2000, strip=True)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("decision") == "reject" and not data.get("reason"):
            self.add_error("reason", REJECT_NEEDS_REASON)
        return data
