"""The stand-ins as pytest fixtures, for every suite (registered in ``tests/conftest.py``).

- ``slack_standin``: a served :class:`~tests.support.slack.SlackStandin` and its API base URL;
- ``twilio_standin``: a served :class:`~tests.support.twilio.TwilioStandIn` (``.url``) for
  ``ACCOUNT_SID``/``AUTH_TOKEN``/``NUMBER``;
- ``certs``, ``imap``, ``folder``, ``smtp``: a test CA, one pymap per test module, a folder of its own
  for each test in it, and an aiosmtpd for each test (see :mod:`tests.support.mail`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.conftest import free_port
from tests.support.mail import Certs, ImapServer, SmtpServer, smtp_server
from tests.support.slack import SlackStandin
from tests.support.slack import serving as serving_slack
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, NUMBER, TwilioStandIn
from tests.support.twilio import serving as serving_twilio


@pytest.fixture
async def slack_standin() -> AsyncIterator[tuple[SlackStandin, str]]:
    async with serving_slack() as pair:
        yield pair


@pytest.fixture
async def twilio_standin() -> AsyncIterator[TwilioStandIn]:
    standin = TwilioStandIn(ACCOUNT_SID, AUTH_TOKEN, NUMBER)
    async with serving_twilio(standin):
        yield standin


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs.make(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def imap(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImapServer]:
    server = ImapServer(certs, free_port(), tmp_path_factory.mktemp("pymap"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def folder(imap: ImapServer) -> str:
    """A folder of its own for each test, in the shared pymap."""
    name = f"t{uuid.uuid4().hex[:10]}"
    imap.create_folder(name)
    return name


@pytest.fixture
async def smtp(certs: Certs) -> AsyncIterator[SmtpServer]:
    async with smtp_server(certs) as server:
        yield server
