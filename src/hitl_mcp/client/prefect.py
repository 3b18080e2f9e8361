"""Prefect, both ways (docs/integrations/prefect.md).

**The tool way**, inside a ``@task`` (where Prefect cannot pause): ask and wait, with a key from the
flow run and the task run, so a retry of the task re-attaches to the request instead of asking twice::

    @task(retries=2)
    def which_table() -> str:
        with Hitl() as hitl:
            return hitl.ask_user("Which table?", idempotency_key=run_key("which-table")).answer

**The sleeping way**, in the flow itself, for waits longer than a process should hold: ask, then
suspend the flow run (Prefect's ``suspend_flow_run``), which releases its process. The server's
``prefect`` channel resumes the run with the outcome as its input once the request is settled; Prefect
runs the flow again from the top (a deployment's worker, or ``flow.serve()``), the ask re-attaches to
the settled request, and this returns its answer::

    @flow(persist_result=True)
    async def publish() -> str:
        async with AsyncHitl() as hitl:
            answer = await asuspend_for_answer(hitl, "Publish the report?", channels=["slack"])
        ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect.context import FlowRunContext, TaskRunContext
from prefect.flow_runs import asuspend_flow_run, suspend_flow_run
from prefect.input import RunInput

from hitl_mcp.client.aio import AsyncHitl
from hitl_mcp.client.answers import Answer
from hitl_mcp.client.sync import Hitl

__all__ = [
    "HitlRunInput",
    "asuspend_for_answer",
    "asuspend_for_approval",
    "run_key",
    "suspend_for_answer",
    "suspend_for_approval",
]


class HitlRunInput(RunInput):
    """What the ``prefect`` channel resumes a flow run with: the request's outcome (shown in Prefect's
    UI as the run's input)."""

    request_id: str
    status: str
    answer: str | None = None
    choice: str | None = None
    approved: bool | None = None
    comment: str | None = None
    responder: str | None = None
    person: str | None = None
    channel: str | None = None


def run_key(name: str) -> str:
    """An idempotency key for this ask in this run: ``prefect:<flow run id>:<task run id>:<name>`` in a
    task (the task run keeps its id across retries), ``prefect:<flow run id>:<name>`` in a flow. A
    run of its own (a new flow run) asks afresh."""
    flow = FlowRunContext.get()
    if flow is None or flow.flow_run is None:
        raise RuntimeError("run_key: call it inside a Prefect flow run or task run")
    task = TaskRunContext.get()
    middle = f"{task.task_run.id}:" if task is not None else ""
    return f"prefect:{flow.flow_run.id}:{middle}{name}"


def _flow_ask(
    name: str, channels: Sequence[str] | None, to: Sequence[str] | None, prefect_channel: str
) -> dict[str, Any]:
    """What a suspending flow's ask sends besides its words: the people or channels asked plus the
    prefect channel that resumes the run, the run's own key (a retried run re-attaches), no wait."""
    if TaskRunContext.get() is not None:
        raise RuntimeError(
            "Prefect cannot suspend a task run: inside a task, ask with hitl.ask_user(..., "
            "idempotency_key=run_key(name)) and wait there (the tool way)"
        )
    if not channels and not to:
        raise ValueError("channels or to: say who is asked (the prefect channel only resumes the run)")
    names = [*(channels or []), prefect_channel]
    return {"channels": names, "to": to, "idempotency_key": run_key(name), "wait": 0}


def _pause_key(request_id: str, n: int) -> str:
    """The Suspended state's key for this request (the channel resumes only a run suspended so)."""
    return f"hitl-mcp-{request_id}-{n}"


async def _asleep(hitl: AsyncHitl, answer: Answer) -> Answer:
    n = 0
    while not answer.settled:
        n += 1
        # the first time, this suspends the run and ends this process; on the run's next start it
        # returns at once (this key was resumed), and the request says how it ended
        await asuspend_flow_run(wait_for_input=HitlRunInput, key=_pause_key(answer.request_id, n))
        answer = await hitl.wait_for_response(answer.request_id, wait=0)
    return answer


def _sleep(hitl: Hitl, answer: Answer) -> Answer:
    n = 0
    while not answer.settled:
        n += 1
        suspend_flow_run(wait_for_input=HitlRunInput, key=_pause_key(answer.request_id, n))
        answer = hitl.wait_for_response(answer.request_id, wait=0)
    return answer


async def asuspend_for_answer(
    hitl: AsyncHitl,
    question: str,
    *,
    name: str = "ask",
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    prefect_channel: str = "prefect",
    **ask: Any,
) -> Answer:
    """Ask (``hitl.ask_user``: ``choices``, ``context``, ``timeout_seconds``...) from a flow, and
    suspend the flow run until the request is settled; its answer. ``channels``/``to``: who is asked
    (``prefect_channel``, the server's channel of type prefect, is added); ``name``: this ask's name
    within the run (another ask in the same flow needs another)."""
    flow = _flow_ask(name, channels, to, prefect_channel)
    return await _asleep(hitl, await hitl.ask_user(question, **flow, **ask))


async def asuspend_for_approval(
    hitl: AsyncHitl,
    action: str,
    *,
    name: str = "approve",
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    prefect_channel: str = "prefect",
    **ask: Any,
) -> Answer:
    """:func:`asuspend_for_answer` for an approval (``hitl.request_approval``: ``payload``, ``risk``...)."""
    flow = _flow_ask(name, channels, to, prefect_channel)
    return await _asleep(hitl, await hitl.request_approval(action, **flow, **ask))


def suspend_for_answer(
    hitl: Hitl,
    question: str,
    *,
    name: str = "ask",
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    prefect_channel: str = "prefect",
    **ask: Any,
) -> Answer:
    """:func:`asuspend_for_answer` for a flow defined with ``def``."""
    return _sleep(hitl, hitl.ask_user(question, **_flow_ask(name, channels, to, prefect_channel), **ask))


def suspend_for_approval(
    hitl: Hitl,
    action: str,
    *,
    name: str = "approve",
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    prefect_channel: str = "prefect",
    **ask: Any,
) -> Answer:
    """:func:`asuspend_for_approval` for a flow defined with ``def``."""
    return _sleep(
        hitl, hitl.request_approval(action, **_flow_ask(name, channels, to, prefect_channel), **ask)
    )
