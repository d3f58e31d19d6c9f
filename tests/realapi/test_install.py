"""Installed from the shipped manifests: CRDs and policies stored as sent, status written, the Lease held."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.cluster_objects import eventually
from tests.realapi.tollgate import (
    LEASE,
    NAMESPACE,
    POLICY_RESOURCES,
    Deployment,
    crd_documents,
    missing_fields,
    shipped_policy_documents,
)


def test_missing_fields_sees_pruning_and_changes() -> None:
    assert missing_fields({"a": {"b": [1, {"c": ""}]}}, {"a": {"b": [1, {"c": ""}]}, "d": 1}) == []
    assert missing_fields({"a": {"b": 1}}, {"a": {}}) == [".a.b: pruned"]
    assert missing_fields({"a": [1, 2]}, {"a": [1]}) == [".a: sent 2 items, stored [1]"]
    assert missing_fields({"a": ""}, {"a": None}) == [".a: sent '', stored None"]


def test_crds_are_established_with_their_schema_stored(deployment: Deployment) -> None:
    for crd in crd_documents():
        stored = json.loads(deployment.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json",
                                               check=True).stdout)
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions.get("Established") == "True", conditions
        for sent_version, stored_version in zip(crd["spec"]["versions"], stored["spec"]["versions"], strict=True):
            schema = sent_version["schema"]["openAPIV3Schema"]
            # A 1.20 server drops x-kubernetes-validations (CEL rules arrived in 1.23): not counted as tested.
            problems = [p for p in missing_fields(schema, stored_version["schema"]["openAPIV3Schema"])
                        if "x-kubernetes-validations" not in p]
            assert not problems, f"{crd['metadata']['name']} {sent_version['name']}: {problems}"


def test_every_shipped_policy_is_stored_as_sent(deployment: Deployment) -> None:
    """The applied sets are stored unpruned, and so is every other policy under policies/ (server dry run)."""
    stored = {(p["kind"], p["metadata"].get("namespace"), p["metadata"]["name"]): p
              for p in deployment.live_policies()}
    problems = {}
    checked = 0
    for policy in shipped_policy_documents():
        meta = policy["metadata"]
        key = (policy["kind"], meta.get("namespace"), meta["name"])
        if key in stored:
            got = stored[key]
        else:  # in policies/ but in no set a user applies (e.g. disallow-host-ports-range): ask the server
            result = deployment.kubectl("create", "--validate=false", "--dry-run=server", "-o", "json", "-f", "-",
                                        obj=policy, check=True)
            got = json.loads(result.stdout)
        checked += 1
        if diff := missing_fields(policy["spec"], got["spec"]):
            problems[key] = diff
    assert checked >= 20, f"only {checked} policies found under policies/"
    assert not problems, problems


def _ready_condition(policy: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (policy.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)


def test_leader_writes_ready_conditions_with_observed_generation(deployment: Deployment) -> None:
    def all_ready() -> None:
        not_ready = {}
        for policy in deployment.live_policies():
            ready = _ready_condition(policy)
            if (ready is None or ready["status"] != "True"
                    or ready.get("observedGeneration") != policy["metadata"]["generation"]):
                not_ready[policy["metadata"]["name"]] = ready
        assert not not_ready, not_ready

    eventually(all_ready, timeout=30)
    assert len(deployment.live_policies()) == len([d for d in deployment.sent_policies
                                                   if d["kind"] in POLICY_RESOURCES])


def test_the_leader_holds_its_lease(deployment: Deployment) -> None:
    assert deployment.tollgate is not None

    def holder() -> dict[str, Any]:
        lease = json.loads(deployment.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "json",
                                              check=True).stdout)
        assert lease["spec"].get("holderIdentity") == deployment.tollgate.identity, lease["spec"]
        return dict(lease["spec"])

    first = eventually(holder)

    def renewed() -> None:  # held, not just taken once
        assert holder()["renewTime"] != first["renewTime"], first

    eventually(renewed, timeout=30)


def test_tollgate_says_the_api_server_is_older_than_it_supports(deployment: Deployment) -> None:
    """docs/deploying.md: Kubernetes 1.30 or newer. This server is 1.20: Tollgate must say so, not run silently."""
    assert deployment.tollgate is not None
    version = json.loads(deployment.kubectl("version", "-o", "json", check=True).stdout)["serverVersion"]
    assert version["minor"] == "20", version
    mentions = [line for line in deployment.tollgate.log_text().splitlines()
                if re.search(r"\b1\.20\b|v1\.20\.\d", line) and "version" in line.lower()]
    assert mentions, "Tollgate never mentioned the API server's version 1.20"
