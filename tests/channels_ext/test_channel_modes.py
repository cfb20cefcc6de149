"""Channel `mode` in the config file: each key validated for the mode, errors at the key's own path."""

from __future__ import annotations

import pytest

from approvals.config_schema import config_json_schema as hooks_json_schema
from approvals.config_schema import parse_config_text
from approvals.models import Channel
from channels_ext.checks import check_channel_configs
from channels_ext.feishu.config import FeishuChannelConfig
from channels_ext.slack.config import SlackChannelConfig
from gateway_utils.configfile import ConfigError

SLACK = "{name: ops, kind: slack, bot_token: xoxb-1, channel_id: C1"
FEISHU = "{name: fs, kind: feishu, app_id: cli_1, app_secret: s, chat_id: oc_1"


def problems_of(channel: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as excinfo:
        parse_config_text(f"channels: [{channel}]")
    return [(p.path, p.message) for p in excinfo.value.problems]


def channel_of(channel: str):
    (parsed,) = parse_config_text(f"channels: [{channel}]").channels
    return parsed


@pytest.mark.parametrize(
    ("channel", "problems"),
    [
        (
            SLACK + ", mode: socket}",
            [("channels[0].app_token", "is required with `mode: socket`: an app-level token (xapp-…) with connections:write")],
        ),
        (
            SLACK + ", mode: socket, app_token: xoxb-2222-a-bot-token}",
            [
                (
                    "channels[0].app_token",
                    "must be an app-level token starting with xapp- (Basic Information → App-Level Tokens, "
                    "scope connections:write); a bot token (xoxb-…) is not accepted",
                )
            ],
        ),
        (
            SLACK + ", signing_secret: s, app_token: xapp-1}",
            [("channels[0].app_token", "is used only with `mode: socket`; add `mode: socket` or remove app_token")],
        ),
        (SLACK + "}", [("channels[0].signing_secret", "is required")]),
        (SLACK + ", signing_secret: ''}", [("channels[0].signing_secret", "must not be empty")]),
        (SLACK + ", mode: websocket, app_token: xapp-1}", [("channels[0].mode", "must be 'http' or 'socket'")]),
        (FEISHU + "}", [("channels[0].verification_token", "is required")]),
        (FEISHU + ", mode: socket}", [("channels[0].mode", "must be 'http' or 'long_connection'")]),
    ],
    ids=[
        "socket-without-app-token",
        "socket-with-a-bot-token",
        "app-token-without-socket",
        "http-without-signing-secret",
        "http-with-an-empty-signing-secret",
        "unknown-slack-mode",
        "feishu-http-without-verification-token",
        "unknown-feishu-mode",
    ],
)
def test_a_key_the_mode_needs_or_refuses_is_named_by_its_path(channel, problems):
    assert problems_of(channel) == problems


def test_socket_mode_needs_no_signing_secret_and_long_connection_no_verification_token():
    slack = channel_of(SLACK + ", mode: socket, app_token: xapp-1-A111-abc}")
    feishu = channel_of(FEISHU + ", mode: long_connection}")

    assert (slack.mode, slack.app_token, slack.signing_secret) == ("socket", "xapp-1-A111-abc", "")
    assert (feishu.mode, feishu.verification_token) == ("long_connection", "")
    assert channel_of(SLACK + ", signing_secret: s}").mode == "http"  # the default keeps today's callbacks


def test_secret_keys_are_marked_in_the_models_and_the_json_schema():
    def secrets(model) -> set[str]:
        return {name for name, field in model.model_fields.items() if (field.json_schema_extra or {}).get("secret")}

    assert secrets(SlackChannelConfig) == {"bot_token", "signing_secret", "app_token"}
    assert secrets(FeishuChannelConfig) == {"app_secret", "verification_token", "encrypt_key"}
    slack_schema = hooks_json_schema()["$defs"]["SlackChannelConfig"]["properties"]
    assert slack_schema["app_token"]["secret"] is True
    assert "default" not in slack_schema["app_token"]  # no `default: null` for editors to offer
    assert slack_schema["mode"]["enum"] == ["http", "socket"]


@pytest.mark.django_db
def test_the_database_check_reports_a_stored_socket_channel_without_an_app_token():
    Channel.objects.create(name="ops-slack", kind="slack", config={"mode": "socket", "bot_token": "x", "channel_id": "C1"})

    (error,) = check_channel_configs(app_configs=None, databases=["default"])

    assert error.id == "channels_ext.E001"
    assert error.msg.startswith("Channel 'ops-slack' has an invalid key 'app_token': Value error, is required with")
