"""One yes/no/choice vocabulary for every text channel: SMS and email replies read the same words."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hitl_mcp.channels._replies import APPROVE_WORDS, DENY_WORDS, choice_by_number, decision_of
from hitl_mcp.channels.email.replies import Unreadable, read_answer
from hitl_mcp.channels.twilio_sms import _parse
from hitl_mcp.core.models import Kind, Request


def _request(kind: Kind, choices: list[str] | None = None, free: bool = True) -> Request:
    return Request(
        id="0123456789abcdef",
        kind=kind,
        text="Deploy?",
        choices=choices,
        allow_free_text=free,
        created_at=0.0,
    )


def by_sms(text: str) -> str | None:
    reply = _parse(_request(Kind.APPROVAL), text.split(), "sms", "+15550001111")
    return reply.decision if reply is not None else None


def by_mail(text: str) -> str | None:
    try:
        return read_answer(text, approval=True).decision
    except Unreadable:
        return None


TEXT_CHANNELS: list[Callable[[str], str | None]] = [by_sms, by_mail]


def test_the_vocabulary() -> None:
    assert APPROVE_WORDS == {"yes", "y", "approve", "approved", "ok", "okay"}
    assert DENY_WORDS == {"no", "n", "deny", "denied", "reject", "rejected"}
    assert not APPROVE_WORDS & DENY_WORDS


@pytest.mark.parametrize("read", TEXT_CHANNELS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("word", sorted(APPROVE_WORDS | DENY_WORDS))
def test_every_text_channel_reads_every_word_alike(read: Callable[[str], str | None], word: str) -> None:
    expected = "approve" if word in APPROVE_WORDS else "deny"
    assert decision_of(word) == expected
    for said in (word, word.upper(), word.capitalize() + "!", f"{word} looks fine to me"):
        assert read(said) == expected, said


@pytest.mark.parametrize("read", TEXT_CHANNELS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("said", ["maybe", "yesterday", "nope", "okey dokey", "approves"])
def test_other_words_decide_nothing(read: Callable[[str], str | None], said: str) -> None:
    assert read(said) is None


def test_choice_by_number() -> None:
    assert choice_by_number("2", ["a", "b"]) == "b"
    assert choice_by_number(" 1 ", ["a", "b"]) == "a"
    assert choice_by_number("3", ["a", "b"]) is None
    assert choice_by_number("0", ["a", "b"]) is None
    assert choice_by_number("x", ["a", "b"]) is None
    assert choice_by_number("1", None) is None
    question = _request(Kind.QUESTION, ["staging", "prod"], free=False)
    sms = _parse(question, ["2"], "sms", "+15550001111")
    assert sms is not None and sms.choice == "prod"
    assert read_answer("2", approval=False, choices=["staging", "prod"]).choice == "prod"
