"""How long an edit to an imported policy holds ``/healthz``, beside a Tollgate policy of the same size (issue #29).

    python bench/import_edits.py [--sizes 32,64,160] [--reps 3] [--seconds 4]

Serves ``policies/examples/vap-required-labels`` (a ValidatingAdmissionPolicy, its ``prod`` binding, the
params ConfigMap, the Namespaces) with ``serve --local`` in this process (``webhook.server.listener``, no
evaluation workers), once as the imported kinds (``import``) and once as the ClusterAdmissionPolicy they
convert to (``native``). After the sync (and 2.5 s more, past the start-up heap freeze), the policy is
rewritten with N validations and ``/healthz`` is requested back to back (5 ms apart) for ``--seconds``:
reported, per N and kind, the worst ``/healthz`` round trip of each repetition. The goal is a ratio:
an imported policy's edit stalls no more than a native one's (and neither more than ~50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from webhook.formats.catalog import import_policies
from webhook.server.app import COMPONENTS, create_app
from webhook.server.listener import start_listener
from webhook.server.settings import Settings
from webhook.tls import generate as certs

EXAMPLE = Path(__file__).resolve().parents[1] / "policies" / "examples" / "vap-required-labels"


def validations(n: int) -> list[dict[str, str]]:
    return [{"expression": f"object.metadata.name != 'x{i}' && size(variables.missing) >= 0",
             "messageExpression": f"'m{i}' + object.metadata.name"} for i in range(n)]


async def worst_healthz(n: int, *, native: bool, seconds: float) -> float:
    """Seconds: the slowest ``/healthz`` while an edit to ``n`` validations is served."""
    tmp = Path(tempfile.mkdtemp(prefix="import-edits-"))
    try:
        served = tmp / "policies"
        served.mkdir()
        for name in ("configmap.yaml", "namespaces.yaml"):
            shutil.copy(EXAMPLE / name, served / name)
        docs: list[dict[str, Any]] = list(yaml.safe_load_all((EXAMPLE / "admission-policy.yaml").read_text()))[:2]
        if native:
            obj = import_policies(docs).policies[0].obj
            docs = [{**obj, "metadata": {"name": "native"}}]
        (served / "policy.yaml").write_text(yaml.safe_dump_all(docs))
        paths = certs.write_certs(tmp / "certs", dns_names=["localhost"], days=1)
        app = create_app(Settings(local_dir=served, local_poll_interval=0.05, write_status=False, eval_workers=0,
                                  cert_file=paths.cert, key_file=paths.key))
        listener = await start_listener(app, dataclasses.replace(app[COMPONENTS].settings, host="127.0.0.1", port=0))
        worst = 0.0
        try:
            ctx = ssl.create_default_context(cafile=str(paths.ca))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
                url = f"https://localhost:{listener.site.port}"
                while True:
                    async with session.get(url + "/readyz") as resp:
                        if resp.status == 200:
                            break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(2.5)  # past freeze_heap_when_synced (1 s after the sync)
                docs[0]["spec"]["validations"] = validations(n)
                (served / "policy.yaml").write_text(yaml.safe_dump_all(docs))
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    started = time.perf_counter()
                    async with session.get(url + "/healthz") as resp:
                        await resp.read()
                    worst = max(worst, time.perf_counter() - started)
                    await asyncio.sleep(0.005)
        finally:
            await listener.runner.cleanup()
        return worst
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="32,64,160")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    print("validations  kind    worst /healthz per repetition (ms)")
    for n in (int(s) for s in args.sizes.split(",")):
        for native in (False, True):
            worst = [await worst_healthz(n, native=native, seconds=args.seconds) for _ in range(args.reps)]
            print(f"{n:>11}  {'native' if native else 'import':<6}  {', '.join(f'{w * 1000:.0f}' for w in worst)}",
                  flush=True)


if __name__ == "__main__":
    asyncio.run(main())
