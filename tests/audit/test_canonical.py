"""`canonical()` is what every chained row and every decision row is hashed and signed through: its text
must never change, or every stored entry and MAC stops verifying. The fast version (dispatch by exact
type) is checked here against the plain definition it replaced, on fixed edge cases and on many random
values; and a row's hashed text (`_record_text`) against `canonical` of the row as a dict."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
import hmac
import json
import random
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from approvals.audit import REQUEST_SIGNED, SOURCES, canonical, content_hash
from approvals.audit.canonical_text import as_json_writes_it, with_canonical_numbers
from approvals.audit import signing
from approvals.audit.signing import _signed_text
from approvals.models import ConfirmationRequest


def reference(value: Any) -> str:
    """The definition: keys sorted, no spaces, ASCII, numbers as normalised decimals (as first written)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                return json.dumps(repr(value))
            number = decimal.Decimal(repr(value))
        else:
            number = decimal.Decimal(value)
        if number.is_zero():
            return "0"
        return str(number.normalize(decimal.Context(prec=max(28, len(number.as_tuple().digits)))))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dt.datetime):
        return json.dumps(value.astimezone(dt.timezone.utc).isoformat(timespec="microseconds"))
    if isinstance(value, uuid.UUID):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        items = sorted((k if isinstance(k, str) else json.dumps(k), v) for k, v in value.items())
        return "{" + ",".join(json.dumps(k) + ":" + reference(v) for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(reference(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


class Colour(str, enum.Enum):
    RED = "réd"


class Size(enum.IntEnum):
    TEN = 10


@pytest.mark.parametrize(
    "value",
    [
        0, 7, 10, 100, -1200, 10**40, 2**70 + 1, 1.0, 0.1, 1e20, -0.0, float("nan"), float("inf"),
        decimal.Decimal("1.50"), True, False, None, "", "é\n\"\\\u2028😀", Colour.RED, Size.TEN,
        {"b": 1, "a": [1, 2.5, None]}, {1: "one", "1": "text one", 2.5: "x", None: "n", False: "f"}, (1, "x"),
        dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=5))), uuid.UUID(int=12345),
        {"nested": {"z": {"y": [{"x": 100}]}}},
    ],
)  # fmt: skip
def test_each_kind_of_value_hashes_as_the_definition_says(value):
    assert canonical(value) == reference(value)


def _random_value(rnd: random.Random, depth: int = 0) -> Any:
    makers = [
        lambda: None, lambda: True, lambda: False,
        lambda: rnd.randint(-(10**30), 10**30), lambda: rnd.choice([0, 10, 100, -1200, 7, 10**29]) * rnd.choice([1, 10]),
        lambda: rnd.random() * 10 ** rnd.randint(-30, 30),
        lambda: "".join(chr(rnd.randrange(0, 0x3000)) for _ in range(rnd.randrange(8))),
        lambda: dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=rnd.randint(-5, 5))))
        + dt.timedelta(microseconds=rnd.randrange(10**12)),
        lambda: uuid.UUID(int=rnd.getrandbits(128)), lambda: decimal.Decimal(rnd.randint(-999, 999)) / 100,
        lambda: Colour.RED, lambda: Size.TEN,
        lambda: {
            (f"k{rnd.randrange(5)}" if rnd.random() < 0.8 else rnd.choice([1, True, None, 2.5])): _random_value(rnd, depth + 1)
            for _ in range(rnd.randrange(4))
        },
        lambda: [_random_value(rnd, depth + 1) for _ in range(rnd.randrange(4))],
        lambda: tuple(_random_value(rnd, depth + 1) for _ in range(2)),
    ]  # fmt: skip
    return makers[rnd.randrange(len(makers) if depth < 3 else len(makers) - 3)]()


def test_random_values_hash_as_the_definition_says():
    rnd = random.Random(20261126)
    for _ in range(20_000):
        value = _random_value(rnd)
        assert canonical(value) == reference(value), value


def test_a_rows_signed_and_hashed_text_is_the_canonical_text_of_its_fields():
    row = ConfirmationRequest(
        agent_id=3, channel_id=1, session_id="s", tool_name="pay", tool_args={"amount": 100, "to": "é"},
        approvers=["U1"], expires_at=dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc), approved_args={"amount": 1e20},
    )  # fmt: skip
    fields = {f: getattr(row, f) for f in REQUEST_SIGNED}
    assert _signed_text(ConfirmationRequest, row) == reference({"signed": "request", **fields})
    assert _signed_text(ConfirmationRequest, fields) == reference({"signed": "request", **fields})
    expected = hashlib.sha256(reference({"source": "request", **{f: getattr(row, f) for f in SOURCES["request"]}}).encode())
    assert content_hash("request", row) == expected.hexdigest()


def _random_json(rnd: random.Random, depth: int = 0) -> Any:
    """A value as `json.loads` makes one: what a notification's signed fields are."""
    makers = [
        lambda: None, lambda: True, lambda: False, lambda: rnd.randint(-(10**20), 10**20),
        lambda: rnd.choice([0, 1, 7, 10, 100, -1200, 15, -3]), lambda: rnd.choice([0.0, 1.0, 2.5, -0.25, 1e20, 1e-7, 100.0]),
        lambda: rnd.random() * 10 ** rnd.randint(-30, 30),
        lambda: "".join(rnd.choice(['"', "\\", ":", ",", "[", "]", "0", "1", "e", ".", "é", "\n", "a", "😀"]) for _ in range(rnd.randrange(8))),
        lambda: {"".join(rnd.choice("ab:,0\"") for _ in range(rnd.randrange(3))): _random_json(rnd, depth + 1) for _ in range(rnd.randrange(4))},
        lambda: [_random_json(rnd, depth + 1) for _ in range(rnd.randrange(4))],
    ]  # fmt: skip
    return json.loads(json.dumps(makers[rnd.randrange(len(makers) if depth < 3 else len(makers) - 2)]()))


def test_the_one_call_text_of_a_value_where_it_is_a_canonical_text_is_the_value_s_canonical_text():
    """What lets a notification be checked through the one-call JSON text first (`told_decision_verifies`):
    if that text is the canonical text of anything (a MAC could sign it), it is this value's — no state
    is believed that the slow check would not believe — and for most values it is the canonical text
    (so a decision is checked in one call)."""
    rnd = random.Random(20261129)
    as_is = 0
    for _ in range(20_000):
        value = {"k": _random_json(rnd), "n": _random_json(rnd)}
        try:
            text = as_json_writes_it(value).decode()
        except TypeError:  # (an integer past 64 bits: checked the slow way)
            continue
        if canonical(json.loads(text)) == text:  # a canonical text: one a MAC may sign
            assert canonical(value) == text, value
            as_is += 1
    assert as_is > 3_000
    assert as_json_writes_it({"a": [1, "x", None, True], "b": {"z": 15, "y": "e"}}).decode() == canonical(
        {"a": [1, "x", None, True], "b": {"z": 15, "y": "e"}}
    )
    assert as_json_writes_it({"a": 100}).decode() != canonical({"a": 100})  # (`1E+2`: checked the slow way)
    assert as_json_writes_it({"a": "é"}).decode() != canonical({"a": "é"})  # (`\u00e9`: likewise)


def test_with_its_numbers_as_canonical_writes_them_the_one_call_text_is_the_canonical_text_of_ascii_values():
    """The second try of `told_decision_verifies` (an amount of 100, an agent whose id is 10, a float): the
    one-call text with those numbers written as `canonical` writes them. Where it is a canonical text of
    anything it is this value's (nothing is believed that the slow check would not believe), and for every
    value whose text is ASCII it is the canonical text — so such a decision is still checked in one call."""
    rnd = random.Random(20261130)
    fixed = 0
    for _ in range(20_000):
        value = {"k": _random_json(rnd), "n": _random_json(rnd)}
        with_numbers = with_canonical_numbers(value)
        text = as_json_writes_it(with_numbers).decode()
        if canonical(json.loads(text)) == text:
            assert canonical(value) == text, value
        if text.isascii():
            assert text == canonical(value), value
            fixed += with_numbers is not value
    assert fixed > 3_000
    plain = {"a": [1, "x", None, True, -7], "b": {"z": 15}}
    assert with_canonical_numbers(plain) is plain  # (nothing to write otherwise: the first try's text)
    numbers = {"a": [100, 2.0, 2**70, -20, 0]}
    assert as_json_writes_it(with_canonical_numbers(numbers)) == b'{"a":[1E+2,2,1180591620717411303424,-2E+1,0]}'


def test_a_moment_as_postgresql_writes_it_is_told_as_its_canonical_text():
    """A notification's moments are PostgreSQL's JSON text: UTC, the fraction's trailing zeros dropped (none on a
    whole second). Each is made into the canonical text of the same moment, whichever way it is written."""
    from approvals.audit.signing import _moment_text

    rnd = random.Random(20261130)
    for _ in range(5_000):
        moment = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
            seconds=rnd.randrange(10**8), microseconds=rnd.choice([0, 120000, 100, 999999, rnd.randrange(10**6)])
        )
        expected = canonical(moment)[1:-1]
        written = moment.isoformat()  # (no fraction on a whole second)
        if "." in written:
            whole, _, rest = written.partition(".")
            written = f"{whole}.{rest[:6].rstrip('0')}{rest[6:]}"
        assert _moment_text(written) == expected, written
        assert _moment_text(moment.astimezone(dt.timezone(dt.timedelta(hours=-5))).isoformat()) == expected
    assert _moment_text(None) is None


@pytest.mark.parametrize(
    "tool_args", [{"amount": 5, "to": "acme"}, {"amount": 100, "rate": 2.0}, {"é": ["10", 1e-7]}, {"n": 2**70 + 1}]
)
def test_a_told_decision_verifies_exactly_when_its_row_does(tool_args):
    from approvals.audit import decision_mac, told_decision_verifies

    row = ConfirmationRequest(
        agent_id=10, channel_id=3, session_id="s", tool_name="pay", tool_args=tool_args, approvers=["U1"], status="approved",
        decided_by="web:alice", decided_at=dt.datetime(2026, 11, 29, 12, 0, 0, 120000, tzinfo=dt.timezone.utc),
    )  # fmt: skip
    fields = {f: getattr(row, f) for f in REQUEST_SIGNED}
    # As PostgreSQL tells it: moments as ISO 8601 text (microseconds' trailing zeros dropped), jsonb as JSON.
    told = json.loads(json.dumps({**fields, "decision_mac": decision_mac(ConfirmationRequest, row)}, default=str))
    told["decided_at"] = "2026-11-29T12:00:00.12+00:00"
    assert told_decision_verifies(ConfirmationRequest, told)
    assert told_decision_verifies(ConfirmationRequest, {**told, "decided_at": "2026-11-29T14:00:00.120000+02:00"})
    assert told_decision_verifies(ConfirmationRequest, {**told, "not_signed": 1})  # (ignored, as ever)
    assert not told_decision_verifies(ConfirmationRequest, {**told, "status": "rejected"})
    assert not told_decision_verifies(ConfirmationRequest, {**told, "approved_args": {"amount": 1}})
    assert not told_decision_verifies(ConfirmationRequest, {**told, "decided_at": "2026-11-29T12:00:00.13+00:00"})
    assert not told_decision_verifies(ConfirmationRequest, {**told, "decided_at": "not a moment"})
    assert not told_decision_verifies(ConfirmationRequest, {k: v for k, v in told.items() if k != "risk"})
    assert not told_decision_verifies(ConfirmationRequest, {**told, "decision_mac": told["decision_mac"][:-1] + "é"})


def test_every_mac_is_hmac_sha256_of_its_text_under_its_key_alone():
    """`_mac` copies an HMAC set up once per key: each MAC is of its own text (nothing of the texts before
    it), under its own key, as `hmac.new(key, text, sha256)` makes it — for text and bytes, keys in turn."""
    rnd = random.Random(7)
    keys = [rnd.randbytes(rnd.choice([16, 40, 64, 100])) for _ in range(3)]
    for _ in range(300):
        key = rnd.choice(keys)
        text = "".join(rnd.choice("ab{}é\u2028") for _ in range(rnd.randrange(200)))
        data = text.encode() if rnd.random() < 0.5 else text
        expected = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
        assert signing._mac(key, data) == expected
