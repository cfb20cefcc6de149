"""A pre-tool-use body is validated with its serializer's fields bound once per class
(`approvals.api.views.StrictSerializer.fields`): one body's validation leaves nothing behind for the next."""

from __future__ import annotations

from approvals.api.views import PreToolUseApi

Input = PreToolUseApi.InputSerializer


def test_bodies_validated_one_after_another_or_interleaved_are_judged_each_on_its_own():
    good = Input(data={"session_id": "s", "tool_name": "pay", "tool_args": {"amount": 3}})
    bad = Input(data={"session_id": "", "tool_name": 3, "tool_args": [], "bogus": 1})
    other = Input(data={"session_id": "t", "tool_name": "ship", "metadata": {"k": "v"}, "wait_seconds": 5})

    assert good.fields is bad.fields  # shared
    assert not bad.is_valid()
    assert good.is_valid() and other.is_valid()

    assert set(bad.errors) == {"session_id", "tool_name", "tool_args"}
    assert good.validated_data["tool_args"] == {"amount": 3} and good.validated_data["metadata"] == {}
    assert good.validated_data["wait_seconds"] == 0 and other.validated_data["wait_seconds"] == 5
    assert other.validated_data["metadata"] == {"k": "v"} and other.validated_data["tool_args"] == {}
    unknown = Input(data={"session_id": "x", "tool_name": "y", "bogus": 1})
    assert not unknown.is_valid() and set(unknown.errors) == {"bogus"}


def test_a_serializer_given_a_context_or_used_as_a_field_binds_fields_of_its_own():
    shared = Input(data={}).fields
    with_context = Input(data={}, context={"request": None})
    many = Input(data=[{}], many=True)

    assert with_context.fields is not shared
    assert all(field.parent is with_context for field in with_context.fields.values())
    assert many.child.fields is not shared
    assert Input(data={}, partial=True).fields is not shared
