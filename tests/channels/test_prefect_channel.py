"""The prefect channel's refusals, each one line: a config without a usable API URL, and a request
that did not come from a Prefect flow run (its delivery fails for good, and says why). The channel
at work against a real Prefect server: tests/client/test_prefect.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.channels.prefect import Config, PrefectChannel
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.models import Kind
from tests.support.harness import channel_broker, sent_row

pytestmark = pytest.mark.anyio


def test_the_api_url_must_be_prefects() -> None:
    with pytest.raises(ConfigError, match="expected Prefect's API URL"):
        parse_config("channels:\n  prefect: {type: prefect, api_url: '127.0.0.1:4200'}\n", source="hitl.yaml")
    good = (
        "channels:\n  web: {type: web}\n  prefect: {type: prefect, api_url: 'http://127.0.0.1:4200/api/'}\n"
    )
    config = parse_config(good, source="hitl.yaml")
    assert config.channels["prefect"].api_url == "http://127.0.0.1:4200/api"


async def test_a_request_not_from_a_flow_run_is_not_delivered(tmp_path: Path) -> None:
    config = Config(api_url="http://127.0.0.1:9/api")
    async with channel_broker(tmp_path, lambda hub: PrefectChannel("prefect", config, hub)) as broker:
        spec = AskSpec(kind=Kind.QUESTION, text="Which table?", channels=["prefect"], idempotency_key="run-7")
        request, _ = await broker.ask(spec)
        row = await sent_row(broker, request.id, "prefect")
    assert row.status == "failed"
    assert row.error is not None and row.error.startswith("not asked from a Prefect flow run")
