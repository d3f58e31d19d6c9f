"""The messages between the server and an evaluation worker carry a decision whole, and only Lookups calls."""

from __future__ import annotations

import pickle

import pytest

from webhook.admission.handler import AdmissionDecision
from webhook.admission.isolation.messages import Done, LookupCall, UnknownLookup
from webhook.admission.review import denied
from webhook.policy import Action, Decision, PolicyResult, Result
from webhook.policy.lookups import InMemoryLookups


def test_a_decision_crosses_the_boundary_with_every_field_of_its_results() -> None:
    results = (PolicyResult("needs-team", Result.FAIL, "a team label is required", frozenset({Action.DENY}),
                            code=422, reason="Invalid"),
               PolicyResult("team-a/warn", Result.ERROR, "no such key", frozenset({Action.WARN, Action.IGNORED})))
    decision = AdmissionDecision(denied("uid-1", "needs-team: a team label is required", code=422, reason="Invalid"),
                                 Decision.DENIED, results)
    carried = pickle.loads(pickle.dumps(Done.of(decision, retire=True), protocol=5))
    assert carried.retire is True
    assert carried.admission_decision() == decision


def test_a_lookup_call_runs_on_the_servers_lookups_and_nothing_else() -> None:
    lookups = InMemoryLookups(namespaces=[{"metadata": {"name": "default", "labels": {"team": "a"}}}])
    assert LookupCall.of("get_namespace", "default").apply(lookups)["metadata"]["labels"] == {"team": "a"}
    with pytest.raises(UnknownLookup):
        LookupCall.of("__init__").apply(lookups)
