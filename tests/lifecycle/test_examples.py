"""The example configs under examples/lifecycle/ are valid, and the ones that run only
local programs behave as their header comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from approvals.config_schema import load_config_file, parse_config_text
from gateway_utils.configfile import load_yaml
from hooks.registry import validate_agent_hooks
from tests.conftest import apply_config
from tests.lifecycle.conftest import LifecycleAgent

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples" / "lifecycle").glob("*.yaml"))
DOC_PAGES = sorted((ROOT / "docs" / "events").glob("*.md"))


def test_there_is_an_example_for_every_event():
    assert [p.stem for p in EXAMPLES] == sorted(
        ["session-start", "pre-turn", "pre-tool-use", "post-tool-use", "tool-error", "post-turn", "session-end"]
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_is_a_valid_config_whose_programs_exist(path):
    config = load_config_file(path, environ={})

    for agent in config.agents:
        for hook in agent.hooks:
            mcp = getattr(getattr(hook, "source", None), "mcp", None)
            argv = getattr(hook, "command", None) or getattr(mcp, "command", None) or []
            for arg in argv:
                if arg.endswith(".py"):
                    assert (ROOT / arg).is_file(), f"{path.name}: {arg} does not exist"


def yaml_blocks() -> list[tuple[str, str]]:
    """(where, text) of every ```yaml block in the docs and the README."""
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    return [
        (f"{page.relative_to(ROOT)}#{n}", block)
        for page in pages
        for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S))
    ]


def first_key(block: str) -> str:
    line = next(line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return line.strip().split(":")[0]


class AnyVariable(dict):
    """An environment in which every `${NAME}` a page uses is set, to a value of the right shape."""

    SHAPED = {
        "SLACK_APP_TOKEN": "xapp-1-A0BENCH-1-0123456789abcdef",  # an app-level token starts with xapp-
        "TELEGRAM_BOT_TOKEN": "7000000001:AAFakeTelegramTokenForTheDocs01",  # @BotFather's shape
    }

    def get(self, name, default=None):
        return self.SHAPED.get(name, f"value-of-{name}")


WHOLE_FILES = [(where, block) for where, block in yaml_blocks() if first_key(block) in ("channels", "agents")]
HOOK_LISTS = [(where, block) for where, block in yaml_blocks() if first_key(block) == "- kind"]


def test_the_docs_show_whole_config_files_and_hook_lists_and_every_event_page_has_one():
    assert len(WHOLE_FILES) >= 10 and len(HOOK_LISTS) >= 4
    pages_with_configs = {where.split("#")[0] for where, _ in WHOLE_FILES}
    assert {str(page.relative_to(ROOT)) for page in DOC_PAGES} <= pages_with_configs


@pytest.mark.parametrize("where, block", WHOLE_FILES, ids=[where for where, _ in WHOLE_FILES])
def test_every_config_file_in_the_docs_is_valid(where, block):
    config = parse_config_text(block, environ=AnyVariable())

    assert config.channels or config.agents


@pytest.mark.parametrize("where, block", HOOK_LISTS, ids=[where for where, _ in HOOK_LISTS])
def test_every_hook_list_in_the_docs_is_valid(where, block):
    hooks = validate_agent_hooks(load_yaml(block))

    assert hooks


def example_agent(live_gateway, name: str, agent: str, monkeypatch) -> LifecycleAgent:
    from tests.conftest import make_agent_client

    monkeypatch.chdir(ROOT)  # the examples name their programs relative to the repository, as `make run` does
    apply_config((ROOT / "examples" / "lifecycle" / f"{name}.yaml").read_text())
    client = make_agent_client(live_gateway, agent)
    return LifecycleAgent(live_gateway.url, client.key, client.agent)


needs_venv = pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "python").exists(), reason="the examples run .venv/bin/python"
)


@needs_venv
def test_the_session_start_example_injects_the_crm_profile_once(live_gateway, monkeypatch):
    bot = example_agent(live_gateway, "session-start", "support-bot", monkeypatch)

    first = bot.event("session-start", user_id="u-1").json()
    again = bot.event("session-start", user_id="u-1").json()

    call, result = first["messages"]
    assert call["tool_calls"][0]["function"]["name"] == "crm_get_customer_profile"
    assert result["content"].startswith("customer c-42: plan gold")
    assert again["messages"] == [] and again["side_effects"] == ["injection_not_repeated:customer-profile"]


@needs_venv
def test_the_post_tool_use_example_masks_emails_and_cuts_long_results(live_gateway, monkeypatch):
    bot = example_agent(live_gateway, "post-tool-use", "research-bot", monkeypatch)
    bot.pre_tool_use("crm__lookup", {}, tool_call_id="c1")
    bot.pre_tool_use("web__fetch", {}, tool_call_id="c2")

    masked = bot.event("post-tool-use", tool_call_id="c1", result="owner: ana@example.com").json()
    cut = bot.event("post-tool-use", tool_call_id="c2", result="y" * 9000).json()

    assert masked["result"] == "owner: [email]"
    assert cut["result"].endswith("[truncated by the gateway: showing the first 4000 of 9000 characters]")
    assert cut["side_effects"] == ["result_truncated:cut-long-results:9000"]


@needs_venv
def test_the_tool_error_example_aborts_retries_recovers_and_raises(live_gateway, monkeypatch):
    bot = example_agent(live_gateway, "tool-error", "erp-bot", monkeypatch)
    for tool, call_id in (("oa__purchase_pay", "pay"), ("erp__read_orders", "read"), ("erp__write_order", "write")):
        bot.pre_tool_use(tool, {}, tool_call_id=call_id)

    def error(call_id: str, message: str, attempt: int = 1) -> dict:
        return bot.event("tool-error", tool_call_id=call_id, error=message, attempt=attempt).json()

    declined = error("pay", "card declined")
    first_timeout = error("read", "504 gateway timeout")
    last_timeout = error("read", "504 gateway timeout", attempt=4)
    denied = error("write", "permission denied")

    assert (declined["action"], declined["reason"]) == ("abort", "the card was declined: not retrying a payment")
    assert (first_timeout["action"], first_timeout["delay_seconds"]) == ("retry", 0.5)
    assert last_timeout["action"] == "recover"
    assert last_timeout["result"] == {"stale": True, "note": "erp__read_orders is unavailable"}
    assert denied["action"] == "raise"
