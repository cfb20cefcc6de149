"""What is written beside a change, in its transaction: its events, its outbox rows, its notification.

An event is one line of a request's append-only history, linked into its
agent's tamper-evident chain in the same transaction (docs/audit.md). An outbox row is work
to do outside the database (post a card, redraw the cards, remind the
approvers, POST a webhook): written with the change, queued for a worker once
the change commits, and re-sent by beat's relay if no worker ever picked it up.
A notification wakes the agents waiting on the request, in every server
process, carrying the request's new state (`approvals.types.ConfirmationState`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import re
import uuid
from typing import Any

from celery import current_app
from django.db import connection, models, transaction
from django.db.models import BooleanField, Case, Q, Value, When
from django.db.models.expressions import RawSQL

from approvals.models import (
    ApproverResponse,
    AuditAction,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    Outbox,
    OutboxKind,
    OutboxStatus,
)
from approvals.services.audit import audit_append
from gateway_contract import draws_itself, self_drawing_kinds
from gateway_utils import realtime, tracing

logger = logging.getLogger("approvals.services")

# The Celery tasks that deliver outbox rows (`approvals.tasks`), queued by name so that writing
# a row needs no import of the tasks that run services: one row, or many written together.
DELIVER_OUTBOX_TASK = "approvals.tasks.deliver_outbox"
DELIVER_OUTBOX_BATCH_TASK = "approvals.tasks.deliver_outbox_batch"
OUTBOX_BATCH = 200  # rows per message of a batch


def event_record(
    confirmation: ConfirmationRequest | Any,
    kind: str,
    *,
    actor: str = "",
    channel: str = "",
    message: str = "",
    data: dict[str, Any] | None = None,
    notify: bool = False,
) -> None:
    """Append one event to a request's history (`confirmation`: the row or its id) and to its agent's chain.
    `notify`: also wake the request's waiters with its state as the transaction left it
    (`changes_notify`), in the same statement as the event."""
    if isinstance(confirmation, ConfirmationRequest):
        confirmation_id, agent_id = confirmation.pk, confirmation.agent_id
    else:
        confirmation_id = confirmation
        agent_id = ConfirmationRequest.objects.values_list("agent_id", flat=True).get(pk=confirmation_id)
    event = ConfirmationEvent(
        confirmation_id=confirmation_id, kind=kind, actor=actor, channel=channel, message=message, data=data or {}
    )
    wrap, params = "", {}
    if notify and connection.vendor == "postgresql":
        state = realtime.notify_select(_state_sql("%(notify_ids)s"), channel="%(notify_channel)s")
        wrap = f"WITH added AS ({{}}) SELECT (SELECT id FROM added), ({state})"
        params = {"notify_ids": [str(confirmation_id)], "notify_channel": realtime.CHANNEL}
    with transaction.atomic(savepoint=False):
        row_insert(event, wrap=wrap, params=params)
        audit_append(agent_id=agent_id, action=AuditAction.EVENT, row=event)


def outbox_add(
    confirmation: ConfirmationRequest | Any,
    kind: str,
    *,
    dedupe_key: str,
    channel: Channel | None = None,
    payload: dict[str, Any] | None = None,
    **row: Any,
) -> int | None:
    """Write an outbox row (idempotent on `dedupe_key`: ONE statement, no read first) and queue its
    delivery after commit; the new row's id, or None if the key was there already. `row` sets
    other columns — a row written `status=SENT` is done already, and is not queued."""
    confirmation_id = confirmation.pk if isinstance(confirmation, ConfirmationRequest) else confirmation
    outbox = Outbox(
        confirmation_id=confirmation_id, kind=kind, channel=channel, payload=payload or {}, dedupe_key=dedupe_key, **row
    )
    return _outbox_insert(outbox)


def redraw_add(
    confirmation_id: Any,
    kind: str,
    *,
    dedupe_key: str,
    payload: dict[str, Any] | None = None,
    locked: ConfirmationRequest | None = None,
) -> None:
    """Write an UPDATE or REMIND row for a request — only if a card shows it somewhere that does not
    draw itself (`gateway_contract.ChannelKind.draws_itself`): its own card, or its turn's card
    on its lead. A request shown only on the web page needs no redraw (the page reads the row).
    One statement: the check rides on the INSERT. `locked`: the request's row (with its channel)
    read under its row lock in this transaction — if it is on a channel that draws itself, never
    escalated and not on a turn's card, it has no other card (cards are posted only at creation
    and escalation, which waits for the lock), and nothing is written or sent."""
    if (
        locked is not None
        and draws_itself(locked.channel.kind)
        and locked.escalated_at is None
        and locked.batch_lead_id is None
    ):
        return
    cards = connection.ops.quote_name(Outbox._meta.db_table)
    channels = connection.ops.quote_name(Channel._meta.db_table)
    requests = connection.ops.quote_name(ConfirmationRequest._meta.db_table)
    kinds = self_drawing_kinds() or [""]
    where = (
        f"EXISTS (SELECT 1 FROM {cards} c JOIN {channels} ch ON ch.id = c.channel_id "
        f"WHERE c.kind = %(card_kind)s AND ch.kind NOT IN ({', '.join(f'%(k{i})s' for i in range(len(kinds)))}) "
        f"AND (c.confirmation_id = %(request)s "
        f"OR c.confirmation_id = (SELECT r.batch_lead_id FROM {requests} r WHERE r.id = %(request)s)))"
    )
    params = {"card_kind": OutboxKind.CARD, "request": confirmation_id, **{f"k{i}": k for i, k in enumerate(kinds)}}
    outbox = Outbox(confirmation_id=confirmation_id, kind=kind, payload=payload or {}, dedupe_key=dedupe_key)
    _outbox_insert(outbox, where=where, params=params)


def needing_redraw(leads: dict[Any, Any]) -> set[Any]:
    """Of these requests (`{id: its turn's lead or None}`), those a card shows somewhere that does not
    draw itself — the ones `redraw_add` would write a row for. One query, however many."""
    owners = {*leads, *(lead for lead in leads.values() if lead is not None)}
    shown = set(
        Outbox.objects.filter(kind=OutboxKind.CARD, confirmation_id__in=owners)
        .exclude(channel__kind__in=self_drawing_kinds())
        .values_list("confirmation_id", flat=True)
    )
    return {pk for pk, lead in leads.items() if pk in shown or lead in shown}


def _outbox_insert(outbox: Outbox, *, where: str = "", params: dict[str, Any] | None = None) -> int | None:
    if not row_insert(outbox, where=where, params=params, unless_conflict="dedupe_key"):
        return None
    outbox_queued(outbox)
    return outbox.pk


def outbox_queued(outbox: Outbox) -> None:
    """A new outbox row just written: queued for a worker once the transaction commits — unless it was
    written as done already (`status=SENT`: a card that is the gateway's own page) or kept for its
    channel's digest (`status=HELD`: approvals.services.digests)."""
    if outbox.status == OutboxStatus.PENDING:
        transaction.on_commit(lambda: enqueue(DELIVER_OUTBOX_TASK, outbox.pk), robust=True)


def insert_statement(instance: Any, *, where: str = "", prefix: str = "") -> tuple[str, dict[str, Any]]:
    """`INSERT INTO <table> (<columns>) SELECT <values> WHERE <where>` for one unsaved model instance,
    with named parameters (`<prefix>c0`, `<prefix>c1`, …), for the writes the ORM cannot make one
    statement of: a conditional insert, an insert that skips a conflict, one that carries its audit
    entry, several inserts in one statement (`rows_insert`)."""
    meta = instance._meta
    with_id = getattr(instance, meta.auto_field.attname) is not None if meta.auto_field else True
    head, columns = _insert_head(type(instance), connection.vendor, with_id, prefix)
    params = {}
    for name, field, as_is, number in columns:
        value = field.pre_save(instance, add=True)
        kind = type(value)
        if kind in as_is and (kind is not dt.datetime or value.utcoffset() is not None):
            params[name] = value
        elif kind is int and number is not None:
            params[name] = number(value)
        else:
            params[name] = field.get_db_prep_save(value, connection=connection)
    # (`WHERE true` also keeps SQLite from reading a following ON CONFLICT as a join's.)
    return f"{head} WHERE {where or 'true'}", params


# What Django's `get_db_prep_save` makes of a value on PostgreSQL, by the exact class of its field (a
# subclass may prepare its values otherwise): a value of these exact types is sent as it is (a datetime
# only if it is aware: Django makes a naive one aware, with a warning), an int of an integer field as
# the psycopg type Django wraps it in (`Int4`…: the statement's parameter types stay the same, and it
# stays prepared). Preparing a request's ~80 values one by one through Django's chain of calls took
# ~0.2 ms of every request created; the rest (JSON, a naive datetime, a number given as text…) is
# prepared by Django (tests/approvals/test_insert_statement.py compares the two).
_NONE = type(None)
_AS_IS: dict[type, frozenset[type]] = {
    **dict.fromkeys((models.CharField, models.TextField, models.SlugField), frozenset({str, _NONE})),
    **dict.fromkeys((models.AutoField, models.BigAutoField), frozenset({int, _NONE})),
    **dict.fromkeys(
        (models.IntegerField, models.BigIntegerField, models.SmallIntegerField, models.PositiveIntegerField,
         models.PositiveSmallIntegerField, models.PositiveBigIntegerField),
        frozenset({_NONE}),  # (and an int: `_number`)
    ),  # fmt: skip
    models.BooleanField: frozenset({bool, _NONE}),
    models.UUIDField: frozenset({uuid.UUID, _NONE}),
    models.DateTimeField: frozenset({dt.datetime, _NONE}),
    models.JSONField: frozenset({_NONE}),  # (SQL NULL)
}


def _prepared_as(field: Any, vendor: str) -> tuple[frozenset[type], Any]:
    """The types of value `field` sends unchanged (none: every value goes through Django's preparing),
    and what an int of an integer field is wrapped in."""
    if vendor != "postgresql":
        return frozenset(), None
    if type(field) in (models.ForeignKey, models.OneToOneField):
        as_is, number = _prepared_as(field.target_field, vendor)
        return as_is | {_NONE}, number
    as_is = _AS_IS.get(type(field), frozenset())
    if as_is and int not in as_is and isinstance(field, models.IntegerField):
        return as_is, connection.ops.integerfield_type_map[field.get_internal_type()]
    return as_is, None


@functools.cache
def _insert_head(model: type, vendor: str, with_id: bool, prefix: str = "") -> tuple[str, list[tuple[str, Any, Any, Any]]]:
    """The `INSERT … SELECT <placeholders>` of `insert_statement`, once per model, and for each column its
    parameter's name, its field, and how its values are prepared (`_prepared_as`)."""
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if with_id or f is not meta.auto_field]
    quote = connection.ops.quote_name
    if vendor == "postgresql":  # a bare parameter in a SELECT list has no type of its own
        placeholders = ", ".join(f"%({prefix}c{i})s::{field.db_type(connection)}" for i, field in enumerate(fields))
    else:
        placeholders = ", ".join(f"%({prefix}c{i})s" for i in range(len(fields)))
    columns = ", ".join(quote(f.column) for f in fields)
    params = [(f"{prefix}c{i}", field, *_prepared_as(field, vendor)) for i, field in enumerate(fields)]
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) SELECT {placeholders}", params


@dataclasses.dataclass
class Insert:
    """One row of `rows_insert`: an unsaved instance; skipped if a row with the same `unless_conflict`
    columns exists; written only if the row at index `after` of the same call was, and only if `where`
    (a SQL condition with named `params`) holds."""

    instance: Any
    unless_conflict: str = ""
    after: int | None = None
    where: str = ""
    params: dict[str, Any] | None = None


_PARAM = re.compile(r"%\((\w+)\)s")


def rows_insert(rows: list[Insert]) -> list[bool]:
    """Several new rows (the instances saved and their ids set) in ONE statement on PostgreSQL — a
    data-modifying CTE each, their foreign keys checked at the statement's end, so a row may refer to
    one written before it in the list — else one by one; whether each was written. What creating a
    request writes (the request, its `created` event, its card's outbox row, the card's `card_posted`
    event, and the tool call that asked) is one round trip instead of five."""
    if connection.vendor != "postgresql":
        written: list[bool] = []
        for row in rows:
            ok = (row.after is None or written[row.after]) and row_insert(
                row.instance, where=row.where, params=row.params, unless_conflict=row.unless_conflict
            )
            written.append(bool(ok))
        return written
    ctes, params, outputs = [], {}, []
    for i, row in enumerate(rows):
        conditions = [f"EXISTS (SELECT 1 FROM r{row.after})"] if row.after is not None else []
        if row.where:  # (its parameters renamed as this row's own)
            conditions.append(f"({_PARAM.sub(lambda m, i=i: f'%(r{i}_w_{m.group(1)})s', row.where)})")
            params.update({f"r{i}_w_{name}": value for name, value in (row.params or {}).items()})
        sql, values = insert_statement(row.instance, where=" AND ".join(conditions), prefix=f"r{i}_")
        if row.unless_conflict:
            sql += f" ON CONFLICT ({row.unless_conflict}) DO NOTHING"
        pk = connection.ops.quote_name(row.instance._meta.pk.column)
        ctes.append(f"r{i} AS ({sql} RETURNING {pk})")
        outputs.append(f"(SELECT {pk} FROM r{i})")
        params.update(values)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} SELECT {', '.join(outputs)}", params)
        ids = cursor.fetchone()
    written = []
    for row, pk in zip(rows, ids):
        if pk is not None:
            if row.instance.pk is None:
                row.instance.pk = pk
            row.instance._state.adding = False
        written.append(pk is not None)
    return written


def rows_update(model: type, *, pk: Any, values: dict[str, Any], only_if: dict[str, Any] | None = None) -> int:
    """`UPDATE <table> SET <field> = <value>, … WHERE <pk> = pk AND <field> = <value> …` in one statement
    written out rather than composed by the ORM (a decision's move makes one on every click); the number
    of rows changed. `values` and `only_if` are by field name; values are prepared as the ORM prepares them."""
    sql, params = _update_sql_and_params(model, pk=pk, values=values, only_if=only_if)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _update_sql_and_params(
    model: type, *, pk: Any, values: dict[str, Any], only_if: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The statement of `rows_update` and its named parameters."""
    sql, fields, tests = _update_text(model, connection.vendor, tuple(values), tuple(only_if or {}))
    params = {f"u{i}": field.get_db_prep_save(values[field.name], connection=connection) for i, field in enumerate(fields)}
    params["pk"] = model._meta.pk.get_db_prep_value(model._meta.pk.to_python(pk), connection)
    params.update({f"w{i}": field.get_db_prep_value((only_if or {})[field.name], connection) for i, field in enumerate(tests)})
    return sql, params


def ids_in(model: type, ids: list[Any]) -> Any:
    """A filter: the model's rows whose ids are `ids`. PostgreSQL: `id = ANY(<one array>)` — the ORM's
    `pk__in` writes (and psycopg then parses) one placeholder per id, which for the hundreds of a batch
    costs more than the query; elsewhere `pk__in`."""
    if connection.vendor != "postgresql":
        return Q(pk__in=ids)
    meta = model._meta
    quote = connection.ops.quote_name
    values = [meta.pk.get_db_prep_value(meta.pk.to_python(pk), connection) for pk in ids]
    return RawSQL(
        f"{quote(meta.db_table)}.{quote(meta.pk.column)} = ANY(%s::{meta.pk.db_type(connection)}[])",
        [values],
        output_field=BooleanField(),
    )


def rows_update_each(model: type, *, values: dict[str, Any], each: str, per_row: dict[Any, Any]) -> int:
    """One UPDATE of the rows whose ids are `per_row`'s keys: every field of `values` set alike, and field
    `each` to that row's own value in `per_row` (a batch of decisions: each row signed anew). PostgreSQL:
    written out, the ids and their values passed as two arrays (`unnest`) — the ORM's `CASE WHEN` over
    hundreds of rows costs more to compose than to run; elsewhere the ORM's. The number of rows changed."""
    if not per_row:
        return 0
    if connection.vendor != "postgresql":
        whens = [When(pk=pk, then=Value(value)) for pk, value in per_row.items()]
        field = model._meta.get_field(each)
        return model.objects.filter(pk__in=list(per_row)).update(**values, **{each: Case(*whens, output_field=field)})
    sql, fields = _update_each_text(model, tuple(values), each)
    meta = model._meta
    params = {f"u{i}": field.get_db_prep_save(values[field.name], connection=connection) for i, field in enumerate(fields)}
    params["pks"] = [meta.pk.get_db_prep_value(meta.pk.to_python(pk), connection) for pk in per_row]
    column = meta.get_field(each)
    params["each"] = [column.get_db_prep_save(value, connection=connection) for value in per_row.values()]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


@functools.cache
def _update_each_text(model: type, names: tuple[str, ...], each: str) -> tuple[str, list]:
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [meta.get_field(name) for name in names]
    column = meta.get_field(each)
    sets = ", ".join(
        [f"{quote(f.column)} = %(u{i})s::{f.db_type(connection)}" for i, f in enumerate(fields)]
        + [f"{quote(column.column)} = v.value"]
    )
    return (
        f"UPDATE {quote(meta.db_table)} SET {sets} "
        f"FROM unnest(%(pks)s::{meta.pk.db_type(connection)}[], %(each)s::{column.db_type(connection)}[]) AS v(pk, value) "
        f"WHERE {quote(meta.db_table)}.{quote(meta.pk.column)} = v.pk"
    ), fields


@functools.cache
def _update_text(model: type, vendor: str, names: tuple[str, ...], conditions: tuple[str, ...]) -> tuple[str, list, list]:
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [meta.get_field(name) for name in names]
    tests = [meta.get_field(name) for name in conditions]

    def cast(field: Any) -> str:
        return f"::{field.db_type(connection)}" if vendor == "postgresql" else ""

    sets = ", ".join(f"{quote(f.column)} = %(u{i})s{cast(f)}" for i, f in enumerate(fields))
    where = " AND ".join([f"{quote(meta.pk.column)} = %(pk)s", *(f"{quote(f.column)} = %(w{i})s" for i, f in enumerate(tests))])
    return f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {where}", fields, tests


def moved_with_event(
    pk: Any,
    *,
    values: dict[str, Any],
    only_if: dict[str, Any],
    event: ConfirmationEvent,
    response: ApproverResponse | None = None,
) -> tuple[bool, dict[str, Any]]:
    """A request's conditional UPDATE (`rows_update`), the event of its move and the NOTIFY of its new
    state to its waiters, as ONE statement on PostgreSQL: the event is written, and the notification
    queued (delivered at commit), only if the UPDATE changed the row. (Whether it changed, the row's
    `callback_url` as it stands); the event saved, its id set, if so. A decision's move was two round
    trips of every click (the UPDATE, then the event carrying the NOTIFY): now one.

    `response`: the approver's answer that decides it, written first in the same statement unless that
    person answered already (`response_add`'s rule) — and then nothing at all is written (the response
    stays unsaved: its `pk` None). The notification's `approved_by` counts it.

    Elsewhere, the statements one by one (no notification: waiters poll)."""
    request_meta = ConfirmationRequest._meta
    if connection.vendor != "postgresql":
        if response is not None and not response_add(response):
            return False, {}
        changed = rows_update(ConfirmationRequest, pk=pk, values=values, only_if=only_if)
        if not changed:
            return False, {}
        row_insert(event)
        return True, {"callback_url": ConfirmationRequest.objects.values_list("callback_url", flat=True).get(pk=pk)}
    update, params = _update_sql_and_params(ConfirmationRequest, pk=pk, values=values, only_if=only_if)
    insert, inserted = insert_statement(event, where="EXISTS (SELECT 1 FROM moved)")
    quote = connection.ops.quote_name
    answered = ""
    if response is not None:
        # (written only if the request is as the UPDATE wants it: never a response without its move)
        requests = quote(request_meta.db_table)
        answering, answer = insert_statement(
            response, prefix="a_", where=f"EXISTS (SELECT 1 FROM {requests} WHERE {update.split(' WHERE ', 1)[1]})"
        )
        answered = (
            f"answered AS ({answering} ON CONFLICT (confirmation_id, person) DO NOTHING RETURNING "
            f"{quote(response._meta.pk.column)}, approver, decision, created_at, confirmation_id), "
        )
        update += " AND EXISTS (SELECT 1 FROM answered)"
        params.update(answer)
    state = realtime.notify_select(
        _state_sql("%(notify_ids)s", rows="moved", answered="answered" if response is not None else ""),
        channel="%(notify_channel)s",
    )
    sql = (
        f"WITH {answered}moved AS ({update} RETURNING *), "
        f"added AS ({insert} RETURNING {quote(event._meta.pk.column)}) "
        f"SELECT (SELECT {quote(request_meta.get_field('callback_url').column)} FROM moved), "
        f"(SELECT {quote(event._meta.pk.column)} FROM added), ({state})"
        + (f", (SELECT {quote(response._meta.pk.column)} FROM answered)" if response is not None else "")
    )
    params.update(inserted)
    params.update({"notify_ids": [str(pk)], "notify_channel": realtime.CHANNEL})
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        callback_url, event_id, _notified, *response_id = cursor.fetchone()
    if response is not None and response_id[0] is not None:
        response.pk = response_id[0]
        response._state.adding = False
    if event_id is None:
        return False, {}
    event.pk = event_id
    event._state.adding = False
    return True, {"callback_url": callback_url}


def row_insert(
    instance: Any,
    *,
    where: str = "",
    params: dict[str, Any] | None = None,
    unless_conflict: str = "",
    wrap: str = "",
) -> bool:
    """INSERT one new row (a model instance) in one statement, without the ORM's save machinery (no
    model here has save signals): True, with the instance's id set and the instance saved — or False
    if `where` held it back or a row with the same `unless_conflict` columns was there already.
    `params` fill `where`; `wrap` is a statement around the INSERT (`{}`) whose first column is the id."""
    sql, values = insert_statement(instance, where=where)
    if unless_conflict:
        sql += f" ON CONFLICT ({unless_conflict}) DO NOTHING"
    sql += f" RETURNING {connection.ops.quote_name(instance._meta.pk.column)}"
    with connection.cursor() as cursor:
        cursor.execute(wrap.replace("{}", sql, 1) if wrap else sql, {**values, **(params or {})})
        inserted = cursor.fetchone()
    if inserted is None or inserted[0] is None:
        return False
    if instance.pk is None:  # an auto id (a preset one, such as a uuid, stays as the instance has it)
        instance.pk = inserted[0]
    instance._state.adding = False
    return True


def response_add(response: ApproverResponse) -> bool:
    """Insert an approver's response unless that person (`response.person`, under any of their
    identities) answered the request already (one statement, no savepoint); False if there was one."""
    return row_insert(response, unless_conflict="confirmation_id, person")


def outbox_add_many(rows: list[Outbox]) -> None:
    """Write several outbox rows whose dedupe keys cannot exist yet (e.g. each request's redraw for a
    state it just entered) in one statement, and queue them for delivery after commit, a batch per
    message (thousands of requests expiring at once are thousands of rows, not thousands of messages)."""
    if not rows:
        return
    created = [row.pk for row in Outbox.objects.bulk_create(rows)]
    batches = [created[i : i + OUTBOX_BATCH] for i in range(0, len(created), OUTBOX_BATCH)]
    transaction.on_commit(lambda: [enqueue(DELIVER_OUTBOX_BATCH_TASK, batch) for batch in batches], robust=True)


def enqueue(task_name: str, *args: Any) -> None:
    """Queue a task by name; if the broker is down, beat's outbox relay picks the row up later."""
    try:
        # The trace the row was written in goes with the task (empty when tracing is off).
        # (the gateway's Celery app: `gateway.celery` makes it the current one when Django starts)
        current_app.send_task(task_name, args=args, retry=False, headers=tracing.carrier() or None)
    except Exception as exc:
        logger.warning("could not queue %s%s (%s); the outbox relay will retry", task_name, args, exc)


@functools.cache
def _signed_columns() -> str:
    """`'field', cr.column, …` for every field `decision_mac` signs of a request."""
    from approvals.audit import REQUEST_SIGNED

    columns = {f.attname: f.column for f in ConfirmationRequest._meta.concrete_fields}
    return ", ".join(f"'{name}', cr.{connection.ops.quote_name(columns[name])}" for name in REQUEST_SIGNED)


def _state_sql(ids: str = "%s", rows: str = "", answered: str = "") -> str:
    """SELECT id, payload for the requests whose ids are the one parameter (placeholder `ids`): each
    one's `ConfirmationState` as JSON, built by PostgreSQL from the row the transaction just changed —
    what `decision_mac` signs (`signed`, with the MAC: the waiter checks the state before answering on
    it, and reads it from there), and beside it only what is not signed: the id, who decided by name,
    who approved so far. (Until 0.4 the signed fields were also repeated beside `signed`; a reader merges
    `signed` over the rest, so either shape reads the same: docs/waiting.md, "The notification".)
    `rows`: where the requests' rows are read from instead of their table — the `RETURNING *` of an UPDATE
    in the same statement (a sibling's read of the table would see the rows as they were before it);
    `answered`: likewise, the `RETURNING` (id, approver, decision, created_at, confirmation_id) of a response written in the
    same statement, counted among who approved."""
    requests = rows or connection.ops.quote_name(ConfirmationRequest._meta.db_table)
    responses = f"SELECT r.id, r.approver, r.decision, r.created_at, r.confirmation_id FROM {ApproverResponse._meta.db_table} r"
    if answered:
        responses += f" UNION ALL SELECT a.id, a.approver, a.decision, a.created_at, a.confirmation_id FROM {answered} a"
    return (
        "SELECT cr.id, json_build_object("
        "'id', cr.id, 'decided_by_name', cr.decided_by_name, "
        f"'signed', json_build_object({_signed_columns()}, 'decision_mac', cr.decision_mac), "
        "'approved_by', COALESCE((SELECT json_agg(r.approver ORDER BY r.created_at, r.id) "
        f"FROM ({responses}) r WHERE r.confirmation_id = cr.id AND r.decision = 'approve'), '[]'::json)"
        f")::text AS payload FROM {requests} cr WHERE cr.id = ANY({ids}::uuid[])"
    )


def changes_notify(confirmation_ids: list[Any]) -> None:
    """Wake the agents waiting on these requests, telling them each one's new state. Delivered at commit:
    one statement, however many requests (PostgreSQL only; elsewhere waiters poll)."""
    if confirmation_ids:
        realtime.notify_sql(_state_sql(), [[str(pk) for pk in confirmation_ids]])

