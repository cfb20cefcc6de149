"""The tamper-evident record (docs/audit.md): what a chained row says, its signatures, and the check.

Every write of a `ToolCall` and of a `ConfirmationEvent` appends one
`AuditEntry` to its agent's chain (`approvals.services.audit`), signed with the
audit key (HMAC-SHA256; the key comes from the environment and is never stored
in the database). Every row that decides — a `ConfirmationRequest` (its
transitions and an approver's edits), an `ApproverResponse`, a `Grant` (and
its revocation) — carries `decision_mac`, an HMAC of the fields that decide
(`SIGNED`, one declared tuple per model), written by the service that changes
them; agents are answered only from rows whose MAC verifies
(`decision_verifies`). This package is the part both the writers and the
checker need — the canonical content of a row, the key, the signatures — and
the check itself, `audit_verify`, which `python manage.py verify_audit` runs.

- `canonical_text`: `canonical`, the one text every row is hashed and signed through;
- `signing`: what is hashed and signed of each model (`SOURCES`, `SIGNED`), the audit key, a decision
  row's MAC, a row's content hash, an entry's signature;
- `verify`: the check (`audit_verify`: every chain walked, every chained and decision row compared);
- `heads`: heads recorded outside the database (`ExpectedHead`, `current_heads`, their files);
- `resigning`: signing what is there again (migrations, `verify_audit --resign` after a key rotation).

Callers outside use these names (`from approvals.audit import decision_mac`); the modules import each
other directly, never through this package.
"""

from approvals.audit.canonical_text import canonical
from approvals.audit.heads import ExpectedHead, current_heads, heads_from_text, heads_line
from approvals.audit.resigning import link_decisions, resign_chains, sign_decisions
from approvals.audit.signing import (
    EVENT_FIELDS,
    GENESIS,
    GRANT_SIGNED,
    LINKS,
    REQUEST_SIGNED,
    RESPONSE_SIGNED,
    SIGNED,
    SOURCE_OF,
    SOURCES,
    TOOL_CALL_FIELDS,
    audit_key,
    chained_row_verifies,
    content_hash,
    content_of,
    current_key_id,
    decision_mac,
    decision_verifies,
    entry_hash,
    entry_source,
    entry_tail,
    told_decision_verifies,
)
from approvals.audit.verify import Problem, Verification, audit_verify

__all__ = [
    "EVENT_FIELDS",
    "GENESIS",
    "GRANT_SIGNED",
    "LINKS",
    "REQUEST_SIGNED",
    "RESPONSE_SIGNED",
    "SIGNED",
    "SOURCES",
    "SOURCE_OF",
    "TOOL_CALL_FIELDS",
    "ExpectedHead",
    "Problem",
    "Verification",
    "audit_key",
    "audit_verify",
    "canonical",
    "chained_row_verifies",
    "content_hash",
    "content_of",
    "current_heads",
    "current_key_id",
    "decision_mac",
    "decision_verifies",
    "entry_hash",
    "entry_source",
    "entry_tail",
    "heads_from_text",
    "heads_line",
    "link_decisions",
    "resign_chains",
    "sign_decisions",
    "told_decision_verifies",
]
