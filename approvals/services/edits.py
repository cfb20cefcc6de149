"""What an approval may carry, checked under the request's row lock before anything is decided: edited
arguments (the paths the gate allows, each keeping its JSON type, none the agent's masks would hide,
the edited call judged again by the agent's chain) and a scope to approve for (docs/approving.md)."""

from __future__ import annotations

from typing import Any

from approvals import selectors
from approvals.arguments import checked_edit_value, edit_from_text, get_path, json_type, with_edits
from approvals.models import ConfirmationRequest
from gateway_contract import Callback
from hooks import state as hook_state
from hooks.base import pre_tool_use_context
from hooks.chain import mask_args, run_chain

EDIT_NOT_ALLOWED = "This request's gate does not allow editing its arguments."


class Refused(Exception):
    """Why an approval cannot take what it carries (an edit, a scope): nothing is decided."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None):
        self.code = code
        self.message = message
        self.data = data or {}  # more for the `refused_click` event


def _edited_values(confirmation: ConfirmationRequest, callback: Callback) -> dict[str, Any]:
    """The click's edits as JSON values: typed texts read, values checked, each as the JSON type of
    the value it replaces or the type the gate declares (`edit_types`); refuses one that is not."""
    declared = confirmation.edit_types or {}
    values: dict[str, Any] = {}
    try:
        for path, text in (callback.typed_edits or {}).items():
            if text.strip():  # left empty: unchanged
                expected = declared.get(path) or json_type(get_path(confirmation.tool_args, path))
                values[path] = edit_from_text(path, text, expected=expected)
        for path, value in (callback.edits or {}).items():
            expected = declared.get(path) or json_type(get_path(confirmation.tool_args, path))
            values[path] = checked_edit_value(path, value, expected=expected)
    except ValueError as exc:
        raise Refused("edit_refused", str(exc)) from None
    return values


def checked_edits(confirmation: ConfirmationRequest, callback: Callback) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The edits that change something, and the approved arguments as stored; refuses what the gate does not allow.

    Only the paths fixed when the request was made (`editable_paths`: the gate's `allow_edit`
    minus masked values) may be given at all, each keeping its JSON type (`_edited_values`). A new value
    that the agent's masks (redact) would hide is refused too: the gateway never stores secrets,
    and an edit is stored to be shown and audited.
    """
    given = {path for path, text in (callback.typed_edits or {}).items() if text.strip()} | set(callback.edits or {})
    allowed = list(confirmation.editable_paths or [])
    # An input for any other path is refused, before its value is read and even if it holds the proposed
    # value: no form the gateway draws has one, so the click was crafted, and it decides nothing.
    outside = sorted(given - set(allowed))
    if outside and not allowed:
        raise Refused("edit_refused", EDIT_NOT_ALLOWED)
    if outside:
        raise Refused(
            "edit_refused",
            f"You may not change {', '.join(outside)}; the editable arguments are {', '.join(allowed)}.",
        )
    proposed = _edited_values(confirmation, callback)
    if not proposed:
        return {}, None
    changed = {path: value for path, value in proposed.items() if get_path(confirmation.tool_args, path) != value}
    if not changed:
        return {}, None  # nothing differs: a plain approval
    approved = with_edits(confirmation.tool_args, changed)
    _, hooks = selectors.agent_hooks(agent=confirmation.agent)
    masked = mask_args(hooks, approved)
    hidden = sorted(path for path in changed if get_path(masked, path) != get_path(approved, path))
    if hidden:
        raise Refused(
            "edit_refused",
            f"The new value of {', '.join(hidden)} would be redacted; a secret cannot be set by an edit "
            "(the gateway never stores one).",
        )
    return changed, approved


def judged_again(confirmation: ConfirmationRequest, approved_args: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the agent's current pre-tool-use chain on the edited call, as the call itself was judged
    (same agent, session, user, metadata, turn; the session's context as it is now); every hook's
    answer, or `Refused` with why the approval cannot take (docs/approving.md, "Judged again").

    Check only (`HookContext.check_only`): a rate limit looks without counting, `command` and
    `webhook` hooks are told. The hooks see the arguments as stored — a masked value as its mask.
    Refused: a deny from any hook; an `ask` routed to another gate than this request's (its
    approvers, not these, must approve such a call); hooks that would rewrite the edited
    arguments (the agent would not run what the approver approved). This request's own gate
    asking again is the approval being given.

    Run under the request's row lock (the caller's): the verdict and the decision cannot be split
    by another click, a cancel or the sweep, so nothing but the deadline (the caller's) needs
    checking again afterwards. The price:
    a slow `command` or `webhook` hook holds that one row (never longer than its timeout), so
    other clicks on the same request wait for it; the sweep skips a locked row and waiting
    agents read without locks.
    """
    agent = confirmation.agent
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = pre_tool_use_context(
        agent=agent.name,
        session_id=confirmation.session_id,
        user_id=confirmation.user_id,
        metadata=confirmation.metadata,
        tool_name=confirmation.tool_name,
        tool_args=approved_args,
        tool_call_id=confirmation.tool_call_id,
        turn_id=confirmation.turn_id,
        agent_read_only=agent.read_only,  # as of the row lock's read: a switch flipped since the ask counts
        config_version=version,
        session=hook_state.session_values(agent=agent.name, session_id=confirmation.session_id),
        check_only=True,
    )
    verdict = run_chain(hooks, ctx)
    data = {"judged_again": verdict.hook_decisions}
    if verdict.decision == "deny":
        why = verdict.reason.rstrip(". ") or "no reason given"
        refused = f"The edited call is refused by {verdict.decided_by}: {why}. Nothing was decided."
        raise Refused("edit_refused", refused, data)
    if verdict.ask is not None and verdict.ask.gate != confirmation.hook_name:
        raise Refused(
            "edit_refused",
            f"The edited call needs approval through {verdict.ask.gate} ({verdict.reason.rstrip('. ')}), "
            f"not this request's {confirmation.hook_name}. Nothing was decided: approve it as proposed, "
            "or reject it so the agent can ask again.",
            data,
        )
    if verdict.tool_args != approved_args:
        keys = {*verdict.tool_args, *approved_args}
        rewritten = sorted(key for key in keys if verdict.tool_args.get(key) != approved_args.get(key))
        raise Refused(
            "edit_refused",
            f"The agent's hooks would change the edited arguments ({', '.join(rewritten)}), so the agent would not "
            "run what you approve. Nothing was decided: edit them to values the hooks leave as they are.",
            data,
        )
    return verdict.hook_decisions


def checked_grant(confirmation: ConfirmationRequest, callback: Callback, *, edited: bool) -> dict[str, Any] | None:
    """The grant option an approval asks for, if any; refuses one the request does not offer."""
    if callback.grant is None:
        return None
    options = confirmation.grant_options or []
    if not 0 <= callback.grant < len(options):
        raise Refused("grant_refused", "This request offers no such scope to approve for.")
    if edited:
        raise Refused(
            "grant_refused", "A scope approves the arguments as proposed; to change them, edit and approve once."
        )
    return options[callback.grant]
