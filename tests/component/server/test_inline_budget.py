"""A review estimated too costly for the event loop goes to a worker; cheap ones stay inline and keep answering.

cel-cpp cannot be interrupted and holds the GIL, so a tenant's quadratic expression on a 3 KB annotation would
hold the loop for over a second if evaluated inline. The server estimates each review's work first
(webhook.policy.budget) and hands the costly one to the worker pool.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import aiohttp

from tests.component.server.isolated import big_pod_review, isolated_server, shipped_documents
from tests.component.server.test_isolation import timed
from webhook.policy.budget import INLINE_WORK_BUDGET

SPLIT_TWICE = ("!has(object.metadata.annotations) || !has(object.metadata.annotations.x) || "
               "object.metadata.annotations.x.split('').all(a, object.metadata.annotations.x.split('').size() > 0)")
TENANT = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "AdmissionPolicy",
          "metadata": {"name": "split-twice", "namespace": "default"},
          "spec": {"match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                "operations": ["CREATE"]}]},
                   "validations": [{"expression": SPLIT_TWICE}]}}


def _annotated(uid: str, length: int) -> dict[str, Any]:
    review = copy.deepcopy(big_pod_review(1, uid=uid))
    review["request"]["object"]["metadata"]["annotations"] = {"x": "y" * length}
    return review


def _over_budget(metrics: Any) -> float:
    return metrics.registry.get_sample_value("tollgate_evaluation_over_budget_total", {"endpoint": "validate"}) or 0.0


async def test_a_costly_small_review_goes_to_a_worker_and_cheap_ones_stay_inline(tmp_path: Path) -> None:
    async with isolated_server(tmp_path, documents=[*shipped_documents(), TENANT], isolate_above_bytes=32 * 1024,
                               inline_work_budget=INLINE_WORK_BUDGET) as s, aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=s.client_ssl, limit=0)) as session:
        # A small annotation: cheap, inline (nothing handed over).
        _, status, body = await timed(session, "POST", s.url + "/validate", json=_annotated("small", 20))
        assert status == 200 and body["response"]["allowed"], body
        assert _over_budget(s.metrics) == 0
        costly = asyncio.ensure_future(
            timed(session, "POST", s.url + "/validate?timeout=25s", json=_annotated("costly", 3000)))
        for _ in range(500):  # until a worker holds it
            if s.pool._idle.qsize() < 2:
                break
            await asyncio.sleep(0.01)
        assert _over_budget(s.metrics) == 1, "the costly review was not handed to a worker"
        cheap = [await timed(session, "POST", s.url + "/validate", json=big_pod_review(1, uid=f"cheap-{i}"))
                 for i in range(3)]
        assert not costly.done(), "the costly review finished before the cheap ones: nothing was shown"
        assert [(status, b["response"]["allowed"]) for _, status, b in cheap] == [(200, True)] * 3
        _, status, body = await costly
        assert status == 200 and body["response"]["uid"] == "costly"
        assert _over_budget(s.metrics) == 1
