from importlib import import_module
from importlib.util import find_spec

from django.apps import AppConfig
from django.core import checks

from gateway_contract import CHANNEL_KINDS


class ChannelsExtConfig(AppConfig):
    name = "channels_ext"
    verbose_name = "Chat channels"

    def ready(self) -> None:
        # Reads Channel rows, so it is imported once the apps (and their models) are ready.
        from channels_ext.checks import check_channel_configs

        # Tags.database: runs under `migrate` and `check --database default`, on a migrated database only.
        checks.register(check_channel_configs, checks.Tags.database)

        # Celery's autodiscovery imports `channels_ext.tasks` only; a worker must also know each
        # channel package's own tasks (e.g. slack's response_url notes) before it starts consuming.
        for package in sorted({kind.adapter.rsplit(".", 2)[0] for kind in CHANNEL_KINDS.values()}):
            if find_spec(f"{package}.tasks") is not None:
                import_module(f"{package}.tasks")
