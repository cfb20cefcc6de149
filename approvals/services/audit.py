"""The tamper-evident chain's writes (docs/audit.md): one entry per write of a chained row.

`audit_append` is called in the transaction of the write it records, right
after it. Each entry is signed with the audit key (HMAC-SHA256 over its agent,
place, content and the entry before it: `approvals.audit.entry_hash`), which
the database never sees, so the signature is computed here — from the head
(`seq`, `hash`) the entry follows.

The head is known without asking in the common case: each process remembers
the head it last wrote for each agent (`_heads`). An append is then ONE
statement that advances the agent's `AuditHead` only if it is still that head
(which locks the row until the transaction ends) and writes the entry (and,
for `audit_insert_linked`, the chained row) only if it did. Two writers of one
agent therefore queue on the head row and can never fork the chain; the loser
finds the head moved, wrote nothing, and appends again from the head as it is
now (read, then read under the row lock if it moved again). Writers of
different agents never meet. Elsewhere (SQLite for `make run`) the head is read
and written in the transaction, which SQLite's IMMEDIATE transactions serialise.

Lock order: a transaction that writes an event about a confirmation request and
also locks that request locks the request first (every path here does), so the
head lock is the last one it waits for. Requests and agents are locked FOR NO
KEY UPDATE (`select_for_update(no_key=True)`), which never blocks the
foreign-key checks of rows inserted about them: deciding a call of a turn
writes an outbox row for the turn's card on the lead request, and must not wait
behind a card delivery that holds the lead and waits for the head.

A transaction that writes several chained rows of one agent (creating a
request: the call, its `created` and `card_posted` events) wraps them in
`audit_deferred()` (`audit_transaction()`: that inside its own transaction): the
links are queued as the rows are written and appended together when the block
ends: the entries signed one after another here, written in one INSERT and the
head advanced. The head is then held for that statement and the COMMIT only,
not from the first event to the end of the transaction, which is what lets an
agent's requests be created in parallel. Within a process, an agent's appends
take turns from reading the guess to the COMMIT (`_Turn.guessing`): a statement
sees only what was committed before it began, so a writer that guessed the head
its predecessor had not yet committed would miss, and pay a locked re-read and a
second statement.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from approvals.audit import GENESIS, LINKS, SOURCE_OF, content_hash, current_key_id, entry_hash, entry_tail
from approvals.models import AuditEntry, AuditHead
from gateway_utils import metrics

_HEAD = AuditHead._meta.db_table
_ENTRY = AuditEntry._meta.db_table
# One append: the head advanced from (seq - 1, prev) to (seq, hash) — only if it is still there, and only
# if `{where}` holds — and the entry written only if it was. `{written}` is "" or the INSERT of the chained
# row (its WHERE is `EXISTS (SELECT 1 FROM head)`), as a CTE of its own.
_APPEND_SQL = f"""
WITH head AS (
    UPDATE {_HEAD} SET seq = %(seq)s, hash = %(hash)s, prev_hash = %(prev)s
    WHERE agent_id = %(agent)s AND seq = %(seq)s - 1 AND hash = %(prev)s AND ({{where}})
    RETURNING 1
){{written}}
INSERT INTO {_ENTRY}
    (agent_id, seq, action, tool_call_id, event_id, confirmation_id, response_id, grant_id, content_hash, prev_hash,
     entry_hash, key_id, created_at)
SELECT %(agent)s::bigint, %(seq)s::bigint, %(action)s::varchar, %(tool_call_id)s::uuid, %(event_id)s::bigint,
       %(confirmation_id)s::uuid, %(response_id)s::bigint, %(grant_id)s::uuid,
       %(content)s::varchar, %(prev)s::varchar, %(hash)s::varchar, %(key_id)s::varchar, %(now)s::timestamptz
FROM head
"""

# The head of each agent's chain as this process last wrote it: the guess an append starts from.
_heads: dict[int, tuple[int, str]] = {}


@dataclasses.dataclass(eq=False)
class _Job:
    """One append in autocommit waiting for its agent's turn (`_append_one`)."""

    link: dict[str, Any]
    written: str
    where: str
    params: dict[str, Any] | None
    done: bool = False
    result: bool = False
    error: BaseException | None = None


class _Turn:
    """The appends in autocommit of one agent within a process: they take turns (so the guess is the
    head whenever no other process wrote in between — they would queue on the head row anyway), and
    the thread whose turn it is writes every append queued by then in ONE statement (group commit):
    the others find theirs done when their turn comes."""

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.mutex = threading.Lock()
        self.queued: list[_Job] = []
        # The turn at guessing this agent's head: held by an `audit_transaction` from its append's guess
        # to its COMMIT, and by the autocommit group writer for its statement. The next writer then
        # guesses the head the last one committed; unordered, it would guess one not yet committed —
        # invisible to its statement — and miss (and a miss's locked re-read is the head only until its
        # own append moves it: the misses cascade).
        self.guessing = threading.Lock()


_turns: dict[int, _Turn] = {}
_turns_lock = threading.Lock()
# Most appends one statement writes together (its parameters grow with each).
GROUP_MAX = 32
# Longest a transaction's append waits for this process's previous append of its agent to return
# (`_Turn.guessing`); past it, it guesses anyway (a wrong guess costs a locked re-read, never a fork).
GUESS_WAIT_SECONDS = 0.5


def _turn_of(agent_id: int) -> _Turn:
    turn = _turns.get(agent_id)
    if turn is None:
        with _turns_lock:
            turn = _turns.setdefault(agent_id, _Turn())
    return turn

# The links queued by the innermost `audit_deferred` block of this context (None: none is open).
_deferred: contextvars.ContextVar[list[tuple[int, dict[str, Any]]] | None] = contextvars.ContextVar(
    "audit_deferred", default=None
)


# The `_Turn.guessing` locks the transaction of the innermost `audit_transaction` holds (None: none is open).
_guesses_held: contextvars.ContextVar[list[threading.Lock] | None] = contextvars.ContextVar(
    "audit_guesses_held", default=None
)


@contextlib.contextmanager
def audit_transaction() -> Iterator[None]:
    """`transaction.atomic()` with `audit_deferred()` inside — the chained writes of one change (a request
    created, a click decided) and their entries, committed together. When it is the outermost
    transaction, the agent's append is also ordered within this process until the COMMIT (`_Turn.guessing`):
    a statement sees only heads committed before it began, so the next writer of the agent must start
    after this one's COMMIT to guess the head right — else its guess misses and it pays a locked re-read
    and a second try (most of a creation's database time when an agent's requests arrive together)."""
    held: list[threading.Lock] | None = [] if not connection.in_atomic_block else None
    token = _guesses_held.set(held)
    try:
        with transaction.atomic(), audit_deferred():
            yield
    finally:
        _guesses_held.reset(token)
        for lock in held or ():
            lock.release()


@contextlib.contextmanager
def audit_deferred() -> Iterator[None]:
    """Queue the chain links of the writes in this block and append them all when it ends without an
    error — a few statements per agent (PostgreSQL; elsewhere each link is appended as it is made).
    Open it inside the transaction that writes the rows, so the entries commit with them. Nested
    blocks share the outer one's queue."""
    if _deferred.get() is not None or connection.vendor != "postgresql":
        yield
        return
    if not connection.in_atomic_block:
        raise RuntimeError("audit_deferred() needs a transaction: the entries must commit with their rows")
    queued: list[tuple[int, dict[str, Any]]] = []
    token = _deferred.set(queued)
    try:
        yield
    finally:
        _deferred.reset(token)
    _append_locked([(agent_id, link) for agent_id, link in queued])


def _count_appended(links: Iterable[dict[str, Any]]) -> None:
    """`gateway_audit_appends_total{record}`, at commit: entries rolled back were never appended."""
    counts: dict[str, int] = {}
    for link in links:
        record = next((name for name, column in LINKS.items() if link.get(column) is not None), "event")
        counts[record] = counts.get(record, 0) + 1

    def count() -> None:
        for record, n in counts.items():
            metrics.AUDIT_APPENDS.labels(record).inc(n)

    transaction.on_commit(count)


def _link(*, agent_id: int, action: str, row: Any, source: str | None) -> dict[str, Any]:
    """What one write of `row` (as it is now: a model instance, or a dict of its fields) puts in its
    entry, but its place in the chain."""
    if source is None:
        source = SOURCE_OF[type(row)]
    row_id = row["id"] if isinstance(row, dict) else row.pk
    content = content_hash(source, row)
    return {
        "agent": agent_id,
        "tail": entry_tail(action=action, source=source, source_id=row_id, content=content),
        "action": action,
        "content": content,
        "now": timezone.now(),
        **{link: (row_id if name == source else None) for name, link in LINKS.items()},
    }


def _placed(link: dict[str, Any], seq: int, prev: str) -> dict[str, Any]:
    """`link` as the entry after (`seq` - 1, `prev`): its place and its signature."""
    key_id = current_key_id()
    signed = entry_hash(agent_id=link["agent"], seq=seq, tail=link["tail"], prev_hash=prev, key_id=key_id)
    return {**link, "seq": seq, "prev": prev, "hash": signed, "key_id": key_id}


def _append_one(link: dict[str, Any], *, written: str = "", where: str = "", params: dict[str, Any] | None = None) -> bool:
    """Append one link (PostgreSQL), with the chained row's INSERT (`written`) if given; False if
    `where` held it back (nothing written). Starts from this process's guess of the head; a head that
    moved is read again (with no `where`), then locked (in a transaction) if it moved again."""
    if connection.in_atomic_block:  # the head row, held until the caller's COMMIT, orders these
        return _append_guessing(link, written=written, where=where, params=params)
    job = _Job(link, written, where, params)
    turn = _turn_of(link["agent"])
    with turn.mutex:
        turn.queued.append(job)
    with turn.turn:
        while not job.done:  # (not done: ours is among the appends queued by now, which this thread writes)
            with turn.mutex:
                group, turn.queued[:] = turn.queued[:GROUP_MAX], turn.queued[GROUP_MAX:]
            # (after a transaction's append of this agent has committed: its head is then the guess)
            acquired = turn.guessing.acquire(timeout=GUESS_WAIT_SECONDS)
            try:
                _append_group(group)
            finally:
                if acquired:
                    turn.guessing.release()
    if job.error is not None:
        raise job.error
    return job.result


def _append_group(group: list[_Job]) -> None:
    """Write `group` (appends in autocommit of one agent, queued in this order): in one statement when
    this process's guess of the head is right and every `where` holds, else one by one."""
    try:
        try:
            together = len(group) > 1 and _append_group_guessing(group)
        except DatabaseError:  # one of them is refused (a unique key taken): nothing was written; say whose
            together = False
        if together:
            for job in group:
                job.result = True
            return
        for job in group:
            try:
                job.result = _append_guessing(job.link, written=job.written, where=job.where, params=job.params)
            except Exception as exc:  # it is that caller's error: raised in its own thread
                job.error = exc
    finally:
        for job in group:
            job.done = True


_PARAM = re.compile(r"%\((\w+)\)s")


def _append_group_guessing(group: list[_Job]) -> bool:
    """The group's chained rows, their entries and the head's advance in ONE statement from this
    process's guess of the head; False (nothing written) if there is no guess, the head moved, or a
    `where` held its write back — which one, the appends made one by one then say."""
    agent_id = group[0].link["agent"]
    guess = _heads.get(agent_id)
    if guess is None:
        return False
    seq, prev = guess
    params: dict[str, Any] = {"h_agent": agent_id, "h_seq": seq, "h_prev": prev}
    entries: dict[str, list[Any]] = {f"e_{name}": [] for name in _ENTRY_VALUES}
    conditions, ctes = [], []
    for i, job in enumerate(group):
        def mine(text: str, i: int = i) -> str:
            return _PARAM.sub(lambda m: f"%(j{i}_{m.group(1)})s", text)

        params.update({f"j{i}_{name}": value for name, value in (job.params or {}).items()})
        if job.where:
            conditions.append(f"({mine(job.where)})")
        if job.written:
            ctes.append(f", w{i} AS ({mine(job.written)})")
        placed = _placed(job.link, seq + 1, prev)
        for name in _ENTRY_VALUES:
            entries[f"e_{name}"].append(placed[name])
        before, (seq, prev) = prev, (placed["seq"], placed["hash"])
    params.update(entries)
    params.update({"h_to_seq": seq, "h_to_hash": prev, "h_to_prev": before})
    sql = _APPEND_GROUP_SQL.format(where=" AND ".join(conditions) or "true", written="".join(ctes))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.rowcount != len(group):
            return False
    _heads[agent_id] = (seq, prev)
    _count_appended(job.link for job in group)
    return True


def _append_guessing(link: dict[str, Any], *, written: str, where: str, params: dict[str, Any] | None) -> bool:
    agent_id = link["agent"]
    cte = f", written AS ({written})" if written else ""
    sql = _APPEND_SQL.format(where=where or "true", written=cte)
    guess = _heads.get(agent_id)
    for attempt in range(2):
        if guess is not None:
            placed = _placed(link, guess[0] + 1, guess[1])
            with connection.cursor() as cursor:
                cursor.execute(sql, {**(params or {}), **placed})
                if cursor.rowcount == 1:
                    _heads[agent_id] = (placed["seq"], placed["hash"])
                    _count_appended([link])
                    return True
        if where:
            break  # the head moved, or `where` held the write back: which one, only the locked head can say
        now = AuditHead.objects.filter(agent_id=agent_id).values_list("seq", "hash").first()
        if now is None:
            break  # the agent's first entry: its head is made below
        guess = (now[0], now[1])
    # The head keeps moving (or there is none yet): wait for it under its row lock.
    with transaction.atomic(savepoint=False):
        seq, prev = _lock_head(agent_id)
        placed = _placed(link, seq + 1, prev)
        with connection.cursor() as cursor:
            cursor.execute(sql, {**(params or {}), **placed})
            if cursor.rowcount != 1:
                return False
            _count_appended([link])
    _heads[agent_id] = (placed["seq"], placed["hash"])
    return True


def _lock_head(agent_id: int) -> tuple[int, str]:
    """The agent's head, locked until the transaction ends (created at the genesis if it has none)."""
    head = AuditHead.objects.select_for_update().filter(agent_id=agent_id).values_list("seq", "hash").first()
    if head is None:
        AuditHead.objects.bulk_create(
            [AuditHead(agent_id=agent_id, seq=0, hash=GENESIS, prev_hash=GENESIS)], ignore_conflicts=True
        )
        head = AuditHead.objects.select_for_update().filter(agent_id=agent_id).values_list("seq", "hash").get()
    return head[0], head[1]


# Several appends of one agent: the head advanced from its guess (`h_seq`, `h_prev`) to the last entry's
# place — only if it is still there and every `{where}` holds — the chained rows written (`{written}`: CTEs
# whose INSERTs are conditioned on `head`) and the entries only if it was. The entries' values are passed as
# one array per column (`e_<name>`), so the statement's text is the same however many there are.
_ENTRY_VALUES = ("agent", "seq", "action", *LINKS.values(), "content", "prev", "hash", "key_id", "now")
_ENTRY_TYPES = {"agent": "bigint", "seq": "bigint", "event_id": "bigint", "response_id": "bigint", "now": "timestamptz",
                "tool_call_id": "uuid", "confirmation_id": "uuid", "grant_id": "uuid"}  # fmt: skip
_APPEND_GROUP_SQL = f"""
WITH head AS (
    UPDATE {_HEAD} SET seq = %(h_to_seq)s, hash = %(h_to_hash)s, prev_hash = %(h_to_prev)s
    WHERE agent_id = %(h_agent)s AND seq = %(h_seq)s AND hash = %(h_prev)s AND ({{where}})
    RETURNING 1
){{written}}
INSERT INTO {_ENTRY}
    (agent_id, seq, action, tool_call_id, event_id, confirmation_id, response_id, grant_id, content_hash, prev_hash,
     entry_hash, key_id, created_at)
SELECT v.* FROM head, unnest({", ".join(f"%(e_{name})s::{_ENTRY_TYPES.get(name, 'varchar')}[]" for name in _ENTRY_VALUES)}) AS v
"""


def _append_locked(links: list[tuple[int, dict[str, Any]]]) -> None:
    """Append several links (in the caller's transaction), agent by agent in agent order (so two bulk
    writers never wait on each other in a circle), each agent's entries signed here one after another
    and written with the head's advance in one statement: from this process's guess of the head, or —
    if the guess is stale (another transaction moved the head) — from the head read under its row lock."""
    for agent_id in sorted({agent_id for agent_id, _ in links}):
        group = [_Job(link, "", "", None) for owner, link in links if owner == agent_id]
        guessing = _turn_of(agent_id).guessing
        # Only inside `audit_transaction`, and then kept until its transaction has ended (taken once: it
        # may append again). A transaction of its own (a batch of expiries) takes no turn: holding one
        # only for its statement, its second append would wait for the next writer, who waits on the
        # head row it holds — bounded by the timeout, but a stall each time.
        until_end = _guesses_held.get()
        acquired = (
            until_end is not None and guessing not in until_end and guessing.acquire(timeout=GUESS_WAIT_SECONDS)
        )
        if acquired:
            until_end.append(guessing)  # type: ignore[union-attr]
        if _append_group_guessing(group):
            continue
        _heads[agent_id] = _lock_head(agent_id)  # (held until COMMIT: nobody moves it now)
        if not _append_group_guessing(group):
            raise RuntimeError(f"agent {agent_id}'s audit head moved while this transaction held it")


def audit_append(*, agent_id: int, action: str, row: Any, source: str | None = None) -> None:
    """Link one write of a chained row (a `ToolCall`, a `ConfirmationEvent`, or a decision row —
    `ConfirmationRequest`, `ApproverResponse`, `Grant` — as it is now; a dict of its fields with
    `source`) into its agent's chain. Call it inside the transaction of the write, after it."""
    link = _link(agent_id=agent_id, action=action, row=row, source=source)
    queued = _deferred.get()
    if queued is not None:
        queued.append((agent_id, link))
        return
    if connection.vendor == "postgresql":
        _append_one(link)
        return
    with transaction.atomic(savepoint=False):
        _append_here(link)


def audit_insert_linked(
    *,
    row: Any,
    insert: Callable[[str], tuple[str, dict[str, Any]]],
    where: str = "",
    params: dict[str, Any] | None = None,
    agent_id: int,
    action: str,
) -> bool:
    """Write one chained row (an unsaved `ToolCall`) and its chain entry; False if `where` (a condition,
    with named `params`) held it back, and then nothing was written. `insert(where)` makes the row's
    `INSERT … SELECT … WHERE <where>` and its parameters (`services.records.insert_statement`).

    PostgreSQL: in ONE statement when this process's guess of the agent's head is right (the head
    row is then locked only for that statement and the COMMIT), so an agent's writers queue on it for
    microseconds. Inside `audit_deferred()`: the INSERT now, its entry with the block's others at the
    block's end. Elsewhere: the INSERT, then the entry, in one transaction.
    """
    queued = _deferred.get()
    deferred_or_elsewhere = queued is not None or connection.vendor != "postgresql"
    # (first: the INSERT's values are what the row says — `created_at` is set here — and what is hashed)
    sql, values = insert(where if deferred_or_elsewhere else "EXISTS (SELECT 1 FROM head)")
    link = _link(agent_id=agent_id, action=action, row=row, source=None)
    if deferred_or_elsewhere:
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(sql, {**values, **(params or {})})
            if cursor.rowcount != 1:
                return False
            if queued is not None:  # the entry goes with the block's others, at its end
                queued.append((agent_id, link))
            else:
                _append_here(link)
            return True
    return _append_one(link, written=sql, where=where, params={**values, **(params or {})})


def audit_append_many(links: list[tuple[int, str, Any]]) -> None:
    """Link several writes (`(agent_id, action, row)`, rows as they are now) into their agents' chains,
    in a few statements however many (inside the caller's transaction)."""
    if not links:
        return
    if connection.vendor != "postgresql":
        for agent_id, action, row in sorted(links, key=lambda link: link[0]):
            audit_append(agent_id=agent_id, action=action, row=row)
        return
    _append_locked([(agent_id, _link(agent_id=agent_id, action=action, row=row, source=None)) for agent_id, action, row in links])


def _append_here(link: dict[str, Any]) -> None:
    """The append done step by step (SQLite, whose IMMEDIATE transactions serialise writers)."""
    agent_id = link["agent"]
    head = AuditHead.objects.select_for_update().filter(agent_id=agent_id).values_list("seq", "hash").first()
    seq, prev = (head[0], head[1]) if head else (0, GENESIS)
    placed = _placed(link, seq + 1, prev)
    if head:
        AuditHead.objects.filter(agent_id=agent_id).update(seq=placed["seq"], hash=placed["hash"], prev_hash=prev)
    else:
        AuditHead.objects.create(agent_id=agent_id, seq=placed["seq"], hash=placed["hash"], prev_hash=prev)
    AuditEntry.objects.create(
        agent_id=agent_id,
        seq=placed["seq"],
        action=link["action"],
        **{column: link[column] for column in LINKS.values()},
        content_hash=link["content"],
        prev_hash=prev,
        entry_hash=placed["hash"],
        key_id=placed["key_id"],
        created_at=link["now"],
    )
    _count_appended([link])
