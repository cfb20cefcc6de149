"""Heads kept outside the chain: a chain's head as recorded outside the database (`ExpectedHead`), every
head as it is now, and the files of them that `verify_audit --expect-head` reads (docs/audit.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from approvals.models import Agent, AuditHead


@dataclasses.dataclass(frozen=True, order=True)
class ExpectedHead:
    """A chain's head as recorded outside the database: `<agent>@<seq>:<hash>`."""

    agent: str
    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.agent}@{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> ExpectedHead:
        name, _, rest = text.strip().rpartition("@")
        seq, _, hash_ = rest.partition(":")
        if not name or not seq.isdigit() or len(hash_) != 64 or any(c not in "0123456789abcdef" for c in hash_):
            raise ValueError(f"not a head (<agent>@<seq>:<64 hex digits>): {text!r}")
        return cls(name, int(seq), hash_)


def current_heads(agent: Agent | None = None) -> list[ExpectedHead]:
    """Every chain's head as it is now, to record outside the database."""
    heads = AuditHead.objects.filter(seq__gt=0)
    if agent is not None:
        heads = heads.filter(agent_id=agent.pk)
    names = dict(Agent.objects.values_list("pk", "name"))
    return sorted(
        ExpectedHead(names.get(agent_id, str(agent_id)), seq, hash_)
        for agent_id, seq, hash_ in heads.values_list("agent_id", "seq", "hash")
    )


def heads_line(heads: list[ExpectedHead]) -> str:
    """One JSON line of heads, as `verify_audit --expect-head FILE` reads them."""
    return json.dumps({"at": dt.datetime.now(dt.timezone.utc).isoformat(), "heads": [str(h) for h in heads]})


def heads_from_text(text: str) -> list[ExpectedHead]:
    """Heads from a file of them: `<agent>@<seq>:<hash>` tokens, or JSON lines with a `heads` list of
    them (what the beat checkpoint and `export_audit --heads` write)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            found += [ExpectedHead.parse(h) for h in json.loads(line).get("heads", [])]
        else:
            found += [ExpectedHead.parse(token) for token in line.split()]
    return found
