"""Prefect: resumes a suspended flow run once its request is settled, with the outcome as the flow
run's input. Nobody answers here: the channel sits beside the ones a person answers (docs/integrations/
prefect.md).

A flow asks through ``hitl_mcp.client.prefect`` (``asuspend_for_answer`` and friends), which names
this channel beside the people's and gives the request an idempotency key that names the flow run
(``prefect:<flow run id>:...``), then suspends the flow run (Prefect's ``suspend_flow_run``),
releasing its process. When the request is settled (answered on any channel, expired, cancelled), the
outbox's retraction for this channel calls Prefect's API: ``POST /flow_runs/<id>/resume`` with the
outcome as ``run_input``; Prefect schedules the run again, and the flow reads the answer. The outbox
retries while Prefect cannot be reached. It speaks Prefect's REST API with httpx2 (a dependency of the
server already): the server needs no Prefect library.
"""

from hitl_mcp.channels.prefect.channel import PrefectChannel
from hitl_mcp.channels.prefect.config import Config

#: the name the channel loader looks for
Channel = PrefectChannel

__all__ = ["Channel", "Config", "PrefectChannel"]
