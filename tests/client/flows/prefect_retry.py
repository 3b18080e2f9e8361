"""A task that asks, fails its first attempt (as a task does when its worker dies or its deadline
passes), and is retried by Prefect: the retry re-attaches to the same request."""

from prefect import flow, task
from prefect.context import TaskRunContext

from hitl_mcp.client import Hitl
from hitl_mcp.client.prefect import run_key


@task(retries=1, retry_delay_seconds=0)
def choose_region() -> str:
    context = TaskRunContext.get()
    first = context is not None and context.task_run.run_count <= 1
    with Hitl() as hitl:
        answer = hitl.ask_user(
            "Which region should the backfill run in?",
            choices=["eu-west", "us-east"],
            idempotency_key=run_key("region"),
            wait=0 if first else None,
        )
    if answer.status != "answered":
        raise RuntimeError("no answer yet")
    return str(answer.answer)


@flow(log_prints=True)
def backfill() -> str:
    region = choose_region()
    print(f"backfilling in {region}")
    return region


if __name__ == "__main__":
    backfill()
