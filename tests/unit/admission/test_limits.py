"""Output limits on a Decision: a patch over the cap is never sent, long messages and warnings are cut."""

from __future__ import annotations

from webhook.admission.handler import AdmissionDecision
from webhook.admission.limits import OutputLimits, ResponseTooLarge, bound_decision
from webhook.admission.review import allowed, denied, errored, patched
from webhook.policy import Decision

LIMITS = OutputLimits(max_patch_bytes=100, max_message_chars=50, max_warning_chars=40, max_warnings=2)


def failed(exc: Exception) -> Decision:
    assert isinstance(exc, ResponseTooLarge)
    return AdmissionDecision(errored("u", str(exc)), Decision.ERROR, ())


def test_a_patch_over_the_cap_becomes_the_failure_answer() -> None:
    d = bound_decision(AdmissionDecision(patched("u", "A" * 101), Decision.PATCHED, ()), LIMITS, failed)
    assert d.decision == "error"
    assert "101 bytes" in d.response["status"]["message"]


def test_a_patch_at_the_cap_is_kept_unchanged() -> None:
    original = AdmissionDecision(patched("u", "A" * 100), Decision.PATCHED, ())
    assert bound_decision(original, LIMITS, failed) is original


def test_a_long_denial_is_truncated_not_failed() -> None:
    d = bound_decision(AdmissionDecision(denied("u", "x" * 1000), Decision.DENIED, ()), LIMITS, failed)
    assert d.decision == "denied"
    message = d.response["status"]["message"]
    assert len(message) == 50 and message.endswith("(truncated by tollgate)")
    assert d.response["status"]["code"] == 403


def test_warnings_are_cut_and_counted() -> None:
    d = bound_decision(AdmissionDecision(allowed("u", warnings=["w" * 100, "ok", "third"]), Decision.ALLOWED, ()),
                       LIMITS, failed)
    assert d.response["warnings"][0].endswith("(truncated by tollgate)") and len(d.response["warnings"][0]) == 40
    assert d.response["warnings"][1:] == ["ok", "tollgate: 1 more warnings not shown"]
