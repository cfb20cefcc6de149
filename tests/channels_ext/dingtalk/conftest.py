"""The fakes DingTalk tests talk to (tests/fakes/dingtalk_api.py)."""

from tests.fakes.dingtalk_api import fake_dingtalk  # noqa: F401 - a fixture
