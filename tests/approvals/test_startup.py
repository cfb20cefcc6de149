"""GATEWAY_CONFIG is applied when a server process starts; a bad file stops it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from approvals.models import Agent, Channel
from gateway.startup import apply_startup_config

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_config_file_is_applied_at_start_up(settings, tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text("channels: [{name: web, kind: web}]\nagents: [{name: boot-bot}]\n")
    settings.GATEWAY_CONFIG = str(path)

    apply_startup_config()
    apply_startup_config()  # a second process starting changes nothing

    assert Channel.objects.get().name == "web"
    assert Agent.objects.get().config_versions.count() == 1


def test_a_bad_config_file_stops_the_process_with_its_problems(settings, tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text("channels: [{name: web, kind: carrier-pigeon}]\n")
    settings.GATEWAY_CONFIG = str(path)

    with pytest.raises(ImproperlyConfigured, match=r"channels\[0\]\.kind"):
        apply_startup_config()
    assert not Channel.objects.exists()
