"""A Prefect flow that sleeps while a person decides: the sleeping way.

The flow asks through hitl-mcp, then suspends its run (Prefect's suspend_flow_run): its process ends
and nothing runs while the person takes their time. When they answer, on any channel, hitl-mcp's
``prefect`` channel resumes the run with the answer as its input, Prefect starts the flow again, and it
carries on with the decision. Needs a server whose config has a channel of type prefect
(docs/integrations/prefect.md), an agent token, and this flow served (or deployed to a worker):

    export HITL_AGENT_TOKEN=$(hitl-mcp agent add reports-bot --json | jq -r .token)
    python examples/prefect_sleeping.py          # serves the flow; start runs from Prefect's UI or CLI
    prefect deployment run 'publish-report/publish-report' --param quarter=2026-Q3
"""

from prefect import flow

from hitl_mcp.client import AsyncHitl
from hitl_mcp.client.prefect import asuspend_for_approval


@flow(persist_result=True, log_prints=True)
async def publish_report(quarter: str) -> str:
    async with AsyncHitl() as hitl:  # the server at $HITL_URL, with $HITL_AGENT_TOKEN
        decision = await asuspend_for_approval(
            hitl,
            f"Publish the {quarter} revenue report to the investor site",
            details="Figures reconciled by the nightly load; the PDF is final.",
            payload={"report": f"revenue-{quarter}.pdf", "site": "investors"},
            channels=["slack"],  # who is asked; the prefect channel is added to resume the run
        )
    if decision.approved:
        print(f"publishing {quarter}: approved by {decision.responder}")
        return f"published {quarter}"
    print(f"not publishing {quarter}: the request was {decision.status} ({decision.comment or 'no comment'})")
    return f"held {quarter}"


if __name__ == "__main__":
    publish_report.serve(name="publish-report")
