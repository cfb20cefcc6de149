"""How a repeat ask rebuilds the arguments of a call with masked values (approvals/arguments.py): the
record keeps the masked paths — exact keys, list items by index — and where each value comes back from;
the values come from the repeated call, never from what was stored."""

from __future__ import annotations

import json

from approvals.arguments import mask_record, masked_paths, replayed_args

MASK = "[redacted]"


def test_masked_values_deep_in_objects_and_lists_come_back_from_the_agents_call():
    own = {"cards": [{"number": "4111 1111", "exp": "12/30"}, {"number": "5500 0000", "exp": "01/31"}], "memo": "x"}
    answered = {**own, "memo": "x (capped)"}  # a hook rewrote memo, not a masked value
    stored = {**answered, "cards": [{"number": MASK, "exp": "12/30"}, {"number": MASK, "exp": "01/31"}]}

    record = mask_record(own=own, answered=answered, stored=stored)

    assert record == {"agent": [["cards", 0, "number"], ["cards", 1, "number"]], "hook": []}
    assert "4111" not in json.dumps(record)
    assert replayed_args(stored, own=own, record=record) == (answered, [])
    assert masked_paths(answered, stored) == {"cards.0.number", "cards.1.number"}


def test_a_key_with_a_dot_in_its_name_is_put_back_where_it_was():
    own = {"a.b": "secret", "a": {"b": "public"}}
    stored = {"a.b": MASK, "a": {"b": "public"}}

    record = mask_record(own=own, answered=own, stored=stored)

    assert record["agent"] == [["a.b"]]
    assert replayed_args(stored, own=own, record=record) == (own, [])


def test_a_masked_value_a_hook_rewrote_or_added_is_never_taken_from_the_agent():
    own = {"api_token": "vault:payments", "amount": 5}
    answered = {"api_token": "tok_live", "amount": 5, "signature": "sig_live"}  # rewrote one, added one
    stored = {"api_token": MASK, "amount": 5, "signature": MASK}

    record = mask_record(own=own, answered=answered, stored=stored)

    assert record == {"agent": [], "hook": [["api_token"], ["signature"]]}
    assert replayed_args(stored, own=own, record=record) == (stored, ["api_token", "signature"])


def test_a_value_equal_only_in_python_is_not_the_agents_own():
    own = {"pin": 1234}
    answered = {"pin": 1234.0}  # JSON tells these apart; a hook changed it
    stored = {"pin": MASK}

    assert mask_record(own=own, answered=answered, stored=stored)["hook"] == [["pin"]]
