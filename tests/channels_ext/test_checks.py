"""The `channels_ext` system check: configured channels whose keys their adapter would refuse."""

from __future__ import annotations

import io
import sys

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction

from approvals.models import Channel
from gateway_contract import CHANNEL_KINDS
from channels_ext.checks import check_channel_configs
from tests.conftest import apply_config

pytestmark = pytest.mark.django_db

SLACK_TOKEN = "xoxb-1111-2222-AbCdEfGhIjKlMnOp"
FEISHU_ID_SECRET = "cli_secret_app_id_0123456789"


def run_check() -> list[Error]:
    return check_channel_configs(app_configs=None, databases=["default"])


def problems() -> list[tuple[str, str]]:
    return [(error.id, error.msg) for error in run_check()]


def test_a_slack_channel_with_a_missing_and_an_empty_secret_fails_the_database_check():
    Channel.objects.create(name="ops-slack", kind="slack", config={"bot_token": "", "channel_id": "C0123456789"})

    with pytest.raises(SystemCheckError) as failure:
        call_command("check", "--database", "default", stdout=io.StringIO(), stderr=io.StringIO())

    report = str(failure.value)
    assert "ops-slack (slack): (channels_ext.E001) Channel 'ops-slack' has an empty key 'bot_token'." in report
    assert "ops-slack (slack): (channels_ext.E001) Channel 'ops-slack' is missing key 'signing_secret'." in report
    assert "HINT: Add `signing_secret` to channel 'ops-slack' in the config file" in report


def test_each_problem_is_an_error_with_a_stable_id_and_a_hint_naming_the_fix():
    Channel.objects.create(name="ops-slack", kind="slack", config={"bot_token": SLACK_TOKEN, "channel_id": "C1"})

    (error,) = run_check()

    assert isinstance(error, Error)
    assert error.id == "channels_ext.E001"
    assert error.obj == Channel.objects.get(name="ops-slack")
    assert error.hint == (
        "Add `signing_secret` to channel 'ops-slack' in the config file and run `python manage.py apply_config FILE`."
    )


def test_a_secret_of_only_spaces_counts_as_empty():
    Channel.objects.create(
        name="ops-slack",
        kind="slack",
        config={"bot_token": SLACK_TOKEN, "signing_secret": "   ", "channel_id": "C1"},
    )

    (error,) = run_check()

    assert error.msg == "Channel 'ops-slack' has an empty key 'signing_secret'."
    assert "environment variable NAME is set and not blank" in error.hint


def test_every_kind_is_checked_against_its_own_adapters_config_model():
    Channel.objects.create(
        name="finance-feishu",
        kind="feishu",
        config={"app_id": FEISHU_ID_SECRET, "verification_token": "", "chat_id": "oc_1", "encrypt_key": ""},
    )
    Channel.objects.create(name="web", kind="web", config={"colour": "blue"})

    assert problems() == [
        ("channels_ext.E001", "Channel 'finance-feishu' is missing key 'app_secret'."),
        ("channels_ext.E001", "Channel 'finance-feishu' has an empty key 'verification_token'."),
        ("channels_ext.E001", "Channel 'web' has key 'colour', which a web channel does not take."),
    ]


def test_an_optional_key_left_empty_is_not_a_problem():
    # Feishu's encrypt_key: empty means plain callbacks (docs/reference/config.md).
    Channel.objects.create(
        name="finance-feishu",
        kind="feishu",
        config={"app_id": "cli_1", "app_secret": "s", "verification_token": "v", "chat_id": "oc_1", "encrypt_key": ""},
    )

    assert problems() == []


def test_a_key_of_the_wrong_type_is_reported_without_its_value():
    Channel.objects.create(
        name="ops-slack",
        kind="slack",
        config={"bot_token": ["xoxb-leak-me"], "signing_secret": "s", "channel_id": "C1"},
    )

    (error,) = run_check()

    assert error.id == "channels_ext.E001"
    assert error.msg == "Channel 'ops-slack' has an invalid key 'bot_token': Input should be a valid string."
    assert "xoxb-leak-me" not in f"{error.msg} {error.hint}"


def test_a_channel_of_a_kind_no_adapter_handles_is_reported_as_e002():
    Channel.objects.create(name="teams", kind="msteams", config={})

    (error,) = run_check()

    assert error.id == "channels_ext.E002"
    assert error.msg == "Channel 'teams' has kind 'msteams', which no adapter handles."
    assert error.hint == f"Use one of: {', '.join(sorted(CHANNEL_KINDS))}."


def test_no_message_shows_a_secret_value():
    Channel.objects.create(
        name="ops-slack", kind="slack", config={"bot_token": SLACK_TOKEN, "channel_id": "C1", "x": 1}
    )
    Channel.objects.create(name="finance-feishu", kind="feishu", config={"app_id": FEISHU_ID_SECRET})

    errors = run_check()

    assert len(errors) == 5
    text = " ".join(f"{e.msg} {e.hint}" for e in errors)
    assert SLACK_TOKEN not in text and FEISHU_ID_SECRET not in text


def test_channels_applied_from_a_valid_config_file_pass():
    apply_config(
        """
channels:
  - {name: ops-slack, kind: slack, bot_token: xoxb-1, signing_secret: s3cr3t, channel_id: C0123456789}
  - {name: finance-feishu, kind: feishu, app_id: cli_1, app_secret: s, verification_token: v, chat_id: oc_1}
  - {name: web, kind: web}
agents: []
"""
    )

    assert Channel.objects.count() == 3
    assert run_check() == []
    call_command("check", "--database", "default", stdout=io.StringIO(), stderr=io.StringIO())


def test_the_check_runs_only_when_a_database_is_named():
    Channel.objects.create(name="ops-slack", kind="slack", config={})

    assert check_channel_configs(app_configs=None, databases=None) == []
    call_command("check", stdout=io.StringIO(), stderr=io.StringIO())  # no --database: passes


def test_migrate_runs_the_check_before_it_does_anything():
    Channel.objects.create(name="ops-slack", kind="slack", config={"bot_token": "xoxb-1", "channel_id": "C1"})

    with pytest.raises(SystemCheckError, match="Channel 'ops-slack' is missing key 'signing_secret'"):
        call_command("migrate", "--check", skip_checks=False, stdout=io.StringIO(), stderr=io.StringIO())


def test_a_database_whose_channel_table_does_not_exist_yet_is_skipped():
    """`migrate` runs checks before migrating a fresh database: the check must not fail on it."""
    Channel.objects.create(name="ops-slack", kind="slack", config={})
    table = Channel._meta.db_table
    with transaction.atomic():
        # PostgreSQL DDL is transactional: hide the table, check, and roll the rename back.
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_not_migrated"')
        assert run_check() == []
        transaction.set_rollback(True)

    assert len(run_check()) == 3


def test_a_channel_whose_vendor_sdk_is_not_installed_is_reported_as_e003(monkeypatch):
    Channel.objects.create(
        name="ops-dingtalk",
        kind="dingtalk",
        config={"client_id": "ding1", "client_secret": "s", "open_conversation_id": "cid1"},
    )
    # As on a deployment without requirements-channels.txt: `import dingtalk_stream` fails.
    monkeypatch.setitem(sys.modules, "dingtalk_stream", None)
    for module in ("channels_ext.dingtalk.adapter", "channels_ext.dingtalk.connection"):
        monkeypatch.delitem(sys.modules, module, raising=False)

    (error,) = run_check()

    assert error.id == "channels_ext.E003"
    assert error.msg == (
        "Channel 'ops-dingtalk' has kind 'dingtalk', whose adapter needs dingtalk-stream, which is not installed."
    )
    assert error.hint == "Install it: `pip install -r requirements-channels.txt` pins dingtalk-stream."


def test_a_channel_whose_vendor_sdk_is_not_installed_fails_the_check_naming_what_to_install(transactional_db):
    """In a process where python-telegram-bot cannot be imported (as on a server installed from
    requirements.txt alone), a configured Telegram channel is a check error, not a failed delivery."""
    import subprocess
    import sys

    from tests.channels_ext.test_channel_connections import ROOT, command_environment

    apply_config(
        "channels:\n  - {name: ops-telegram, kind: telegram, bot_token: '7000000001:AAFakeTelegramTokenForChecks01', "
        "chat_id: '-100123', webhook_secret: s3cret}\n"
    )
    without_the_sdk = (
        "import sys; sys.modules['telegram'] = None\n"  # importlib finds no `telegram` module
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'check', '--database', 'default'])\n"
    )

    done = subprocess.run(
        [sys.executable, "-c", without_the_sdk], cwd=ROOT, env=command_environment(), capture_output=True, text=True
    )

    assert done.returncode == 1
    assert (
        "ops-telegram (telegram): (channels_ext.E003) Channel 'ops-telegram' has kind 'telegram', whose adapter needs "
        "python-telegram-bot, which is not installed."
    ) in done.stderr
    assert "HINT: Install it: `pip install -r requirements-channels.txt` pins python-telegram-bot." in done.stderr
    assert Channel.objects.get().kind == "telegram"
    call_command("check", "--database", "default", stdout=io.StringIO())  # here, with the SDK: no problem
