"""Microsoft Teams channel, on the Microsoft 365 Agents SDK (docs/teams.md).

Outbound: the bot's token comes from Entra through the SDK's MSAL token
provider (client credentials for `https://api.botframework.com`), and cards are
posted and redrawn through the SDK's `TeamsConnectorClient` at the configured
Bot Connector `service_url` (`POST`/`PUT /v3/conversations/{id}/activities`).

Inbound: Teams posts every activity to `/channels/<name>/callback` (the bot's
messaging endpoint) with `Authorization: Bearer <JWT>`. The token is checked as
the SDK's `JwtTokenValidator` checks it — RS256, a key from the Bot Framework
keys, the bot's app id as audience, lifetime with the SDK's five minutes of
clock skew — except that the keys and the issuer come from the configured
OpenID metadata document (`openid_metadata_url`) rather than from the public
cloud's fixed addresses, and the issuer is always checked. The token's
`serviceurl` claim must name the activity's `serviceUrl`. Nothing of the
body is read before that. The activity is then read with the Teams extension's
types (`TeamsActivity`, Teams channel data, `AdaptiveCardInvokeValue`): it must
come from Teams (`channelId` msteams), from the bot's own Entra tenant and from
the configured conversation, through the configured Bot Connector host
(`check_place`); a click is an `invoke` named `adaptiveCard/action` whose
`Action.Execute` carries one of our verbs. Its
answer is the refreshed card (shown to the clicker at once); the worker's
redraw shows it to everyone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import jwt
import requests
from django.http import HttpRequest, HttpResponse, JsonResponse
from microsoft_agents.activity import Activity, Attachment
from microsoft_agents.hosting.msteams import TeamsActivity
from microsoft_teams.api.models import AdaptiveCardInvokeValue, ChannelData
from microsoft_agents.authentication.msal import MsalAuth
from microsoft_agents.hosting.core import AgentAuthConfiguration, ClaimsIdentity, JwtTokenValidator
from microsoft_agents.hosting.core.connector.teams import TeamsConnectorClient
from msal import ConfidentialClientApplication
from pydantic import ValidationError

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    DecisionOutcome,
    MessageRef,
    unsign_confirmation_id,
)
from channels_ext.cardkit import shown_ids, typed_edits
from channels_ext.teams import cards
from channels_ext.teams.config import TeamsChannelConfig

logger = logging.getLogger(__name__)

# The Bot Connector accepts tokens for this resource (client credentials, `.default` scope).
BOT_FRAMEWORK_RESOURCE = "https://api.botframework.com"
BOT_FRAMEWORK_SCOPE = f"{BOT_FRAMEWORK_RESOURCE}/.default"
# JwtTokenValidator's own clock skew (microsoft-agents-hosting-core 1.9).
CLOCK_SKEW_SECONDS = 300.0
HTTP_TIMEOUT_SECONDS = 10
METADATA_TTL_SECONDS = 24 * 3600  # Bot Framework asks for the metadata to be cached, and refreshed daily

TEAMS_CHANNEL_ID = "msteams"  # the `channelId` of activities from Microsoft Teams
ADAPTIVE_CARD_ACTION = "adaptiveCard/action"
INVOKE_CARD_RESPONSE = "application/vnd.microsoft.card.adaptive"
INVOKE_MESSAGE_RESPONSE = "application/vnd.microsoft.activity.message"

Result = TypeVar("Result")


# --------------------------------------------------------------------------- outbound token


class _BotTokenProvider(MsalAuth):
    """The SDK's MSAL token provider for a client-secret bot, asking the configured authority as it is.

    MSAL validates an authority it does not know (anything but Microsoft's own login hosts) by asking
    `login.microsoftonline.com` first; a sovereign or private authority (and a test's local issuer) is
    taken as configured instead (`instance_discovery=False`), which changes nothing for Microsoft's hosts.
    """

    def _create_client_application(self, tenant_id: str | None = None) -> ConfidentialClientApplication:
        config = self._msal_configuration
        return ConfidentialClientApplication(
            client_id=config.CLIENT_ID,
            authority=MsalAuth._resolve_authority(config, tenant_id),
            client_credential=config.CLIENT_SECRET,
            instance_discovery=False,
            timeout=HTTP_TIMEOUT_SECONDS,
        )


_providers: dict[str, _BotTokenProvider] = {}
_providers_lock = threading.Lock()


def token_provider(config: TeamsChannelConfig) -> _BotTokenProvider:
    """One token provider per bot credential and authority, kept for the process: MSAL caches the token
    in it until shortly before it expires (adapters themselves are made per delivery)."""
    fingerprint = hashlib.sha256(
        json.dumps([config.app_id, config.app_password, config.tenant_id, config.login_url]).encode()
    ).hexdigest()
    with _providers_lock:
        provider = _providers.get(fingerprint)
        if provider is None:
            auth = AgentAuthConfiguration(
                client_id=config.app_id,
                client_secret=config.app_password,
                tenant_id=config.tenant_id,
                authority=f"{config.login_url.rstrip('/')}/{config.tenant_id}",
            )
            provider = _providers[fingerprint] = _BotTokenProvider(auth)
        return provider


# --------------------------------------------------------------------------- inbound token


@dataclasses.dataclass(frozen=True)
class OpenIdMetadata:
    issuer: str
    jwks_uri: str


_metadata: dict[str, tuple[float, OpenIdMetadata]] = {}
_metadata_lock = threading.Lock()


def openid_metadata(url: str) -> OpenIdMetadata:
    """The issuer and key set named by an OpenID metadata document, cached for a day."""
    with _metadata_lock:
        cached = _metadata.get(url)
    if cached is not None and time.monotonic() - cached[0] < METADATA_TTL_SECONDS:
        return cached[1]
    try:
        response = requests.get(url, timeout=HTTP_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
        metadata = OpenIdMetadata(issuer=str(document["issuer"]), jwks_uri=str(document["jwks_uri"]))
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        raise CallbackError(401, f"the OpenID metadata at {url} could not be read ({type(exc).__name__})") from None
    with _metadata_lock:
        _metadata[url] = (time.monotonic(), metadata)
    return metadata


class ActivityTokenValidator(JwtTokenValidator):
    """The SDK's validator, with the keys and issuer of the configured OpenID metadata (module docstring)."""

    def __init__(self, configuration: AgentAuthConfiguration, metadata_url: str):
        super().__init__(configuration)
        self.metadata_url = metadata_url

    async def validate_token(self, token: str) -> ClaimsIdentity:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != "RS256":
            raise jwt.InvalidAlgorithmError("only RS256 tokens are accepted")
        metadata = await asyncio.to_thread(openid_metadata, self.metadata_url)
        key = await self._jwk_client_manager.get_signing_key(metadata.jwks_uri, header)
        claims = jwt.decode(
            token,
            key=key,
            algorithms=["RS256"],
            audience=self.configuration.CLIENT_ID,
            issuer=metadata.issuer,
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["exp", "iss", "aud"]},
        )
        return ClaimsIdentity(claims, authentication_type="Bearer", security_token=token)


# --------------------------------------------------------------------------- the adapter


class TeamsAdapter(ChannelAdapter):
    """Posts approval cards to one Teams conversation and answers the clicks on them."""

    kind = "teams"
    config_model = TeamsChannelConfig
    config: TeamsChannelConfig

    # --- outbound ---------------------------------------------------------

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Post the card to the configured conversation; return its activity id.

        The Bot Connector has no idempotency key, so `idempotency_key` is unused:
        the caller stores the returned ref and never posts twice.
        """
        activity = self._card_activity(card)
        response = self._run(
            "send the card", lambda client: client.conversations.send_to_conversation(self.config.conversation_id, activity)
        )
        if not response.id:
            raise ChannelError("Teams accepted the card but returned no activity id")
        return MessageRef({"conversation_id": self.config.conversation_id, "activity_id": response.id})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Redraw a posted card for everyone (PUT of its activity)."""
        conversation_id, activity_id = ref.data.get("conversation_id"), ref.data.get("activity_id")
        if not isinstance(conversation_id, str) or not isinstance(activity_id, str) or not activity_id:
            raise ChannelError(f"Teams message reference {ref.data!r} lacks conversation_id or activity_id", permanent=True)
        activity = self._card_activity(card)
        activity.id = activity_id
        self._run(
            "update the card", lambda client: client.conversations.update_activity(conversation_id, activity_id, activity)
        )

    @staticmethod
    def _card_activity(card: CardView) -> Activity:
        attachment = Attachment(content_type=cards.ADAPTIVE_CARD_CONTENT_TYPE, content=cards.render_card(card))
        return Activity(type="message", text=cards.fallback_text(card), attachments=[attachment])

    def _run(self, action: str, send: Callable[[TeamsConnectorClient], Awaitable[Result]]) -> Result:
        """Get the bot's token and make one Bot Connector call, in an event loop of this thread's own."""
        try:
            return asyncio.run(self._call(action, send))
        except ChannelError:
            raise
        except aiohttp.ClientResponseError as exc:
            raise _connector_error(action, exc) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ChannelError(f"Could not reach the Bot Connector to {action}: {type(exc).__name__}") from None

    async def _call(self, action: str, send: Callable[[TeamsConnectorClient], Awaitable[Result]]) -> Result:
        token = await self._token(action)
        session = aiohttp.ClientSession(
            base_url=self.config.service_url.rstrip("/") + "/",
            timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_SECONDS),
        )
        client = TeamsConnectorClient(self.config.service_url, token, session=session)
        try:
            return await send(client)
        finally:
            await client.close()

    async def _token(self, action: str) -> str:
        try:
            return await token_provider(self.config).get_access_token(BOT_FRAMEWORK_RESOURCE, [BOT_FRAMEWORK_SCOPE])
        except requests.RequestException as exc:
            raise ChannelError(f"Could not reach {self.config.login_url} for the bot's token: {type(exc).__name__}") from None
        except ValueError as exc:
            # MSAL's refusals (a wrong secret, app id or tenant; an authority that is not one)
            # come back as ValueError with Entra's error code and description, never the secret.
            raise ChannelError(
                f"Entra refused the token of Teams channel {self.name!r} (app {self.config.app_id}) needed to {action}: "
                f"{_first_line(str(exc))}; check app_id, app_password, tenant_id and login_url",
                permanent=True,
            ) from None

    # --- inbound ----------------------------------------------------------

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """Authenticate an activity from Teams, decide a click, and answer its invoke with the refreshed card.

        Raises CallbackError(401) for a missing, forged, expired or misaddressed token,
        CallbackError(400) for a malformed activity and CallbackError(403) for one from another
        place than the channel's (`check_place`); `decide` is only called after all three passed.
        """
        claims = self._validated_claims(_bearer_token(request.headers.get("Authorization")))
        try:
            activity = TeamsActivity.model_validate_json(request.body)
        except (ValidationError, ValueError):
            raise CallbackError(400, "the body is not a Bot Framework activity") from None
        claimed_service_url = claims.get_claim_value("serviceurl")
        if claimed_service_url is not None and (
            str(claimed_service_url).rstrip("/").casefold() != str(activity.service_url or "").rstrip("/").casefold()
        ):
            raise CallbackError(401, "the token was issued for another serviceUrl than the activity names")
        check_place(activity, self.config)
        if activity.type != "invoke" or activity.name != ADAPTIVE_CARD_ACTION:
            return HttpResponse(status=200)  # conversation updates, messages to the bot…: nothing to do
        return JsonResponse(invoke_answer(decide(parse_card_action(activity))))

    def _validated_claims(self, token: str) -> ClaimsIdentity:
        configuration = AgentAuthConfiguration(client_id=self.config.app_id, tenant_id=self.config.tenant_id)
        validator = ActivityTokenValidator(configuration, self.config.openid_metadata_url)
        try:
            return asyncio.run(validator.validate_token(token))
        except CallbackError:
            raise
        except (jwt.PyJWTError, ValueError) as exc:
            # The reason, never the token.
            raise CallbackError(401, f"the activity's token was refused ({type(exc).__name__})") from None


# --------------------------------------------------------------------- helpers


def _bearer_token(header: str | None) -> str:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise CallbackError(401, "the activity carries no bearer token")
    return token.strip()


def check_place(activity: Activity, config: TeamsChannelConfig) -> None:
    """Refuse an authenticated activity that does not come from the channel's own place (docs/teams.md §3).

    Bot Framework signs activities of every channel the bot is registered on (Web Chat, Direct Line, whose
    clients write `from` and `channelData` themselves) and of every tenant and conversation the bot is in, all
    with the same token: so the activity must come from Microsoft Teams (`channelId`), name the bot's Entra
    tenant and no other, come from the configured conversation (a channel's thread is `<id>;messageid=<root>`:
    a card forwarded to another chat is not), through the Bot Connector host the cards are posted to.
    """
    # Authenticated, but not from here: 403, which Bot Framework does not redeliver (Teams retries only
    # an activity left unanswered for 15 s: learn.microsoft.com/microsoftteams/platform/bots/bot-basics).
    if activity.channel_id != TEAMS_CHANNEL_ID:
        where = str(activity.channel_id)[:40]
        raise CallbackError(403, f"the activity comes from Bot Framework channel {where!r}, not {TEAMS_CHANNEL_ID}")
    tenants = activity_tenants(activity)
    if not tenants:
        raise CallbackError(403, "the activity names no Entra tenant")
    if any(tenant.casefold() != config.tenant_id.casefold() for tenant in tenants):
        raise CallbackError(403, "the activity comes from another Entra tenant than the bot's")
    conversation = activity.conversation.id if activity.conversation is not None else ""
    if conversation.split(";", 1)[0] != config.conversation_id:
        raise CallbackError(403, "the activity comes from another conversation than the channel's conversation_id")
    if _origin(activity.service_url) != _origin(config.service_url):
        raise CallbackError(403, "the activity names another Bot Connector than the channel's service_url")


def activity_tenants(activity: Activity) -> set[str]:
    """Every Entra tenant an activity names: Teams' channel data names it, and the conversation."""
    try:
        channel_data = ChannelData.model_validate(activity.channel_data) if isinstance(activity.channel_data, dict) else None
    except ValidationError:
        raise CallbackError(400, "the activity's channelData is not Teams channel data") from None
    tenants = set()
    if channel_data is not None and channel_data.tenant is not None and channel_data.tenant.id:
        tenants.add(channel_data.tenant.id)
    if activity.conversation is not None and activity.conversation.tenant_id:
        tenants.add(activity.conversation.tenant_id)
    return tenants


def _origin(url: str | None) -> tuple[str, str]:
    """A URL's scheme and host (`https://smba.trafficmanager.net/emea/` and `…/teams/` are one Bot Connector)."""
    parts = urlsplit(url or "")
    return parts.scheme.lower(), parts.netloc.lower()


def parse_card_action(activity: Activity) -> Callback:
    """An authenticated `adaptiveCard/action` invoke as a Callback; CallbackError(400) if it is not ours."""
    try:
        invoke = AdaptiveCardInvokeValue.model_validate(activity.value)
    except ValidationError:
        raise CallbackError(400, "the invoke's value is not an Adaptive Card action") from None
    if invoke.action.type != "Action.Execute":
        raise CallbackError(400, "the invoke carries no Action.Execute")
    verb = invoke.action.verb
    grant = _grant_index(verb)
    if verb not in cards.VERBS and grant is None:
        raise CallbackError(400, f"the card action {str(verb)[:50]!r} is not one of this gateway's buttons")
    data = invoke.action.data
    signed = data.get("confirmation_id")
    if not isinstance(signed, str):
        raise CallbackError(400, "the card action carries no confirmation_id")
    confirmation_id = unsign_confirmation_id(signed)
    who = activity.from_property
    actor = who.aad_object_id if who is not None else None
    if not actor:
        raise CallbackError(400, "the activity names no aadObjectId for the clicker")
    decision = "reject" if verb in (cards.REJECT_VERB, cards.REJECT_ALL_VERB) else "approve"
    whole_turn = verb in (cards.APPROVE_ALL_VERB, cards.REJECT_ALL_VERB)
    typed_reason = data.get(cards.REASON_INPUT_ID)
    return Callback(
        confirmation_id=confirmation_id,
        decision=decision,
        actor=actor,
        actor_name=(who.name or "") if who is not None else "",
        reason=typed_reason.strip() if decision == "reject" and isinstance(typed_reason, str) else "",
        dedupe_key=f"teams:activity:{activity.id}" if activity.id else "",
        grant=grant,
        typed_edits=_typed_edits(data) if verb == cards.EDIT_VERB else None,
        whole_turn=whole_turn,
        shown_ids=shown_ids(data.get("shown"), confirmation_id) if whole_turn else None,
    )


def _grant_index(verb: Any) -> int | None:
    """The scope an `approve_grant_<n>` button approves for; None for any other verb."""
    if not isinstance(verb, str):
        return None
    tail = verb.removeprefix(cards.GRANT_VERB_PREFIX)
    return int(tail) if tail != verb and tail.isdigit() and len(tail) <= 2 else None


def _typed_edits(data: dict[str, Any]) -> dict[str, str]:
    """The edited arguments as typed: input `arg_<n>` holds the text for `edit[n]` (read by the gateway
    as the type of the value it replaces); empty inputs leave a value as it was."""
    return typed_edits(data.get("edit"), data, prefix=cards.EDIT_INPUT_PREFIX, max_fields=cards.MAX_EDIT_FIELDS)


def invoke_answer(outcome: DecisionOutcome) -> dict[str, Any]:
    """The invoke response for a click: the card as it is now, with the clicker told what happened.

    https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/universal-actions-for-adaptive-cards/work-with-universal-actions-for-adaptive-cards
    """
    message = outcome.message or ("Done." if outcome.applied else "Nothing was changed.")
    if outcome.card is None:
        return invoke_message(message)
    return {"statusCode": 200, "type": INVOKE_CARD_RESPONSE, "value": cards.render_card(outcome.card, told=message)}


def invoke_message(message: str) -> dict[str, Any]:
    """An invoke response that only tells the clicker something (the card stays as it is)."""
    return {"statusCode": 200, "type": INVOKE_MESSAGE_RESPONSE, "value": message}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "no detail"


def _connector_error(action: str, exc: aiohttp.ClientResponseError) -> ChannelError:
    """Class a Bot Connector answer: 429 waits for Retry-After, other 4xx are permanent, 5xx transient."""
    message = f"The Bot Connector answered HTTP {exc.status} when asked to {action}"
    if exc.status == 429:
        return ChannelError(message, retry_after=_retry_after(exc.headers))
    if exc.status in (401, 403):
        return ChannelError(
            message + "; the bot is not installed in the conversation, or its token was refused", permanent=True
        )
    if exc.status == 404:
        return ChannelError(message + "; check conversation_id and service_url", permanent=True)
    if 400 <= exc.status < 500 and exc.status != 408:
        return ChannelError(message, permanent=True)
    return ChannelError(message)


def _retry_after(headers: Any) -> float | None:
    raw = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None
