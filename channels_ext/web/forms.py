"""The approval page's forms: Approve (as proposed, with edited arguments, or for a scope), or Reject
with a reason; and the inbox's batch of the same."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms

# An edited argument is posted as `edit.<path>` = its new value in JSON.
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
        data["edits"] = self._edits() if data.get("decision") == "approve" else {}
        return data

    def _edits(self) -> dict[str, Any]:
        """Every `edit.<path>` posted, parsed as JSON. Which paths may change (and whether a value
        changed at all) is the service's to say, so a forged field is refused, not dropped."""
        edits: dict[str, Any] = {}
        bad: list[str] = []
        for key in self.data:
            if not key.startswith(EDIT_PREFIX):
                continue
            path, text = key[len(EDIT_PREFIX) :], self.data.get(key, "")
            try:
                edits[path] = json.loads(text)
            except ValueError as exc:
                bad.append(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
        for problem in bad:
            self.add_error(None, f"{problem}. Strings need quotes: \"like this\".")
        return edits

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
