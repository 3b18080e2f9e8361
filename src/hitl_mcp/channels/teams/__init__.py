"""Microsoft Teams: requests as Adaptive Cards posted by a bot (the Teams SDK), answered by their
``Action.Execute`` buttons, each press a Bot Framework activity whose token is verified, the card
replaced in place by the outcome; or, with no bot, notify-only cards through a Workflows webhook.
See docs/channels/teams.md."""

from hitl_mcp.channels.teams.channel import TeamsChannel
from hitl_mcp.channels.teams.config import Config

Channel = TeamsChannel

__all__ = ["Channel", "Config", "TeamsChannel"]
