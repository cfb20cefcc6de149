"""Who is whom and who decides: the person behind an identity (`person_of`, `owner_of`, read once per click or
page within `people_memo`), the approvers a gate's list routes a request to (`approver_routing`), and whether
someone may decide a request (`approver_refusal`, `self_approval_refusal`; docs/approving.md, "People")."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import CharField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Concat
from django.utils import timezone

from approvals.models import ConfirmationRequest, Person, PersonIdentity, StandIn
from approvals.prepared import PreparedRead
from approvals.selectors import standing
from gateway_contract import ACTOR_KINDS


def approvers_for_channel(confirmation: ConfirmationRequest, *, channel_name: str) -> list[str] | None:
    """Who may decide from this channel: a list ([] = anyone there), or None if nobody can."""
    if channel_name == confirmation.channel.name:
        return list(confirmation.approvers)
    if confirmation.escalate_channel_id and confirmation.escalated_at and channel_name == confirmation.escalate_channel.name:
        return list(confirmation.escalate_approvers)
    return None


def approver_refusal(
    confirmation: ConfirmationRequest, *, channel_name: str, actor: str, identity: str = ""
) -> tuple[str, str] | None:
    """(code, sentence) if `actor` (channel-native; `identity`: channel-qualified) may not decide this
    request from `channel_name`; None if they may.

    Beside the channel-native ids, a person the gate named (`group:` / `person:`, routed when the
    request was made: `approver_people`) may decide under any identity linked to them now, and so
    may a stand-in of someone routed the request while their window is open (`stand_in_for`) — each
    only while the directory still says so (`approvals.selectors.standing.routing_refusal`). A stand-in of the
    person the call is made for is refused like them, unless the gate allows self-approval.
    """
    allowed = approvers_for_channel(confirmation, channel_name=channel_name)
    if allowed is None:
        return "not_approver", "This request cannot be decided from this channel."
    routed = routed_people(confirmation, channel_name=channel_name)
    if identity and (routed["people"] or routed["stand_ins"]):
        # The clicker is read now; the call's owner will be (self-approval, below): in one statement.
        owner = "" if confirmation.allow_self_approval else confirmation.user_id
        _read_users_at_once([_owner_identity(owner), identity])
        _read_links_at_once([identity, *(_owner_chat_identities(confirmation) if owner else ())])
    person = person_of(identity) if identity and (routed["people"] or routed["stand_ins"]) else ""
    standing_in = stand_in_for(routed, person=person) if person in routed["stand_ins"] else None
    if person in routed["stand_ins"] and standing_in is None:  # only a stand-in, and the window has closed
        return "not_approver", f"Your time standing in for {routed['stand_ins'][person]['name']} has ended."
    # A channel id the gate lists itself is the config's, not the directory's: it stays an approver.
    by_id = actor in (routed["entries"] or ())
    if not by_id and (person in routed["people"] or standing_in is not None):
        refusal = standing.routing_refusal(routed, person=person, standing_in=standing_in, remembered=_remembered)
        if refusal is not None:
            return refusal
    if allowed and actor not in allowed and person not in routed["people"] and standing_in is None:
        return "not_approver", "You are not one of the approvers of this request."
    if standing_in is not None and not confirmation.allow_self_approval and _is_owner(confirmation, lambda: standing_in["for"]):
        return "self_approval", standing.OWN_STAND_IN.format(standing_in["name"])
    return self_approval_refusal(confirmation, actor=actor, identity=identity)


def routed_people(confirmation: ConfirmationRequest, *, channel_name: str) -> dict[str, Any]:
    """The people snapshot of the approver list `channel_name` decides by: {"people": {key: name},
    "stand_ins": {delegate key: {"for": key, "name": name, "until": iso}}, "entries": the gate's list as
    given, or None for a request routed before it was kept} (empty for raw ids)."""
    escalated = bool(confirmation.escalate_channel_id) and channel_name != confirmation.channel.name
    snapshot = (confirmation.escalate_approver_people if escalated else confirmation.approver_people) or {}
    return {
        "people": snapshot.get("people") or {},
        "stand_ins": snapshot.get("stand_ins") or {},
        "entries": snapshot.get("entries"),
    }


def stand_in_for(routed: dict[str, Any], *, person: str, now: dt.datetime | None = None) -> dict[str, str] | None:
    """{"for": key, "name": name} if `person` decides as a stand-in (not named in their own right) whose
    window is still open; None otherwise."""
    if not person or person in routed["people"]:
        return None
    entry = routed["stand_ins"].get(person)
    if entry is None:
        return None
    until = dt.datetime.fromisoformat(entry["until"])
    if until <= (now or timezone.now()):
        return None
    return {"for": entry["for"], "name": entry["name"]}


def self_approval_refusal(confirmation: ConfirmationRequest, *, actor: str, identity: str = "") -> tuple[str, str] | None:
    """Refuses the person the call was made for, unless the gate allows self-approval.

    The call's `user_id` is compared with the clicker's channel-native id (`carol`, `U0CAROL`), with
    their channel-qualified `identity` (`web:carol`), and by person: the `user_id` mapped to a person
    (`_is_owner`: an identity, an e-mail, a username, a bare id of the request's channel) against the
    person behind `identity` (`person_of`) — a call made for `alice@example.com` is Alice's on Slack,
    Feishu and the web alike.
    """
    user_id = confirmation.user_id
    if confirmation.allow_self_approval or not user_id:
        return None
    own = user_id in (actor, identity)
    if not own and identity:
        _read_users_at_once([_owner_identity(user_id), identity])
        _read_links_at_once([identity, *_owner_chat_identities(confirmation)])
        own = _is_owner(confirmation, lambda: person_of(identity))
    return ("self_approval", "You cannot approve a call made on your own behalf.") if own else None


def owners_read_at_once(confirmations: Iterable[ConfirmationRequest], *, identity: str) -> None:
    """Within `people_memo`: the clicker `identity` and the people the calls of `confirmations` were made for
    (their `user_id`s as Django users and as chat identities), read in two statements and remembered — a list
    of requests (the inbox) then judges self-approval on each (`self_approval_refusal`) without a read per end
    user. An e-mail `user_id` is left to its own read."""
    owned = [c for c in confirmations if c.user_id and not c.allow_self_approval]
    _read_users_at_once([identity, *(_owner_identity(c.user_id) for c in owned)])
    _read_links_at_once([identity, *(i for c in owned for i in _owner_chat_identities(c))])


def _is_owner(confirmation: ConfirmationRequest, person: Callable[[], str]) -> bool:
    """Whether the person `person()` answers (a `person_of` key, read only if needed) is the one the call was
    made for: `owner_of` its `user_id`; or, for a bare id that names no Django user (`U0ALICE`), the person
    that id is on the request's channels. (Only a directory person can be that: an unlinked id is a person
    of its own, compared as an id already.)"""
    owner = owner_of(confirmation.user_id)
    if owner is not None:
        return owner == person()
    bare = _bare_owner_identities(confirmation)
    if not bare:
        return False
    key = person()
    return key.startswith("person:") and any(person_of(identity) == key for identity in bare)


def _owner_chat_identities(confirmation: ConfirmationRequest) -> list[str]:
    """The chat identities the call's `user_id` may be read as (`_is_owner`): itself when channel-qualified,
    or as a bare id; read with the clicker's (`_read_links_at_once`)."""
    kind, sep, _ = confirmation.user_id.partition(":")
    return ([confirmation.user_id] if kind in ACTOR_KINDS else []) if sep else _bare_owner_identities(confirmation)


def _bare_owner_identities(confirmation: ConfirmationRequest) -> list[str]:
    """A bare `user_id` (no kind, no `@`: `U0ALICE`) as an identity of the request's chat channels (its own,
    and the one it escalated to); [] for any other `user_id`. (On the web a bare id is a username: `owner_of`.)"""
    user_id = confirmation.user_id
    if not user_id or ":" in user_id or "@" in user_id:
        return []
    kinds = [confirmation.channel.kind]
    if confirmation.escalate_channel_id and confirmation.escalated_at:
        kinds.append(confirmation.escalate_channel.kind)
    return [f"{kind}:{user_id}" for kind in dict.fromkeys(kinds) if kind not in (*DJANGO_USER_KINDS, "email")]


def _read_links_at_once(identities: list[str]) -> None:
    """Within `people_memo`: the people these chat identities are linked to, read in one statement and
    remembered as `person_of` would answer (the clicker's, and the call's owner's by a bare id). Identities
    of a Django user or an e-mail (found by address too) are left to their own reads."""
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return
    wanted = [
        i
        for i in dict.fromkeys(identities)
        if i.partition(":")[0] not in (*DJANGO_USER_KINDS, "email") and ("person", i) not in memo
    ]
    if len(wanted) > 1:
        linked = dict(PersonIdentity.objects.filter(identity__in=wanted).values_list("identity", "person_id"))
        for identity in wanted:
            memo[("person", identity)] = f"person:{linked[identity]}" if identity in linked else identity


# The identity kinds of a signed-in Django user (the approval page, the admin): one person on all of them.
DJANGO_USER_KINDS = ("web", "admin")
PEOPLE_PREFIXES = standing.PEOPLE_PREFIXES


# Who is whom, remembered while a page judges many requests for one user (`people_memo`): the inbox.
_PEOPLE_MEMO: contextvars.ContextVar[dict[tuple[str, str], Any] | None] = contextvars.ContextVar("people_memo", default=None)


@contextlib.contextmanager
def people_memo() -> Iterator[None]:
    """Within this block `person_of` and `owner_of` answer each question once (one page's worth of reads,
    one click's). A block inside another shares the outer one's answers."""
    if _PEOPLE_MEMO.get() is not None:
        yield
        return
    token = _PEOPLE_MEMO.set({})
    try:
        yield
    finally:
        _PEOPLE_MEMO.reset(token)


def _remembered(kind: str, key: str, read: Callable[[], Any]) -> Any:
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return read()
    if (kind, key) not in memo:
        memo[(kind, key)] = read()
    return memo[(kind, key)]


def person_of(identity: str) -> str:
    """The person behind a channel-qualified identity: the key a quorum counts once, and what
    self-approval compares (docs/approving.md, "One person counts once").

    An identity linked to a `Person` (`PersonIdentity`; a Django user's `web:` / `admin:` through
    `Person.user`; an `email:` identity through `Person.email`) is `person:<id>`. Otherwise
    `web:<username>` and `admin:<username>` are the Django user, `user:<id>` (by id, so a renamed
    user stays one person), and every other identity (`slack:U…`, `feishu:ou_…`) is a person of its
    own — exactly as before anyone was linked. This is the one place that says who is the same
    person: every quorum and self-approval check follows it.
    """
    return _remembered("person", identity, lambda: _person_of(identity))


def _person_of(identity: str) -> str:
    kind, _, native = identity.partition(":")
    if kind in DJANGO_USER_KINDS and native:
        # A signed-in user (the page, the admin): their row, their person and a link of this identity, in one read.
        row = _user_row(identity)
        if row is not None:
            return _user_person_key(row)
    linked = PersonIdentity.objects.filter(identity=identity).values_list("person_id", flat=True).first()
    if linked is not None:
        return f"person:{linked}"
    if kind == "email" and native:
        found = Person.objects.filter(email__iexact=native).values_list("pk", flat=True).first()
        if found is not None:
            return f"person:{found}"
    return identity


def _user_row(identity: str) -> tuple[int, int | None, int | None] | None:
    """`_django_user_rows` for one `web:` / `admin:` identity (remembered within `people_memo`)."""
    return _remembered("user", identity, lambda: _django_user_rows([identity])[identity])


def _read_users_at_once(identities: list[str | None]) -> None:
    """Within `people_memo`: the Django users behind these identities that are not known yet, read in
    one statement and remembered (a click asks who clicked and whom the call was made for: one read,
    not two). Identities of other kinds, and None, are left to their own reads."""
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return
    wanted = list(dict.fromkeys(i for i in identities if i and _django_username(i) and ("user", i) not in memo))
    if len(wanted) > 1:
        for identity, row in _django_user_rows(wanted).items():
            memo[("user", identity)] = row


def _django_username(identity: str) -> str:
    """The username of a `web:` / `admin:` identity (a signed-in Django user); "" for any other."""
    kind, _, native = identity.partition(":")
    return native if kind in DJANGO_USER_KINDS else ""


def _owner_identity(user_id: str) -> str | None:
    """The identity `owner_of` reads a Django user by for this `user_id` (a username is `web:<name>`);
    None if it names no Django user (an e-mail, a `person:` key, a chat identity) or nobody ("")."""
    if not user_id:
        return None
    kind, sep, native = user_id.partition(":")
    if sep and kind in ACTOR_KINDS:
        return user_id if _django_username(user_id) else None
    return None if (sep and kind == "person") or "@" in user_id else f"web:{user_id}"


def _django_user_rows(identities: list[str]) -> dict[str, tuple[int, int | None, int | None] | None]:
    """For each `web:` / `admin:` identity: (the Django user's id, their directory person's id, the person
    the identity is linked to), None if there is no such user. One statement written out, however many:
    every click on the page and every self-approval check makes it, and composing it with the ORM cost
    more than running it."""
    users = connection.ops.quote_name(get_user_model()._meta.db_table)
    people = connection.ops.quote_name(Person._meta.db_table)
    links = connection.ops.quote_name(PersonIdentity._meta.db_table)
    # (The wanted rows as a UNION: SQLite, the embedded database, names no VALUES columns.)
    wanted = " UNION ALL ".join(
        ["SELECT CAST(%s AS INTEGER) AS n, CAST(%s AS TEXT) AS identity, CAST(%s AS TEXT) AS username"] * len(identities)
    )
    params = [x for n, identity in enumerate(identities) for x in (n, identity, _django_username(identity))]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w.n, u.id, p.id, (SELECT i.person_id FROM {links} i WHERE i.identity = w.identity LIMIT 1) "
            f"FROM ({wanted}) w JOIN {users} u ON u.username = w.username LEFT JOIN {people} p ON p.user_id = u.id",
            params,
        )
        found = {n: (user, person, linked) for n, user, person, linked in cursor.fetchall()}
    return {identity: found.get(n) for n, identity in enumerate(identities)}


def _user_person_key(row: tuple[int, int | None, int | None]) -> str:
    """`person_of`'s key for a Django user's row (`_django_user_rows`): the person their identity is linked
    to, else their own person, else the user by id (so a renamed user stays one person)."""
    user_pk, own_person, linked = row
    if linked is not None:
        return f"person:{linked}"
    return f"person:{own_person}" if own_person is not None else f"user:{user_pk}"


def person_name(person: str) -> str:
    """The display name of a directory person (`person:<id>`); "" for any other key."""
    kind, _, pk = person.partition(":")
    if kind != "person" or not pk.isdigit():
        return ""
    return Person.objects.filter(pk=int(pk)).values_list("display_name", flat=True).first() or ""


def owner_of(user_id: str) -> str | None:
    """The person a call's `user_id` names, as `person_of` keys them; None if it names nobody known.

    `user_id` may be a channel-qualified identity (`slack:U0ALICE`), `person:EMAIL`, an e-mail
    address (a person's), or a Django username.
    """
    return _remembered("owner", user_id, lambda: _owner_of(user_id))


def _owner_of(user_id: str) -> str | None:
    kind, sep, native = user_id.partition(":")
    if sep and kind == "person":
        return person_key_by_email(native)
    if sep and kind in ACTOR_KINDS:
        return person_of(user_id)
    if "@" in user_id:
        return person_key_by_email(user_id)
    # A Django username: the user's person, read with the user (and remembered as `person_of` would).
    identity = f"web:{user_id}"
    row = _user_row(identity)
    if row is None:
        return None
    return _remembered("person", identity, lambda: _user_person_key(row))


def person_key_by_email(email: str) -> str | None:
    found = Person.objects.filter(email__iexact=email).values_list("pk", flat=True).first()
    return None if found is None else f"person:{found}"


def linked_identities(*, user: Any) -> list[str]:
    """The chat identities linked to a signed-in user's person, sorted."""
    return list(PersonIdentity.objects.filter(person__user=user).order_by("identity").values_list("identity", flat=True))


def stand_ins_of(*, user: Any) -> list[StandIn]:
    """The stand-ins a signed-in user's person named that have not ended yet, soonest first."""
    return list(
        StandIn.objects.filter(person__user=user, ends_at__gt=timezone.now()).select_related("delegate").order_by("starts_at")
    )


def _native_ids(people: list[Person], kind: str) -> list[str]:
    """The channel-native ids of `people` on a channel of `kind`: their linked `kind:` identities, or
    on the web channel their Django usernames."""
    if kind == "web":
        return [p.user.username for p in people if p.user is not None]
    prefix = f"{kind}:"
    identities = PersonIdentity.objects.filter(person__in=people, identity__startswith=prefix).order_by("person_id", "identity")
    natives = [row.identity[len(prefix) :] for row in identities]
    if kind == "email":  # the e-mail channel reaches a person at their own address too
        natives += [p.email for p in people if p.email]
    return natives


def approver_routing(entries: list[str], *, kind: str, now: dt.datetime) -> tuple[list[str], dict[str, Any]]:
    """A gate's `approvers` for a channel of `kind`, routed as the request is made: (the channel-native
    ids the request's card names and that may decide, the people snapshot for `approver_people`).

    Raw channel ids stay as they are. `group:NAME` is every active member, `person:EMAIL` that person,
    each reached by their identities linked on `kind`. Anyone routed the request (named, or linked to
    a raw id) who has a stand-in whose window is open now reaches the stand-in too. A list that names
    nobody known and no stand-in comes back exactly as it was given, with an empty snapshot.
    """
    if not entries:
        return [], {}
    raw = [e for e in entries if not e.startswith(PEOPLE_PREFIXES)]
    named: dict[int, Person] = {}
    for entry in entries:
        prefix, _, name = entry.partition(":")
        if prefix == "group":
            members = Person.objects.filter(groups__name=name, active=True).select_related("user")
            named.update((p.pk, p) for p in members)
        elif prefix == "person":
            person = Person.objects.filter(email__iexact=name, active=True).select_related("user").first()
            if person is not None:
                named[person.pk] = person
    linked_ids = _people_linked(raw, kind=kind)
    linked = Person.objects.filter(pk__in=linked_ids).select_related("user") if linked_ids else ()
    everyone = {**{p.pk: p for p in linked}, **named}
    stand_ins: dict[str, dict[str, str]] = {}
    delegates: dict[int, Person] = {}
    open_stand_ins = (
        StandIn.objects.filter(person_id__in=list(everyone), starts_at__lte=now, ends_at__gt=now, delegate__active=True)
        .select_related("person", "delegate__user")
        .order_by("starts_at")
        if everyone
        else ()  # nobody of the directory: no stand-in (and no query composed only to find that out)
    )
    for row in open_stand_ins:
        if row.delegate_id in everyone or row.delegate_id in delegates:
            continue  # an approver in their own right, or already standing in for someone
        delegates[row.delegate_id] = row.delegate
        stand_ins[row.delegate.key] = {"for": row.person.key, "name": row.person.display_name, "until": row.ends_at.isoformat()}
    if not named and not stand_ins:
        return list(entries), {}
    routed = list(dict.fromkeys([*raw, *_native_ids([*named.values(), *delegates.values()], kind)]))
    unresolved = [e for e in entries if e.startswith(PEOPLE_PREFIXES)] if not routed else []
    # A named list never becomes [] ("any member"): entries nobody answers to keep it closed.
    # The gate's entries too: at a click, who is still in the groups they name (`approvals.selectors.standing.routing_refusal`).
    snapshot = {"people": {p.key: p.display_name for p in named.values()}, "stand_ins": stand_ins, "entries": list(entries)}
    return routed + unresolved, snapshot


def _people_linked(raw: list[str], *, kind: str) -> list[int]:
    """The active people behind raw channel ids of `kind`: linked identities, and on the web Django users by
    username (on e-mail, addresses: `person_of` finds an `email:` identity by address too). One statement
    written out rather than composed by the ORM: every request with an approver list makes it."""
    if not raw:
        return []
    if connection.vendor != "postgresql":  # (SQLite for `make run`: no arrays)
        return list(
            Person.objects.filter(active=True)
            .filter(
                Q(identities__identity__in=[f"{kind}:{native}" for native in raw])
                | Q(user__username__in=raw if kind == "web" else [])
                | Q(email__in=raw if kind == "email" else [])
            )
            .values_list("pk", flat=True)
            .distinct()
        )
    tables = {model: connection.ops.quote_name(model._meta.db_table) for model in (Person, PersonIdentity)}
    users = connection.ops.quote_name(get_user_model()._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.id FROM {tables[Person]} p WHERE p.active AND ("
            f"p.id IN (SELECT i.person_id FROM {tables[PersonIdentity]} i WHERE i.identity = ANY(%(identities)s))"
            f" OR p.user_id IN (SELECT u.id FROM {users} u WHERE u.username = ANY(%(usernames)s))"
            f" OR p.email = ANY(%(emails)s))",
            {
                "identities": [f"{kind}:{native}" for native in raw],
                "usernames": raw if kind == "web" else [],
                "emails": raw if kind == "email" else [],
            },
        )
        return [row[0] for row in cursor.fetchall()]


def _user_with_people(pk: Any) -> Any:
    """The user by id, with what `_django_user_rows` reads of them for each identity they act under
    (`web:` and `admin:`): their directory person and the person each identity is linked to."""

    def linked(kind: str) -> Subquery:
        identity = Concat(Value(f"{kind}:"), OuterRef("username"), output_field=CharField())
        return Subquery(PersonIdentity.objects.filter(identity=identity).values("person_id")[:1])

    return get_user_model()._default_manager.filter(pk=pk).annotate(
        gateway_person=Subquery(Person.objects.filter(user=OuterRef("pk")).values("pk")[:1]),
        **{f"gateway_{kind}_link": linked(kind) for kind in DJANGO_USER_KINDS},
    )


# The signed-in user, read on every page and click (the sign-in backends' `get_user`), prepared once per
# connection (approvals.prepared) rather than composed by the ORM each time — with the rows that say
# which person they are, so that a click does not read them again (`people_known`).
USER_READ = PreparedRead(_user_with_people)


def people_known(user: Any) -> None:
    """Within `people_memo`: the signed-in `user`'s rows for `person_of`, as their sign-in's read brought
    them (`user_by_id`), so a click of theirs makes no read of its own to know who clicked. A user read
    otherwise (another sign-in backend) is left to `person_of`'s read."""
    memo = _PEOPLE_MEMO.get()
    if memo is None or not hasattr(user, "gateway_person"):
        return
    username = user.get_username()
    for kind in DJANGO_USER_KINDS:
        memo.setdefault(("user", f"{kind}:{username}"), (user.pk, user.gateway_person, getattr(user, f"gateway_{kind}_link")))


def user_by_id(user_id: Any) -> Any | None:
    """The Django user whose id a session holds, or None (no such user, or an id that is not one)."""
    try:
        pk = get_user_model()._meta.pk.to_python(user_id)
    except ValidationError:
        return None
    return None if pk is None else USER_READ.first(pk)
