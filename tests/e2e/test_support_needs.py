"""The markers by what a test needs (tests/support/needs.py): the scan marks every test by what its
code reaches, so ``-m "not process"`` leaves it out, and the guard fails a test that starts something
it is not marked for, so the markers cannot rot as tests are added."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
pytest_plugins = ["tests.support.needs", "tests.support.postgres"]
"""

SCANNED = '''
import anyio
import pytest

from tests.conftest import cli as hitl, server_process
from tests.support.replicas import replica_set
from tests.web.test_inbox_browser import browser  # a fixture, for the test below


def pure(x):
    return x + 1


class Host:
    """A helper class: one method of it starts a server."""

    def name(self):
        return "h"

    async def start(self):
        async with server_process(["-m", "hitl_mcp"], {}):
            pass


async def through_a_module_attribute():
    await anyio.run_process(["true"])


def npm_command():
    return ["npm", "ci"]


@pytest.fixture
def own_fixture():
    return through_a_module_attribute


def test_pure():
    assert pure(1) == 2


async def test_cli_under_an_alias(tmp_path):
    await hitl(tmp_path, "check")


async def test_a_class_that_starts_a_server():
    await Host().start()


async def test_a_nested_function():
    async def inner():
        await through_a_module_attribute()

    await inner()


def test_a_fixture_that_starts_one(own_fixture):
    pass


def test_a_database(postgres_url):
    pass


def test_node():
    assert npm_command()


async def test_replicas(tmp_path):
    async with replica_set(tmp_path, tmp_path):
        pass


def test_a_browser(browser):
    pass


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_one_case_marked(engine):
    pass
'''

NEEDS = ("process", "browser", "postgres", "replicas", "node")


def test_the_scan_marks_each_test_by_what_its_code_reaches(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_scanned=SCANNED)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    marks = {item.name: {n for n in NEEDS if item.get_closest_marker(n)} for item in items}
    assert marks == {
        "test_pure": set(),
        "test_cli_under_an_alias": {"process"},
        "test_a_class_that_starts_a_server": {"process"},
        "test_a_nested_function": {"process"},
        "test_a_fixture_that_starts_one": {"process"},
        "test_a_database": {"postgres"},
        "test_node": {"node"},
        "test_replicas": {"process", "replicas"},
        "test_a_browser": {"browser"},
        "test_one_case_marked[sqlite]": set(),
        "test_one_case_marked[postgres]": {"postgres"},
    }


HIDDEN = """
import subprocess
import sys


def spawn():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""

GUARDED_CONFTEST = """
import pytest

import hidden

pytest_plugins = ["tests.support.needs"]


@pytest.fixture(scope="module")
def shared():
    hidden.spawn()
"""

GUARDED = """
import pytest

import hidden


def test_hidden_spawn():
    hidden.spawn()


@pytest.mark.process
def test_marked_spawn():
    hidden.spawn()


def test_first_user_of_a_shared_fixture(shared):
    pass


def test_second_user_of_a_shared_fixture(shared):
    pass


def test_fixture_requested_by_name(request):
    request.getfixturevalue("shared")


def test_nothing_started():
    pass
"""


# the inner tests start a process where the scan cannot see it (a module outside tests/), and the
# guard of this test sees them start it: marked by hand, as the guard's message says
@pytest.mark.process
def test_the_guard_fails_a_test_that_starts_what_it_is_not_marked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(hidden=HIDDEN)
    pytester.makeconftest(GUARDED_CONFTEST)
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rf")
    outcomes = {
        report.head_line: report.outcome
        for report in result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
        if report.when == "call"
    }
    assert outcomes == {
        "test_hidden_spawn": "failed",
        "test_marked_spawn": "passed",
        "test_first_user_of_a_shared_fixture": "failed",
        "test_second_user_of_a_shared_fixture": "failed",
        "test_fixture_requested_by_name": "failed",
        "test_nothing_started": "passed",
    }
    result.stdout.fnmatch_lines(
        ["*test_hidden_spawn started what it is not marked for (process)*mark the test (pytest.mark.process*"]
    )
