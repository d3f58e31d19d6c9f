"""The README's curl walkthrough holds: its sample review, posted to ``serve --local policies/``, gets the
answers the README shows (the validating response whole, the mutating patch decoded)."""

from __future__ import annotations

import base64
import json
import re
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from tests.component.server.conftest import serve_tls, until
from webhook.cli.serve import SAMPLE_REVIEW
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

ROOT = Path(__file__).resolve().parents[3]


def readme_blocks() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The README's documented /validate answer and /mutate patch (the json blocks after their sentences)."""
    text = (ROOT / "README.md").read_text()
    blocks = []
    for anchor in ("The answer (real output", "The same body posted to `/mutate`"):
        at = text.index(anchor)
        m = re.compile(r"```json\n(.*?)```", re.DOTALL).search(text, at)
        assert m is not None, anchor
        blocks.append(json.loads(m.group(1)))
    return blocks[0], blocks[1]


async def test_the_readme_walkthrough_answers_are_the_servers(tmp_path: Path) -> None:
    answer, patch = readme_blocks()
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    app = create_app(Settings(local_dir=ROOT / "policies", cert_file=paths.cert, key_file=paths.key,
                              write_status=False, eval_workers=0))
    runner, port = await serve_tls(app)
    url = f"https://localhost:{port}"
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            async def ready() -> bool:
                async with session.get(url + "/readyz") as resp:
                    return resp.status == 200

            await until(ready)
            async with session.post(url + "/validate", json=SAMPLE_REVIEW) as resp:
                assert await resp.json() == answer
            async with session.post(url + "/mutate", json=SAMPLE_REVIEW) as resp:
                response = (await resp.json())["response"]
            assert response["patchType"] == "JSONPatch"
            assert json.loads(base64.b64decode(response["patch"])) == patch
    finally:
        await runner.cleanup()
