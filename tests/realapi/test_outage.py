"""The API server stopped, etcd compacted, the API server started again, while Tollgate serves.

One scenario (a module fixture) records what happened; each test asserts one property of the record:

1. a policy is edited, so the informers have something to catch up on;
2. kube-apiserver is stopped by PID (SIGTERM, SIGKILL after :data:`GRACE_SECONDS`: a 1.20 server keeps
   watches open through its graceful shutdown) and stays away :data:`DOWN_SECONDS` (long enough for
   Tollgate's backoff to grow);
   meanwhile Tollgate is asked directly (it answers from its caches) and its /readyz is sampled;
3. etcd's revision is moved on and compacted (``etcdctl compact``): every resourceVersion Tollgate holds
   is now gone, so resuming its watches and paginated lists answers 410 Gone / Expired;
4. kube-apiserver starts again (same flags, same etcd); a policy is edited again right away, and
   requests through the API server are decided until one follows the edit;
5. Tollgate's requests to the restarted server are read from the audit log.

Marked ``disruptive``: the suite runs it after the other tests (only the ``session_audit`` checks come later).
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.cluster_objects import eventually
from tests.realapi.helpers import compliant_pod, new_namespace, pod_review, privileged, unique
from tests.realapi.test_policies import assert_denied_with, denied_with, dry_run_configmap, forbidden_key
from tests.realapi.tollgate import SA_USER, Deployment

pytestmark = [pytest.mark.disruptive, pytest.mark.timeout(240)]
DOWN_SECONDS = 15.0
GRACE_SECONDS = 3.0
#: How long Tollgate's requests to the restarted server are watched for a loop, after it recovered.
STEADY_SECONDS = 10.0


@dataclass
class Outage:
    """What the scenario saw. Times are ``time.time()`` seconds."""

    stop_seconds: float = 0.0  # SIGTERM until the process was gone
    stopped: float = 0.0  # the process was gone
    start_seconds: float = 0.0  # from exec to /readyz
    restarted: float = 0.0  # kube-apiserver's /readyz answered again
    recovered: float = 0.0  # a request through the API server was decided by the post-restart edit
    ended: float = 0.0
    compacted_at: int = 0
    log_offset: int = 0  # Tollgate's log before the outage
    readyz_down: list[tuple[float, int]] = field(default_factory=list)  # (seconds since stop, status)
    readyz_after: list[tuple[float, int]] = field(default_factory=list)  # (time, status) after the restart
    direct_answers: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    requests_after: list[dict[str, Any]] = field(default_factory=list)  # Tollgate's, from the audit log


def audit_time(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def resumed(outage: Outage, resource: str) -> float | None:
    """When Tollgate's first LIST or WATCH of ``resource`` succeeded on the restarted server (audit log)."""
    return min((audit_time(e) for e in outage.requests_after if e["verb"] in ("list", "watch")
                and resource_of(e) == resource and e.get("responseStatus", {}).get("code") == 200
                and audit_time(e) >= outage.stopped), default=None)


def resource_of(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    return "/".join(x for x in (ref.get("resource", ""), ref.get("subresource", "")) if x)


@pytest.fixture(scope="module")
def outage(deployment: Deployment, report: Callable[[str], None]) -> Outage:
    tollgate = deployment.tollgate
    cluster = deployment.cluster
    assert tollgate is not None
    namespace = new_namespace(deployment, "outage")
    name = unique("outage")
    deployment.add_policy(name, forbidden_key("before", "realapi: before", namespace))
    eventually(lambda: assert_denied_with(dry_run_configmap(deployment, namespace, {"before": "1"}), "before"))

    record = Outage(log_offset=len(tollgate.log_text()))
    pod = compliant_pod(namespace, unique("direct"))
    began = time.time()
    cluster.stop_apiserver(grace=GRACE_SECONDS)
    record.stopped = time.time()
    record.stop_seconds = record.stopped - began
    while time.time() - record.stopped < DOWN_SECONDS:
        record.readyz_down.append((time.time() - record.stopped, tollgate.readyz()[0]))
        if len(record.direct_answers) < 2:
            for label, obj in (("compliant", pod), ("privileged", privileged(pod))):
                status, answer = tollgate.review(pod_review(obj))
                record.direct_answers.append((label, status, answer))
        time.sleep(0.5)
    for i in range(50):  # move etcd on, outside the API server's keys, then compact it
        cluster.etcdctl("put", f"/realapi-outage/{i}", "x")
    record.compacted_at = cluster.compact()

    began = time.time()
    cluster.start_apiserver()
    record.restarted = time.time()
    record.start_seconds = record.restarted - began
    edit = forbidden_key("after", "realapi: after", namespace)["validations"]
    deployment.kubectl("patch", "clusteradmissionpolicy", name, "--type=merge",
                       "-p", json.dumps({"spec": {"validations": edit}}), check=True)
    while True:
        record.readyz_after.append((time.time(), tollgate.readyz()[0]))
        if denied_with(dry_run_configmap(deployment, namespace, {"after": "1"}), "realapi: after"):
            record.recovered = time.time()
            break
        assert time.time() - record.restarted < 150, "Tollgate never caught up with the restarted API server"
        time.sleep(0.2)
    time.sleep(STEADY_SECONDS)
    record.ended = time.time()
    record.requests_after = [e for e in cluster.audit_events()
                             if e["user"]["username"] == SA_USER and audit_time(e) >= record.restarted - 5]

    first = {}
    for event in record.requests_after:
        first.setdefault(resource_of(event), audit_time(event))
    report(f"outage: kube-apiserver stopped in {record.stop_seconds:.1f} s, gone {DOWN_SECONDS:.0f} s, started in "
           f"{record.start_seconds:.1f} s; etcd compacted at revision "
           f"{record.compacted_at}; a policy edit made once it was back reached decisions after "
           f"{record.recovered - record.restarted:.1f} s")
    report("outage: Tollgate's first request per resource after the restart, seconds after /readyz: "
           + ", ".join(f"{r} {t - record.restarted:+.1f}" for r, t in sorted(first.items(), key=lambda x: x[1])))
    counts = Counter((e["verb"], resource_of(e), e.get("responseStatus", {}).get("code")) for e in
                     record.requests_after if e["stage"] == "ResponseComplete")
    report("outage: Tollgate's requests to the restarted server (verb resource code: n): "
           + ", ".join(f"{v} {r} {c}: {n}" for (v, r, c), n in sorted(counts.items(), key=str)))
    report("outage: /readyz while the API server was down: "
           + ", ".join(f"{s}" for _, s in record.readyz_down[::4]) + " (every 2 s)")
    return record


def test_tollgate_answers_from_its_caches_while_the_api_server_is_down(outage: Outage) -> None:
    answers = {label: (status, answer["response"]) for label, status, answer in outage.direct_answers}
    assert answers["compliant"][0] == 200 and answers["compliant"][1]["allowed"] is True, answers["compliant"]
    status, response = answers["privileged"]
    assert status == 200 and response["allowed"] is False, answers["privileged"]
    assert "disallow-privileged-containers: privileged containers are not allowed" in response["status"]["message"]


INFORMED = ("namespaces", "configmaps", "clusteradmissionpolicies", "admissionpolicies")


def test_tollgate_relists_after_the_compaction_and_catches_up(outage: Outage) -> None:
    """Every informer lists or watches the restarted server again; those whose resourceVersion was compacted
    away (410) list again; a policy edit made after the restart reaches decisions."""
    assert {r: resumed(outage, r) is not None for r in INFORMED} == dict.fromkeys(INFORMED, True)
    relisted = {resource_of(e) for e in outage.requests_after
                if e["verb"] == "list" and e["stage"] == "ResponseComplete" and e["responseStatus"]["code"] == 200}
    assert relisted & set(INFORMED), relisted
    assert outage.recovered > outage.restarted


def test_tollgate_does_not_loop_against_the_restarted_server(outage: Outage) -> None:
    """Per resource and verb, a handful of requests after the restart: a relist, a re-watch, a retry or two.
    A loop (relisting on every 410, re-watching a closed stream at once) shows as dozens."""
    counts = Counter((e["verb"], resource_of(e)) for e in outage.requests_after
                     if e["stage"] == "ResponseComplete" and e["verb"] in ("list", "watch"))
    assert counts, "no request of Tollgate's in the audit log after the restart"
    assert max(counts.values()) <= 5, counts


def test_readyz_does_not_say_ready_while_the_caches_are_cut_off(outage: Outage) -> None:
    """Once the API server has been gone longer than ``--ready-max-staleness`` (5 s in this suite), /readyz
    stops saying ready; once it is back, /readyz says ready no earlier than every informer lists or watches it
    again."""
    late = [status for since, status in outage.readyz_down if since > 12 - GRACE_SECONDS]
    assert late and 200 not in late, outage.readyz_down
    back = [resumed(outage, r) for r in INFORMED]
    assert None not in back, dict(zip(INFORMED, back, strict=True))
    caught_up = max(t for t in back if t is not None)
    early = [round(t - outage.restarted, 1) for t, status in outage.readyz_after if status == 200 and t < caught_up]
    assert not early, f"ready {early} s after the API server returned, before every informer was back on it"


def test_the_outage_is_logged_without_tracebacks(deployment: Deployment, outage: Outage) -> None:
    assert deployment.tollgate is not None
    during = deployment.tollgate.log_text()[outage.log_offset:]
    lines = during.splitlines()
    assert lines, "Tollgate logged nothing about the outage"
    assert not [line for line in lines if "Traceback" in line], [line[:300] for line in lines if "Traceback" in line]
