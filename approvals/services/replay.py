"""A click's transaction served again when its database connection broke before the COMMIT.

A connection lent to a request is sound (gateway/postgresql/base.py looks at each as it is lent), but the
server may still go away while the request holds it: a failover, a restart or `pg_terminate_backend` in
the middle of a click's transaction. A statement of the transaction that fails because the connection
broke fails before the COMMIT was sent, so the server rolled the transaction back with the connection:
nothing of the click was committed, and it is served again, once, on a fresh connection — the approver's
click is not lost to the database's restart. A COMMIT that fails is another matter: it may have been
applied before the connection broke (the answer lost, not the decision), so that failure is raised as it
is; clicking again is answered by what was decided, as a late click is (docs/operating.md, "Database
failover").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connection

from approvals.services.audit import audit_transaction

logger = logging.getLogger("approvals.services")
R = TypeVar("R")


def in_a_transaction_served_again_if_dropped(work: Callable[[], R]) -> R:
    """`work()` in one `audit_transaction`; run again once, in a new one on a fresh connection, if a statement
    of the first failed because the connection broke (nothing of it was committed). Inside a transaction
    already (a caller's), nothing is served again: the caller's transaction broke with the connection."""
    if connection.in_atomic_block:
        with audit_transaction():
            return work()
    try:
        return _in_a_transaction(work)
    except _BrokeBeforeCommit as broke:
        logger.warning("the database connection broke in the middle of a click (%s); serving it again", broke.error)
        connection.close()  # (given back broken, the pool drops it; Django has mostly done so already)
    with audit_transaction():
        return work()


def _in_a_transaction(work: Callable[[], R]) -> R:
    with audit_transaction():
        try:
            return work()
        except DatabaseError as exc:
            if not _broken():
                raise
            raise _BrokeBeforeCommit(exc) from exc


class _BrokeBeforeCommit(Exception):
    def __init__(self, error: DatabaseError) -> None:
        super().__init__(str(error))
        self.error = error


def _broken() -> bool:
    """Whether this thread's database connection is broken (not merely a statement that failed on it)."""
    raw = connection.connection
    return raw is None or bool(getattr(raw, "closed", False))
