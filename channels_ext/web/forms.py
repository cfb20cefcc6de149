"""The approval page's one form: Approve, or Reject with a reason."""

from __future__ import annotations

from django import forms


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(required=False, max_length=2000, strip=True)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("decision") == "reject" and not data.get("reason"):
            # The agent (and the person behind it) is told why; an empty reason tells them nothing.
            self.add_error("reason", "Say why you reject this request; the agent is told your reason.")
        return data
