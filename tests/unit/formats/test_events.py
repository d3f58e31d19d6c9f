"""Source notifications in, imported-policy notifications out: every change passed on once, in order."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tests.unit.policy.imports_helpers import kyverno_vpol, vap, vap_binding
from webhook.formats.catalog import import_policies
from webhook.formats.events import ImportEventHandler
from webhook.policy import PolicyEventHandler, PolicyIndex
from webhook.policy.provenance import import_error

KEY = "ValidatingAdmissionPolicy/need-team/need-team-all"


@dataclass
class Recorder:
    seen: list[tuple[str, str, bool]] = field(default_factory=list)

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        self.seen.append(("add", obj["metadata"]["name"], import_error(obj) is None))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen.append(("update", new["metadata"]["name"], import_error(new) is None))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.seen.append(("delete", obj["metadata"]["name"], import_error(obj) is None))


@dataclass
class Tombstone:
    key: str
    obj: Any


def handler() -> tuple[ImportEventHandler, Recorder]:
    recorder = Recorder()
    return ImportEventHandler([recorder]), recorder


def test_a_policy_then_its_binding_is_one_add() -> None:
    h, r = handler()
    h.on_add(vap(), True)
    assert r.seen == []  # a policy without a binding selects nothing
    h.on_add(vap_binding(), True)
    assert r.seen == [("add", KEY, True)]
    assert [o["metadata"]["name"] for o in h.objects()] == [KEY]


def test_a_binding_before_its_policy_is_corrected_when_the_policy_comes() -> None:
    h, r = handler()
    h.on_add(vap_binding(), True)
    h.on_add(vap(), True)
    assert r.seen == [("add", KEY, False), ("update", KEY, True)]


def test_a_policy_change_reaches_every_binding_and_nothing_else() -> None:
    h, r = handler()
    for obj in (vap(), vap_binding("a"), vap_binding("b"), vap("other"), vap_binding("c", policy="other")):
        h.on_add(obj, True)
    r.seen.clear()
    changed = vap(failurePolicy="Ignore")
    h.on_update(vap(), changed)
    assert sorted(r.seen) == [("update", "ValidatingAdmissionPolicy/need-team/a", True),
                              ("update", "ValidatingAdmissionPolicy/need-team/b", True)]
    r.seen.clear()
    h.on_update(changed, copy.deepcopy(changed))  # a resync, or a status write: nothing changed
    assert r.seen == []


def test_deleting_the_policy_leaves_its_binding_without_one() -> None:
    h, r = handler()
    h.on_add(vap(), True)
    h.on_add(vap_binding(), True)
    h.on_delete(Tombstone("need-team", vap()))  # a missed deletion arrives as a tombstone
    assert r.seen[-1] == ("update", KEY, False)
    h.on_delete(vap_binding())
    assert r.seen[-1] == ("delete", KEY, False) and h.objects() == []


def test_a_binding_naming_another_policy_withdraws_the_old_one() -> None:
    h, r = handler()
    for obj in (vap(), vap("other"), vap_binding()):
        h.on_add(obj, True)
    r.seen.clear()
    h.on_update(vap_binding(), vap_binding(policy="other"))
    assert r.seen == [("delete", KEY, True), ("add", "ValidatingAdmissionPolicy/other/need-team-all", True)]


def test_kyverno_policies_come_and_go() -> None:
    h, r = handler()
    h.on_add(kyverno_vpol(), False)
    h.on_update(kyverno_vpol(), kyverno_vpol(validationActions=["Audit"]))
    h.on_delete(kyverno_vpol())
    assert r.seen == [("add", "ValidatingPolicy/check-team", True), ("update", "ValidatingPolicy/check-team", True),
                      ("delete", "ValidatingPolicy/check-team", True)]


def test_other_kinds_are_ignored() -> None:
    h, r = handler()
    h.on_add({"apiVersion": "envoy.kyverno.io/v1alpha1", "kind": "ValidatingPolicy", "metadata": {"name": "x"},
              "spec": {}}, True)
    h.on_add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, True)
    h.on_delete("not an object")
    assert r.seen == [] and len(h.catalog) == 0


def test_the_index_recompiles_when_only_the_import_problem_changes() -> None:
    index = PolicyIndex()
    h = ImportEventHandler([PolicyEventHandler(index)])
    h.on_add(vap(paramKind={"apiVersion": "v1", "kind": "Secret"}), True)
    h.on_add(vap_binding(paramRef={"name": "x", "parameterNotFoundAction": "Deny"}), True)
    state = index.state(KEY)
    assert state is not None and "v1 Secret" in state.result.condition["message"]
    # The spec is the same (no paramRef either way); only the problem differs: still recompiled.
    h.on_update(vap(), vap(paramKind={"apiVersion": "apps/v1", "kind": "Deployment"}))
    state = index.state(KEY)
    assert state is not None and "apps/v1 Deployment" in state.result.condition["message"]


def test_unnamed_objects_are_problems_in_a_set() -> None:
    unnamed = vap()
    del unnamed["metadata"]["name"]
    result = import_policies([unnamed])
    assert [str(p) for p in result.problems] == ["ValidatingAdmissionPolicy <unnamed>: metadata.name: required"]


def test_names_that_would_collide_are_two_policies() -> None:
    # Policy a with binding b/c and policy a/b with binding c (a file can name them so): both served, apart.
    h, r = handler()
    index = PolicyIndex()
    h.add_handler(PolicyEventHandler(index))
    for obj in (vap("a"), vap_binding("b/c", policy="a"), vap("a/b"), vap_binding("c", policy="a/b")):
        h.on_add(obj, True)
    keys = ["ValidatingAdmissionPolicy/a%2Fb/c", "ValidatingAdmissionPolicy/a/b%2Fc"]
    assert sorted(r.seen) == [("add", key, True) for key in keys]
    assert len(h.objects()) == 2
    for key in keys:  # both filed and Ready in the index the request path reads
        state = index.state(key)
        assert state is not None and state.ready


def test_a_typo_keeps_the_last_good_version_and_is_reported() -> None:
    index = PolicyIndex()
    h = ImportEventHandler([PolicyEventHandler(index)])
    r = Recorder()
    h.add_handler(r)
    h.on_add(vap(), True)
    h.on_add(vap_binding(), True)
    good = h.objects()
    for typo_policy, typo_binding in ((vap(), vap_binding(matchResources="x")),
                                      (dict(vap(), spec=[]), vap_binding()),
                                      (vap(), vap_binding(matchResources={"namespaceSelector": {"matchExpressions": [
                                          {"key": "env", "operator": "Notin", "values": ["dev"]}]}}))):
        r.seen.clear()
        h.on_update(vap(), typo_policy)
        h.on_update(vap_binding(), typo_binding)
        assert r.seen == [] and h.objects() == good and h.kept == {KEY}  # nothing passed on: the last good serves
        (current,) = h.imported()
        assert current.match_unreadable and current.problems
        state = index.state(KEY)
        assert state is not None and state.ready
        h.on_update(typo_policy, vap())
        h.on_update(typo_binding, vap_binding())
        assert h.kept == set() and r.seen == [] and not h.imported()[0].problems


def test_a_typo_with_no_good_version_before_is_served_as_is() -> None:
    h, r = handler()
    h.on_add(vap(), True)
    h.on_add(vap_binding(matchResources="x"), True)
    assert r.seen == [("add", KEY, False)] and h.kept == set()


def test_a_deleted_policy_is_not_kept_and_a_typo_after_it_is_served() -> None:
    h, r = handler()
    h.on_add(vap(), True)
    h.on_add(vap_binding(), True)
    h.on_delete(vap())
    h.on_add(dict(vap(), spec=[]), False)
    assert r.seen[-1] == ("update", KEY, False) and h.kept == set()


def test_a_kyverno_policy_with_a_typo_keeps_its_last_good_version() -> None:
    h, r = handler()
    h.on_add(kyverno_vpol(), False)
    good = h.objects()
    h.on_update(kyverno_vpol(), kyverno_vpol(matchConstraints={"resourceRules": "pods"}))
    assert h.objects() == good and h.kept == {"ValidatingPolicy/check-team"} and len(r.seen) == 1
