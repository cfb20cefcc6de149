"""The statements the gateway writes out itself (`approvals.services.records.insert_statement`) send
each value as Django's own preparing would: the values whose preparing changes nothing are passed as
they are, every other one is prepared by Django, and the two are checked against each other here, for
every field of every model, with the values the services give and with the odd ones a caller might."""

from __future__ import annotations

import datetime as dt
import uuid
import warnings
from decimal import Decimal
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, models
from django.utils import timezone

from approvals.services.records import _insert_head, insert_statement

pytestmark = pytest.mark.django_db

AWARE = timezone.now()
NAIVE = dt.datetime(2026, 1, 2, 3, 4, 5)
# Values of many types, sane and odd, tried in every field that can hold them (Django's preparing may
# refuse some: those are skipped, as long as the statement refuses them alike).
SAMPLES: list[Any] = [
    None, "", "text", "42", 0, 7, -3, 2**40, True, False, 1.5, Decimal("2.5"), AWARE, NAIVE, dt.date(2026, 1, 2),
    uuid.uuid4(), str(uuid.uuid4()), {}, {"a": [1, "b", None]}, [], ["x"],
]


def prepared_by_django(field: models.Field, value: Any) -> Any:
    return field.get_db_prep_save(value, connection=connection)


def same(a: Any, b: Any) -> bool:
    """The same value of the same type, as psycopg would send it (a Jsonb wrapper compares by its repr)."""
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("model", [m for m in apps.get_models() if not m._meta.proxy], ids=lambda m: m._meta.label)
def test_every_value_is_sent_as_django_prepares_it(model):
    for with_id in (True, False):
        _, columns = _insert_head(model, connection.vendor, with_id, "")
        for name, field, *_ in columns:
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                continue  # (its value is the time of the INSERT, set by pre_save)
            if field is model._meta.auto_field:
                continue  # (whether it is given decides which columns are written)
            for value in SAMPLES:
                instance = model()
                if with_id and model._meta.auto_field is not None:
                    setattr(instance, model._meta.auto_field.attname, 1)
                setattr(instance, field.attname, value)
                with warnings.catch_warnings(record=True):  # a naive datetime: Django warns, either way
                    warnings.simplefilter("always")
                    try:
                        expected = prepared_by_django(field, value)
                    except Exception as exc:  # noqa: BLE001 - Django refuses it: so must the statement
                        with pytest.raises(type(exc)):
                            insert_statement(instance)
                        continue
                    _, params = insert_statement(instance)
                assert same(params[name], expected), (model._meta.label, field.name, value, params[name], expected)


def test_a_new_request_is_written_with_the_values_it_was_given(django_user_model):
    """End to end: a request created through the service reads back as it was built."""
    from approvals import services
    from approvals.models import Agent, ConfirmationRequest
    from tests.conftest import apply_config

    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: writer
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice, bob], timeout_seconds: 600,
             approvals_required: 2}]
"""
    )
    agent = Agent.objects.get(name="writer")
    answer = services.tool_call_pre(agent=agent, session_id="s", tool_name="pay", tool_args={"amount": 3, "to": "bob"})

    row = ConfirmationRequest.objects.get(pk=answer.confirmation_id)
    assert (row.tool_name, row.tool_args, row.approvals_required, row.agent_id) == ("pay", {"amount": 3, "to": "bob"}, 2, agent.pk)
    assert row.expires_at is not None and abs((row.expires_at - row.created_at).total_seconds() - 600) < 5
