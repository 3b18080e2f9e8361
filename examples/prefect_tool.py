"""A Prefect flow whose task asks a person and gets the answer back as the task's result: the tool way.

Inside a task, where Prefect cannot pause, the task asks through hitl-mcp and waits. The idempotency
key comes from the flow run and the task run, so a retry of the task re-attaches to the same request
and the person is asked once. Needs a running server and an agent token:

    hitl-mcp serve --transport http &
    export HITL_AGENT_TOKEN=$(hitl-mcp agent add etl-bot --json | jq -r .token)
    python examples/prefect_tool.py
"""

from prefect import flow, task

from hitl_mcp.client import Hitl
from hitl_mcp.client.prefect import run_key


@task(retries=2, retry_delay_seconds=10)
def choose_table(candidates: list[str]) -> str:
    with Hitl() as hitl:  # the server at $HITL_URL (default http://127.0.0.1:8765), $HITL_AGENT_TOKEN
        answer = hitl.ask_user(
            "Two tables hold the 2026 orders. Which one should the nightly load read?",
            choices=candidates,
            context="orders has 1.2M rows and stops on 2026-11-30; orders_v2 has 1.3M and is current.",
            idempotency_key=run_key("which-table"),
            wait=3600,  # at most an hour in this attempt; a retry waits on the same request
        )
    if answer.status != "answered":
        raise RuntimeError(f"no table chosen: the request is {answer.status}")
    return str(answer.answer)


@flow(log_prints=True)
def nightly_load() -> str:
    table = choose_table(["orders", "orders_v2"])
    print(f"loading from {table}")
    return table


if __name__ == "__main__":
    nightly_load()
