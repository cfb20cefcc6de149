"""The approval page's forms: Approve (as proposed, with edited arguments, or for a scope), or Reject
with a reason; and the inbox's batch of the same."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms

from gateway_contract import CallbackError, unsign_shown_ids

# An edited argument is posted as `edit.<path>` = its new value as typed (read by the gateway as the
# JSON type of the value it replaces: docs/approving.md).
EDIT_PREFIX = "edit."
REJECT_NEEDS_REASON = "Say why you reject this request; the agent is told your reason."


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")], required=False)
    grant = forms.IntegerField(required=False, min_value=0, max_value=99)  # approve for the offered scope at this index
    whole_turn = forms.BooleanField(required=False)  # decide the pending calls of the turn the page listed
    # With whole_turn: those calls, signed when the page was drawn (`sign_shown_ids`), so a call that
    # joined the turn since stays pending and an edited list is refused.
    shown = forms.CharField(required=False, max_length=8000, strip=False)
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
        data["shown_ids"] = self._shown_ids() if data.get("whole_turn") else None
        return data

    def _shown_ids(self) -> tuple[str, ...] | None:
        """The calls the page offered to decide together; None when the form carries none (a page
        drawn before it did: the service decides nothing and says the page is out of date)."""
        shown = self.cleaned_data.get("shown")
        if not shown:
            return None
        try:
            return unsign_shown_ids(shown)[1]
        except CallbackError:
            self.add_error(None, "The list of calls to decide together was changed; reload the page and decide again.")
            return None

    def _typed_edits(self) -> dict[str, str]:
        """Every `edit.<path>` posted, as typed. What each text means (its JSON type), which paths
        may change and whether a value changed at all is the service's to say, so a forged field is
        refused, not dropped."""
        return {key[len(EDIT_PREFIX) :]: self.data.get(key, "") for key in self.data if key.startswith(EDIT_PREFIX)}

    def posted_text(self, path: str) -> str | None:
        """What was typed for an edited argument (to show it again beside its error)."""
        return self.data.get(EDIT_PREFIX + path) if self.is_bound else None


class RequestIdsField(forms.Field):
    """Several requests (checkboxes of the same name), each `<id>:<digest of what the row showed>`
    (`selectors.confirmation_shown_digest`; a bare id, from a page drawn before rows carried it, has
    none); each id must be a UUID, at most `MAX_BATCH`. Cleans to {id: digest or ""}, in order."""

    widget = forms.MultipleHiddenInput
    MAX_BATCH = 100

    def to_python(self, value: Any) -> dict[str, str]:
        values = list(value or [])
        if len(values) > self.MAX_BATCH:
            raise forms.ValidationError(f"At most {self.MAX_BATCH} requests at once.")
        shown: dict[str, str] = {}
        for text in values:
            pk, _, digest = str(text).partition(":")
            try:
                shown.setdefault(str(uuid.UUID(pk)), digest[:64])
            except ValueError:
                raise forms.ValidationError("Not a request id.") from None
        return shown


class BatchForm(forms.Form):
    """The inbox: several requests decided at once, each on its own, each as its row showed it."""

    ids = RequestIdsField(error_messages={"required": "Select requests first."})
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(required=False, max_length=2000, strip=True)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("decision") == "reject" and not data.get("reason"):
            self.add_error("reason", REJECT_NEEDS_REASON)
        return data


GROUP_BY = [("", "nothing"), ("agent", "agent"), ("tool", "tool"), ("risk", "risk")]
RISKS = [("", "any risk"), ("high", "high"), ("medium", "medium"), ("low", "low")]
# The age filter's suggested choices, in minutes (any whole number of minutes is accepted).
AGES = [(5, "5 min"), (15, "15 min"), (60, "1 hour"), (240, "4 hours"), (1440, "1 day")]


class InboxFilterForm(forms.Form):
    """The inbox's filters and grouping, from its query string (`?agent=…&tool=…&risk=high&older_than=15&group=risk`)."""

    agent = forms.CharField(required=False, max_length=200)
    tool = forms.CharField(required=False, max_length=200)
    risk = forms.ChoiceField(required=False, choices=RISKS)
    older_than = forms.IntegerField(required=False, min_value=0, max_value=60 * 24 * 366)  # minutes
    group = forms.ChoiceField(required=False, choices=GROUP_BY)

    def filters(self) -> dict[str, Any]:
        """The selector's keyword arguments (nothing for a filter left empty)."""
        data = self.cleaned_data
        return {
            "agent": data.get("agent") or "",
            "tool": data.get("tool") or "",
            "risk": data.get("risk") or "",
            "older_than": data.get("older_than") or None,
        }
