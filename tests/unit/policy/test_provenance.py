"""A policy object carrying an import problem is not Ready wherever it is compiled, and answers per failurePolicy."""

from __future__ import annotations

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating
from webhook.policy.provenance import (
    IMPORT_ERROR_ANNOTATION,
    IMPORTED_FROM_ANNOTATION,
    import_error,
    imported_from,
    imported_name,
)


def marked(message: str, **spec: object) -> dict[str, object]:
    obj = policy("ValidatingPolicy/x", **spec)
    obj["metadata"]["annotations"] = {IMPORT_ERROR_ANNOTATION: message, IMPORTED_FROM_ANNOTATION: "ValidatingPolicy x"}
    return obj


def test_the_problem_is_the_ready_condition() -> None:
    result = compile_policy(marked("ValidatingPolicy x: spec.evaluation.mode: JSON"))
    assert result.policy is None
    assert result.condition == {"type": "Ready", "status": "False", "reason": "ImportError",
                                "message": "ValidatingPolicy x: spec.evaluation.mode: JSON", "observedGeneration": 1}


def test_what_it_selects_is_answered_per_its_failure_policy() -> None:
    broken = compile_policy(marked("it cannot be honoured")).matchable
    assert broken is not None
    (result,) = evaluate_validating(request(pod()), [broken], InMemoryLookups()).results
    assert str(result.result) == "error" and result.message == "policy is not ready: it cannot be honoured"


def test_names_and_annotations_read_back() -> None:
    obj = marked("p")
    assert import_error(obj) == "p" and imported_from(obj) == "ValidatingPolicy x"
    assert import_error(policy()) is None and imported_from({"metadata": []}) is None
    assert imported_name("ValidatingAdmissionPolicy", "a", "b") == "ValidatingAdmissionPolicy/a/b"
    assert imported_name("ValidatingPolicy", "a") == "ValidatingPolicy/a"


def test_names_are_injective_and_readable() -> None:
    # Policy a with binding b/c and policy a/b with binding c (names only a file can hold) are two policies.
    assert imported_name("ValidatingAdmissionPolicy", "a", "b/c") == "ValidatingAdmissionPolicy/a/b%2Fc"
    assert imported_name("ValidatingAdmissionPolicy", "a/b", "c") == "ValidatingAdmissionPolicy/a%2Fb/c"
    assert imported_name("ValidatingPolicy", "a%2Fb") != imported_name("ValidatingPolicy", "a/b")
    assert imported_name("ValidatingPolicy", "a%2Fb") == "ValidatingPolicy/a%252Fb"
    assert imported_name("ValidatingAdmissionPolicy", "a.b-c", "d") == "ValidatingAdmissionPolicy/a.b-c/d"
