"""``serve --local``: a file that stops parsing keeps its last good objects and is reported, as an API server
refuses a bad write; a CEL-broken policy is answered per its failurePolicy."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.component.server.conftest import serve_tls, until
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

POLICY = """apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: {failure_policy}
  match:
    resourceRules: [{{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE]}}]
  validations:
  - expression: "{expression}"
    message: no privileged containers
"""
PRIVILEGED = "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))"


def review(privileged: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "x"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [container]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
                        "name": "p", "operation": "CREATE", "userInfo": {"username": "a"}, "object": pod}}


@contextlib.asynccontextmanager
async def local_server(tmp_path: Path, policies: Path) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """``serve --local policies`` on a real TLS listener (files polled every 50 ms): its URL and a client."""
    paths = certs.write_certs(tmp_path / "certs", dns_names=["localhost"], days=1)
    app = create_app(Settings(local_dir=policies, local_poll_interval=0.05, cert_file=paths.cert,
                              key_file=paths.key, write_status=False, eval_workers=0))
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            yield f"https://localhost:{port}", session
    finally:
        await runner.cleanup()


async def test_a_file_that_stops_parsing_keeps_serving_its_last_good_objects_and_is_reported(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                   expression=PRIVILEGED))
    async with local_server(tmp_path, policies) as (url, session):
        async def readyz() -> dict[str, Any] | None:
            async with session.get(url + "/readyz") as resp:
                return await resp.json() if resp.status == 200 else None  # type: ignore[no-any-return]

        async def allowed(privileged: bool) -> bool:
            async with session.post(url + "/validate", json=review(privileged)) as resp:
                return (await resp.json())["response"]["allowed"] is True  # type: ignore[no-any-return]

        await until(readyz)
        assert not await allowed(True)
        (policies / "p.yaml").write_text("spec: [unclosed\n")
        body = await until(lambda: _with_errors(readyz))
        assert list(body["localFileErrors"]) == [str(policies / "p.yaml")]
        assert "invalid YAML" in body["localFileErrors"][str(policies / "p.yaml")]
        assert body["policies"] == {"no-privileged": {"ready": True, "reason": "Compiled"}}
        assert not await allowed(True)  # the last good policy still decides
        async with session.get(url + "/metrics") as resp:
            assert "tollgate_local_file_errors 1.0" in await resp.text()

        # A policy whose CEL does not compile is answered per its failurePolicy (Fail: denied).
        (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                       expression="objekt.spec == 1"))

        async def broken_denies() -> bool:
            async with session.post(url + "/validate", json=review(False)) as resp:
                answer = (await resp.json())["response"]
            return answer["allowed"] is False and "policy is not ready" in answer["status"]["message"]

        await until(broken_denies)
        await until(lambda: _without_errors(readyz))  # every source (one per kind) lists the file again


async def _with_errors(readyz: Any) -> dict[str, Any] | None:
    body = await readyz()
    return body if body and body.get("localFileErrors") else None


async def _without_errors(readyz: Any) -> bool:
    body = await readyz()
    return body is not None and body.get("localFileErrors") == {}


async def test_references_are_served_from_the_directory_and_follow_its_files(tmp_path: Path) -> None:
    # The directory is the cluster: the Ingresses under it are the cache unique-ingress-host reads.
    import shutil

    import yaml

    from tests.component.server.test_references import INGRESSES, ingress
    from tests.component.server.test_references import review as review_of

    example = Path(__file__).resolve().parents[3] / "policies" / "examples" / "unique-ingress-host"
    policies = tmp_path / "policies"
    policies.mkdir()
    shutil.copy(example / "policy.yaml", policies / "policy.yaml")
    shutil.copy(example / "existing.yaml", policies / "existing.yaml")
    async with local_server(tmp_path, policies) as (url, session):
        async def decide(obj: dict[str, Any]) -> dict[str, Any]:
            async with session.post(url + "/validate", json=review_of(obj, "networking.k8s.io", "ingresses")) \
                    as resp:
                return (await resp.json())["response"]  # type: ignore[no-any-return]

        async def synced() -> bool:
            async with session.get(url + "/readyz") as resp:
                body = await resp.json()
            return body.get("references") == {"networking.k8s.io/v1/ingresses": "synced"}

        await until(synced)
        answer = await decide(INGRESSES["shop-copy"])
        assert answer["allowed"] is False
        assert answer["status"]["message"] == ("unique-ingress-host: host shop.example.com is already used by "
                                               "another Ingress")
        assert (await decide(INGRESSES["blog"]))["allowed"] is True
        # A file added under the directory is a new object in the cache.
        (policies / "blog.yaml").write_text(yaml.safe_dump(ingress("blog", "marketing", "blog.example.com")))
        rival = ingress("blog", "platform", "blog.example.com")

        async def taken() -> bool:
            return (await decide(rival))["allowed"] is False

        await until(taken)


async def test_the_decision_memo_serves_repeated_passes_and_never_a_verdict_of_an_edited_policy(
        tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                   expression=PRIVILEGED))
    async with local_server(tmp_path, policies) as (url, session):
        async def allowed(privileged: bool) -> bool | None:
            async with session.post(url + "/validate", json=review(privileged)) as resp:
                return (await resp.json())["response"]["allowed"] if resp.status == 200 else None  # type: ignore[no-any-return]

        async def memo_hits() -> float:
            async with session.get(url + "/metrics") as resp:
                text = await resp.text()
            return next(float(line.split()[1]) for line in text.splitlines()
                        if line.startswith("tollgate_decision_memo_hits_total "))

        async def hit() -> bool:
            before = await memo_hits()
            return await allowed(False) is True and await memo_hits() > before

        await until(lambda: allowed(False))
        # The plan's fused program is compiled in the background; once it is, a pass is remembered and served.
        await until(hit)
        assert await allowed(True) is False
        # Edited so that the same compliant Pod is denied: the remembered pass is not the new policy's.
        (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                       expression="object.spec.containers.all(c, c.image != 'x')"))

        async def denied() -> bool:
            return await allowed(False) is False

        await until(denied)
        for _ in range(5):
            assert await allowed(False) is False


async def test_a_clean_directory_starts_without_informer_warnings(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    # A directory has no watch cache: the Reflectors list it and never try WatchList (nor warn that the
    # "server" ignored it), as on a server that is known not to support it.
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                   expression=PRIVILEGED))
    caplog.set_level(logging.INFO, logger="tollgate")
    async with local_server(tmp_path, policies) as (url, session):
        async def ready() -> bool:
            async with session.get(url + "/readyz") as resp:
                return resp.status == 200

        await until(ready)
        async with session.post(url + "/validate", json=review(True)) as resp:
            assert (await resp.json())["response"]["allowed"] is False
    informer_warnings = [r.getMessage() for r in caplog.records
                         if r.name.startswith("tollgate.informer") and r.levelno >= logging.WARNING]
    assert informer_warnings == []


#: A "billion laughs" (9 levels of 9 aliases: 387 million nodes expanded) in 600 bytes.
BOMB = "kind: ConfigMap\ndata:\n  x0: &x0 [" + ", ".join(["lol"] * 9) + "]\n" + "".join(
    f"  x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 10))


@pytest.mark.parametrize("replacement", ["", "# emptied by an editor\n", BOMB], ids=["empty", "comments", "bomb"])
async def test_a_file_emptied_or_replaced_by_a_bomb_keeps_enforcing_its_policy_until_deleted(
        tmp_path: Path, replacement: str) -> None:
    # A writer that truncates the file and dies (or a bomb) must never open the gate: the last good policy
    # decides for as long as the file stays so; deleting the file is the one way to remove it.
    policies = tmp_path / "policies"
    policies.mkdir()
    path = policies / "p.yaml"
    path.write_text(POLICY.format(name="no-privileged", failure_policy="Fail", expression=PRIVILEGED))
    async with local_server(tmp_path, policies) as (url, session):
        async def readyz() -> dict[str, Any] | None:
            async with session.get(url + "/readyz") as resp:
                return await resp.json() if resp.status == 200 else None  # type: ignore[no-any-return]

        async def allowed(privileged: bool) -> bool:
            async with session.post(url + "/validate", json=review(privileged)) as resp:
                return (await resp.json())["response"]["allowed"] is True  # type: ignore[no-any-return]

        await until(readyz)
        assert not await allowed(True)
        path.write_text(replacement)
        body = await until(lambda: _with_errors(readyz))  # the change is confirmed (settled) and reported
        message = body["localFileErrors"][str(path)]
        assert ("excessive aliasing" if replacement == BOMB else "holds no documents") in message
        assert body["policies"] == {"no-privileged": {"ready": True, "reason": "Compiled"}}
        assert not await allowed(True)  # the last good policy still decides
        path.unlink()

        async def admitted() -> bool:
            return await allowed(True)

        await until(admitted)
        await until(lambda: _without_errors(readyz))


async def test_exceptions_are_read_from_the_directory(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                   expression=PRIVILEGED))
    async with local_server(tmp_path, policies) as (url, session):
        async def admitted() -> bool:
            async with session.post(url + "/validate", json=review(True)) as resp:
                return resp.status == 200 and bool((await resp.json())["response"]["allowed"])

        async def denied() -> bool:
            async with session.post(url + "/validate", json=review(True)) as resp:
                return resp.status == 200 and (await resp.json())["response"]["allowed"] is False

        await until(denied)
        # A PolicyException without a namespace is in default, as kubectl apply puts it.
        (policies / "exception.yaml").write_text(
            "apiVersion: tollgate.dev/v1alpha1\nkind: PolicyException\nmetadata: {name: debug}\n"
            "spec: {policies: [{name: no-privileged}], reason: OPS-1}\n")
        await until(admitted)
