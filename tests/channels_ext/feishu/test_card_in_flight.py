"""A decision that lands while the card is still being posted must not leave live buttons in the chat."""

from __future__ import annotations

import threading

import pytest

from approvals.models import Outbox
from tests.channels_ext.feishu.test_end_to_end import deploy, interactive_elements  # noqa: F401
from tests.support import wait_until
from tests.fakes.feishu_api import FakeFeishu

pytestmark = pytest.mark.django_db(transaction=True)


class SlowSendFeishu(FakeFeishu):
    """Holds the card send until the test releases it."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def _create_message(self, *args, **kwargs):
        self.entered.set()
        self.release.wait(10)
        return super()._create_message(*args, **kwargs)


@pytest.fixture
def fake_feishu():
    with SlowSendFeishu() as fake:
        yield fake


def test_a_cancel_while_the_card_is_being_sent_still_removes_its_buttons(deploy, fake_feishu):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()
    assert fake_feishu.entered.wait(10)  # the worker drew the pending card and is sending it

    assert feishu.agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel").status_code == 200
    assert wait_until(lambda: Outbox.objects.filter(kind="update", status="sent").exists(), what="first redraw")
    fake_feishu.release.set()

    message = feishu.posted_message()
    assert wait_until(lambda: interactive_elements(message.card) == [], what="the late card redrawn without buttons")
    assert fake_feishu.calls("PATCH", "/open-apis/im/v1/messages")
