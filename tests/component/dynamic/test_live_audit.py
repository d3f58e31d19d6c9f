"""``tollgate audit --kubeconfig``: the live objects the policies select, listed once, against the fake API server.

The CLI runs as a user runs it (a subprocess, a kubeconfig file, kubernetes_asyncio's loader); the fake serves
discovery and paginated LISTs over HTTP. Expected reports are computed from the fake's own objects in plain Python.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.component.dynamic.conftest import NO_PRIV, cap, pod
from tests.fakeapi.discovery import Served
from tests.fakeapi.server import FakeApiServer
from webhook.informer.errors import ApiStatusError
from webhook.informer.gvr import GVR
from webhook.kube.client import api_client_for_url
from webhook.kube.live import ListRequest, list_all, list_each

ROOT = Path(__file__).resolve().parents[3]
PODS = GVR("", "v1", "pods")
#: Generous bound on one CLI run, so a hang fails the test instead of stalling the suite (not a speed goal).
RUN_TIMEOUT = 120


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def kubeconfig(path: Path, fake: FakeApiServer) -> Path:
    """A kubeconfig whose current context points nowhere; context ``fake`` points at the fake API server."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}},
                     {"name": "elsewhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}},
                     {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "u"}}]}))
    return path


async def tollgate_audit(*argv: str) -> tuple[int, list[dict[str, Any]], list[str]]:
    """Run ``tollgate audit ARGV -o json``: exit status, the reports, stderr lines."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "audit", *argv, "-o", "json", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(RUN_TIMEOUT):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, json.loads(out)["items"] if out.strip() else [], err.decode().splitlines()


def rows(reports: list[dict[str, Any]]) -> set[tuple[str | None, str, str, str, str]]:
    return {(rep["metadata"].get("namespace"), r["policy"], r.get("rule", ""), r["resources"][0]["name"], r["result"])
            for rep in reports for r in rep["results"]}


def privileged(o: dict[str, Any]) -> bool:
    return any((c.get("securityContext") or {}).get("privileged") for c in o["spec"]["containers"])


async def test_live_audit_lists_each_selected_resource_once_and_notes_a_refused_one(fake: FakeApiServer,
                                                                                    tmp_path: Path) -> None:
    for i in range(7):
        fake.apply("pods", pod(f"p{i}", f"ns{i % 2}", privileged=i % 3 == 0, team="a" if i % 2 else None))
    fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1",
                                                                                  "labels": {"team": "a"}}})
    fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns0"}})
    fake.apply("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns0"}})
    fake.apply("deployments", {"apiVersion": "apps/v1", "kind": "Deployment",
                               "metadata": {"name": "d", "namespace": "ns0"}, "spec": {}})
    fake.fail("GET", "/api/v1/secrets", code=403, times=100)  # RBAC: this user may not list Secrets
    team = {"expression": "object.metadata.namespace == 'ns1'", "message": "not in team a's namespace"}
    policies = [cap("no-privileged", [NO_PRIV]),
                cap("team-a-pods", [team], match={"namespaceSelector": {"matchLabels": {"team": "a"}}}),
                cap("secrets-labelled", [{"expression": "has(object.metadata.labels)"}], resources=("secrets",)),
                cap("quiet", [{"expression": "false"}], background=False)]
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all(policies))
    config = kubeconfig(tmp_path / "kubeconfig", fake)

    status, reports, err = await tollgate_audit("-p", str(tmp_path / "policies.yaml"), "--kubeconfig", str(config),
                                                "--context", "fake")

    pods = fake.state("pods").values()
    expected = {(o["metadata"]["namespace"], "no-privileged", "validations[0]", o["metadata"]["name"],
                 "fail" if privileged(o) else "pass") for o in pods}
    expected |= {("ns1", "team-a-pods", "validations[0]", o["metadata"]["name"], "pass")
                 for o in pods if o["metadata"]["namespace"] == "ns1"}
    expected.add((None, "secrets-labelled", "", "secrets-labelled", "skip"))
    assert rows(reports) == expected
    (note,) = [r for rep in reports for r in rep["results"] if r["policy"] == "secrets-labelled"]
    assert note["message"] == "cannot list v1/secrets: 403 Forbidden: injected 403"
    assert status == 2  # input left unaudited outranks the fail results
    assert "tollgate audit: cannot list v1/secrets: 403 Forbidden: injected 403 (not audited for secrets-labelled)" \
        in err
    assert "tollgate audit: 1 of 4 policies not audited: spec.background is not true (--all audits them): quiet" \
        in err
    count = {k: sum(1 for row in expected if row[-1] == k) for k in ("pass", "fail", "warn", "error", "skip")}
    assert err[-1] == f"tollgate audit: audited 3 policies on {len(pods)} objects: " + \
        ", ".join(f"{k} {v}" for k, v in count.items())
    # Once: one LIST per resource the policies need (Namespaces for the namespaceSelector), no watch, nothing else.
    lists = sorted(q["path"] for q in fake.requests if q["verb"] == "list")
    assert lists == ["/api/v1/namespaces", "/api/v1/pods", "/api/v1/secrets"]
    assert fake.log("watch") == [] and not [q for q in fake.requests if q.get("method", "GET") != "GET"]


async def test_live_audit_reads_params_and_references_and_exits_0_when_all_pass(fake: FakeApiServer,
                                                                                 tmp_path: Path) -> None:
    example = ROOT / "policies" / "examples" / "unique-ingress-host"
    fake.discovery.builtin.append(Served("networking.k8s.io", "v1", "ingresses", "Ingress", True))
    for obj in yaml.safe_load_all((example / "existing.yaml").read_text()):
        fake.apply("ingresses", obj)
    registries = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "registries", "namespace": "default", "labels": {"tollgate.dev/params": "true"}},
                  "data": {"prefix": "registry.example.com/"}}
    fake.apply("configmaps", registries)
    fake.apply("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "unrelated", "namespace": "default"}, "data": {}})
    fake.apply("pods", pod("ok", "default"))
    param = cap("registry", [{"expression": "object.spec.containers.all(c, c.image.startsWith(params.data.prefix))"}])
    param["spec"]["paramRef"] = {"name": "registries", "namespace": "default"}
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all([param]))
    config = kubeconfig(tmp_path / "kubeconfig", fake)

    status, reports, err = await tollgate_audit("--all", "-p", str(tmp_path / "policies.yaml"),
                                                "-p", str(example / "policy.yaml"), "--kubeconfig", str(config),
                                                "--context", "fake")

    assert status == 0, err
    ingresses = {(o["metadata"]["namespace"], "unique-ingress-host", "validations[0]", o["metadata"]["name"], "pass")
                 for o in fake.state("ingresses").values()}
    assert rows(reports) == {("default", "registry", "validations[0]", "ok", "pass")} | ingresses
    lists = sorted((q["path"], q["query"].get("labelSelector", "")) for q in fake.requests if q["verb"] == "list")
    # The Ingresses are listed once though audited and read through spec.references; only params ConfigMaps.
    assert lists == [("/api/v1/configmaps", "tollgate.dev/params=true"), ("/api/v1/pods", ""),
                     ("/apis/networking.k8s.io/v1/ingresses", "")]
    assert err == ["tollgate audit: audited 2 policies on 3 objects: pass 3, fail 0, warn 0, error 0, skip 0"]


async def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path: Path, fake: FakeApiServer) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", fake)  # its current context points at a closed port
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all([cap("no-privileged", [NO_PRIV])]))
    status, reports, err = await tollgate_audit("-p", str(tmp_path / "policies.yaml"), "--kubeconfig", str(config))
    assert (status, reports) == (2, [])
    assert len(err) == 1 and err[0].startswith("tollgate audit: cannot read the cluster's discovery documents: ")


async def test_list_all_pages_and_takes_one_whole_list_when_the_continue_token_expired(fake: FakeApiServer) -> None:
    for i in range(5):
        fake.apply("pods", pod(f"p{i}", "ns", team="a") | {"metadata": {"name": f"p{i}", "namespace": "ns",
                                                                         "managedFields": [{"manager": "m"}]}})
    api = api_client_for_url(fake.url)
    try:
        got = await list_all(api, ListRequest(PODS), page_size=2)
        assert [o["metadata"]["name"] for o in got] == [f"p{i}" for i in range(5)]
        assert all("managedFields" not in o["metadata"] for o in got)  # dropped, as the informers drop them
        pages = [q["query"] for q in fake.log("list", "pods")]
        assert [(q.get("limit"), "continue" in q) for q in pages] == [("2", False), ("2", True), ("2", True)]
        fake.requests.clear()
        fake.faults.expire_continue_tokens = True
        again = await list_all(api, ListRequest(PODS), page_size=2)
        assert [o["metadata"]["name"] for o in again] == [f"p{i}" for i in range(5)]
        assert [q.get("limit") for q in (r["query"] for r in fake.log("list", "pods"))] == ["2", "2", None]
        fake.fail("GET", "/api/v1/pods", code=403)
        with pytest.raises(ApiStatusError):
            await list_all(api, ListRequest(PODS))
        fake.fail("GET", "/api/v1/pods", code=403)
        objects, refused = await list_each(api, [ListRequest(PODS), ListRequest(GVR("", "v1", "secrets"))])
        assert (list(objects), refused) == ([ListRequest(GVR("", "v1", "secrets"))],
                                            {ListRequest(PODS): "403 Forbidden: injected 403"})
    finally:
        await api.close()
