"""Another language's standard JOSE library accepts our receipts: Node's ``jose`` (tests/ts,
exactly as locked), with nothing but the published JWKS, in the dozen lines docs/receipts.md shows
(tests/ts/verify-receipt.mjs). A receipt changed by one character is refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import anyio
import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Reply
from hitl_mcp.store.seal import published
from tests.conftest import ROOT, running

pytestmark = pytest.mark.anyio

TS = ROOT / "tests" / "ts"


@pytest.fixture(autouse=True)
def jose_installed() -> None:
    if shutil.which("node") is None or not (TS / "node_modules" / "jose").is_dir():
        message = "the Node verifier needs node and tests/ts/node_modules (npm ci --prefix tests/ts)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


async def test_nodes_jose_verifies_a_receipt_from_the_published_keys(tmp_path: Path, state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy v2", payload={"tag": "v2"}))
        settled = await broker.resolve(
            request.id, Reply(channel="web", responder="web inbox user", decision="approve")
        )
        jwks = {"keys": await published(broker.store)}
    token = settled.request.receipt
    assert token is not None
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    (tmp_path / "receipt.jws").write_text(token)
    args = ["node", "verify-receipt.mjs", str(tmp_path / "jwks.json"), str(tmp_path / "receipt.jws")]
    done = await anyio.run_process(args, cwd=str(TS), check=False)
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout.decode())
    assert out["claims"]["extensions"]["hitl"]["decision"] == "approved"
    assert out["claims"]["extensions"]["hitl"]["request_id"] == request.id
    head, payload, sig = token.split(".")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    (tmp_path / "receipt.jws").write_text(f"{head}.{payload}.{flipped}")
    refused = await anyio.run_process(args, cwd=str(TS), check=False)
    assert refused.returncode != 0 and "signature verification failed" in refused.stderr.decode()
