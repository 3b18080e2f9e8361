"""The Agent Framework checkpoint sample's shape, with the reviewer reached through hitl-mcp.

A writer drafts release notes; a reviewer gateway requests approval for the draft. The program asks
the reviewer through hitl-mcp and waits. If it is stopped meanwhile, the checkpoint (in
FileCheckpointStorage) holds the pending request; run it again and it restarts from the checkpoint,
the request is emitted again, and hitl-mcp answers it at once if the reviewer decided in between: the
request's id is the idempotency key, so the reviewer is asked once. Needs a running server and an
agent token:

    export HITL_AGENT_TOKEN=$(hitl-mcp agent add notes-workflow --json | jq -r .token)
    python examples/agent_framework_checkpoint.py checkpoints/
"""

import asyncio
import sys
from dataclasses import dataclass

from agent_framework import (
    Executor,
    FileCheckpointStorage,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowEvent,
    handler,
    response_handler,
)

from hitl_mcp.client import AsyncHitl
from hitl_mcp.client.agent_framework import approval_key


@dataclass
class Draft:
    text: str


@dataclass
class ReviewRequest:
    draft: str


class Writer(Executor):
    @handler
    async def write(self, release: str, ctx: WorkflowContext[Draft]) -> None:
        await ctx.send_message(Draft(f"Release {release}: faster sync, fewer retries."))


class ReviewerGateway(Executor):
    @handler
    async def review(self, draft: Draft, ctx: WorkflowContext) -> None:
        await ctx.request_info(ReviewRequest(draft.text), bool)

    @response_handler
    async def decided(self, request: ReviewRequest, approved: bool, ctx: WorkflowContext[None, str]) -> None:
        await ctx.yield_output(f"{'published' if approved else 'sent back'}: {request.draft}")


async def main(folder: str) -> None:
    storage = FileCheckpointStorage(
        folder, allowed_checkpoint_types=[f"{__name__}:Draft", f"{__name__}:ReviewRequest"]
    )
    writer, gateway = Writer(id="writer"), ReviewerGateway(id="reviewer")
    workflow = (
        WorkflowBuilder(name="release-notes", start_executor=writer, checkpoint_storage=storage)
        .add_edge(writer, gateway)
        .build()
    )
    latest = await storage.get_latest(workflow_name="release-notes")
    if latest is None:
        print("starting the workflow")
        events = workflow.run("v3", stream=True)
    else:
        print(f"restarting from checkpoint {latest.checkpoint_id}")
        events = workflow.run(checkpoint_id=latest.checkpoint_id, stream=True)
    pending: list[WorkflowEvent] = [event async for event in events if event.type == "request_info"]

    answers: dict[str, bool] = {}
    async with AsyncHitl() as hitl:  # the server at $HITL_URL, with $HITL_AGENT_TOKEN
        for event in pending:
            print(f"awaiting the reviewer on request {event.request_id}")
            answer = await hitl.request_approval(
                "Publish these release notes",
                details=event.data.draft,
                payload={"draft": event.data.draft},
                idempotency_key=approval_key(event.request_id),  # the checkpoint's request id
            )
            answers[event.request_id] = answer.approved is True
    if answers:
        result = await workflow.run(responses=answers)
        for output in result.get_outputs():
            print(output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "checkpoints"))
