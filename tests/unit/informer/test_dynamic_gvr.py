"""Resolution of admission resource rules against a discovery snapshot (webhook.informer.gvr)."""

from __future__ import annotations

from typing import Any, ClassVar

from tests.fakeapi.discovery import FakeDiscovery
from webhook.informer.gvr import (
    GVR,
    APIResource,
    DiscoverySnapshot,
    resolve_rule,
    resolve_rules,
    snapshot_from_documents,
)
from webhook.policy.model import ResourceRule


def rule(groups: list[str], versions: list[str], resources: list[str], scope: str = "*") -> ResourceRule:
    return ResourceRule(frozenset(groups), frozenset(versions), frozenset(resources), frozenset({"*"}), scope)


def snapshot() -> DiscoverySnapshot:
    watchable = frozenset({"get", "list", "watch"})
    return DiscoverySnapshot(
        versions={"": ("v1",), "apps": ("v1",), "example.com": ("v2", "v1beta1")},
        preferred={"": "v1", "apps": "v1", "example.com": "v2"},
        resources={
            ("", "v1"): (APIResource("pods", "Pod", True, watchable),
                         APIResource("namespaces", "Namespace", False, watchable),
                         APIResource("bindings", "Binding", True, frozenset({"create"}))),
            ("apps", "v1"): (APIResource("deployments", "Deployment", True, watchable),),
            ("example.com", "v2"): (APIResource("widgets", "Widget", True, watchable),),
            ("example.com", "v1beta1"): (APIResource("widgets", "Widget", True, watchable),
                                         APIResource("gadgets", "Gadget", False, watchable)),
        })


def test_exact_rule_resolves_one_gvr() -> None:
    assert resolve_rule(rule([""], ["v1"], ["pods"]), snapshot()) == {GVR("", "v1", "pods")}


def test_wildcards_expand_to_every_listable_watchable_resource_once() -> None:
    got = resolve_rules([rule(["*"], ["*"], ["*"])], snapshot())
    assert got == {GVR("", "v1", "pods"), GVR("", "v1", "namespaces"), GVR("apps", "v1", "deployments"),
                   GVR("example.com", "v2", "widgets"), GVR("example.com", "v1beta1", "gadgets")}


def test_subresource_only_rules_resolve_to_nothing_and_star_slash_star_means_top_level() -> None:
    assert resolve_rules([rule([""], ["v1"], ["pods/status", "pods/*", "*/scale"])], snapshot()) == set()
    assert GVR("", "v1", "pods") in resolve_rules([rule([""], ["v1"], ["*/*"])], snapshot())


def test_scope_filters_on_namespaced() -> None:
    assert resolve_rules([rule([""], ["v1"], ["*"], "Cluster")], snapshot()) == {GVR("", "v1", "namespaces")}
    assert resolve_rules([rule([""], ["v1"], ["*"], "Namespaced")], snapshot()) == {GVR("", "v1", "pods")}


def test_preferred_version_wins_unless_the_rule_excludes_it() -> None:
    assert resolve_rules([rule(["example.com"], ["*"], ["widgets"])], snapshot()) == \
        {GVR("example.com", "v2", "widgets")}
    assert resolve_rules([rule(["example.com"], ["v1beta1"], ["widgets"])], snapshot()) == \
        {GVR("example.com", "v1beta1", "widgets")}
    # Two rules naming two versions of one resource: one informer, the preferred version.
    both = [rule(["example.com"], ["v1beta1"], ["widgets"]), rule(["example.com"], ["v2"], ["widgets"])]
    assert resolve_rules(both, snapshot()) == {GVR("example.com", "v2", "widgets")}


def test_unknown_group_or_resource_resolves_to_nothing() -> None:
    assert resolve_rules([rule(["nope.io"], ["*"], ["*"]), rule([""], ["v1"], ["widgets"])], snapshot()) == set()


def test_snapshot_from_fake_documents_drops_subresources_and_keeps_kinds() -> None:
    class Server:
        objects: ClassVar[dict[str, Any]] = {"customresourcedefinitions": {"widgets.example.com": {"spec": {
            "group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True}, {"name": "v0", "served": False}]}}}}

    disc = FakeDiscovery(Server())  # type: ignore[arg-type]
    core, groups = disc.document("/api"), disc.document("/apis")
    assert core is not None and groups is not None
    lists = {}
    for g in [("", "v1")] + [(grp["name"], v["version"]) for grp in groups["groups"] for v in grp["versions"]]:
        doc = disc.document(f"/apis/{g[0]}/{g[1]}" if g[0] else "/api/v1")
        assert doc is not None
        lists[g] = doc
    lists[("", "v1")]["resources"].append({"name": "pods/status", "kind": "Pod", "namespaced": True, "verbs": ["get"]})
    snap = snapshot_from_documents(core, groups, lists)
    assert snap.kind(GVR("example.com", "v1", "widgets")) == "Widget"
    assert snap.resource(GVR("example.com", "v1", "widgets")) == APIResource(
        "widgets", "Widget", False, frozenset(["create", "delete", "deletecollection", "get", "list", "patch",
                                               "update", "watch"]))
    assert snap.versions["example.com"] == ("v1",)
    assert all("/" not in r.name for rs in snap.resources.values() for r in rs)
    assert disc.document("/apis/example.com/v0") is None


def test_two_rules_picking_different_versions_keep_the_one_earlier_in_discovery_order() -> None:
    watchable = frozenset({"get", "list", "watch"})
    snap = DiscoverySnapshot(
        versions={"g": ("v3", "v2", "v1")}, preferred={"g": "v2"},
        resources={("g", v): (APIResource("things", "Thing", True, watchable),) for v in ("v3", "v2", "v1")})
    # The preferred version beats any other; among the others, discovery's order decides.
    assert resolve_rules([rule(["g"], ["v1"], ["things"]), rule(["g"], ["v2"], ["things"])], snap) == \
        {GVR("g", "v2", "things")}
    assert resolve_rules([rule(["g"], ["v1"], ["things"]), rule(["g"], ["v3"], ["things"])], snap) == \
        {GVR("g", "v3", "things")}
    assert resolve_rules([rule(["g"], ["v3"], ["things"]), rule(["g"], ["v1"], ["things"])], snap) == \
        {GVR("g", "v3", "things")}
    other = DiscoverySnapshot(versions={"g": ("v1",), "h": ("v3",)}, preferred={"h": "v3"},
                              resources={("g", "v1"): (APIResource("things", "Thing", True, watchable),)})
    assert resolve_rules([rule(["g"], ["v1"], ["things"])], other) == {GVR("g", "v1", "things")}


def test_snapshot_from_raw_documents_keeps_order_preference_and_only_top_level_resources() -> None:
    from webhook.informer.gvr import group_versions

    core = {"versions": ["v1"]}
    groups = {"groups": [
        {"name": "apps", "versions": [{"version": "v1"}, {"version": "v1beta2"}],
         "preferredVersion": {"version": "v1"}},
        {"name": "x.io", "versions": [{"version": "v2"}]},  # no preferredVersion
    ]}
    lists = {
        ("", "v1"): {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["list", "watch"]},
                                   {"name": "pods/status", "kind": "Pod", "namespaced": True, "verbs": ["get"]},
                                   {"kind": "Nameless"}, "not a dict"]},
        ("apps", "v1"): {"resources": [{"name": "deployments", "kind": "Deployment", "namespaced": True}]},
    }
    snap = snapshot_from_documents(core, groups, lists)
    assert snap.versions == {"": ("v1",), "apps": ("v1", "v1beta2"), "x.io": ("v2",)}
    assert snap.preferred == {"": "v1", "apps": "v1"}
    assert snap.resources[("", "v1")] == (APIResource("pods", "Pod", True, frozenset({"list", "watch"})),)
    assert snap.resources[("apps", "v1")] == (APIResource("deployments", "Deployment", True, frozenset()),)
    assert snap.resource(GVR("", "v1", "nodes")) is None and snap.kind(GVR("", "v1", "nodes")) is None
    assert snap.kind(GVR("", "v1", "pods")) == "Pod"
    assert group_versions(core, groups) == [("", "v1"), ("apps", "v1"), ("apps", "v1beta2"), ("x.io", "v2")]
    empty = snapshot_from_documents({}, {}, {})
    assert empty.versions == {"": ()} and empty.preferred == {} and group_versions({}, {}) == []


def test_resolution_prefers_the_preferred_version_wherever_discovery_lists_it_and_takes_each_resource_once() -> None:
    watchable = frozenset({"list", "watch"})  # exactly what an informer needs
    snap = DiscoverySnapshot(
        versions={"g": ("v1beta1", "v1", "v2")}, preferred={"g": "v1"},
        resources={("g", "v1beta1"): (APIResource("bindings", "Binding", True, frozenset({"create"})),
                                      APIResource("things", "Thing", True, watchable)),
                   ("g", "v1"): (APIResource("bindings", "Binding", True, frozenset({"create"})),
                                 APIResource("things", "Thing", True, watchable)),
                   ("g", "v2"): (APIResource("things", "Thing", True, watchable),)})
    assert resolve_rule(rule(["g"], ["*"], ["*"]), snap) == {GVR("g", "v1", "things")}
    assert resolve_rules([rule(["g"], ["v2"], ["things"]), rule(["g"], ["v1"], ["things"])], snap) == \
        {GVR("g", "v1", "things")}
    assert resolve_rules([rule(["g"], ["v2"], ["things"]), rule(["g"], ["v1beta1"], ["things"])], snap) == \
        {GVR("g", "v1beta1", "things")}
    assert snap.resource(GVR("g", "v9", "things")) is None


def test_malformed_discovery_entries_are_skipped_or_empty() -> None:
    from webhook.informer.gvr import group_versions

    # A group without a name must not replace the core group (whose name is "").
    groups = {"groups": [{"versions": [{"version": "v9"}]}, {"name": "g", "versions": [{}]}]}
    lists = {("", "v1"): {"resources": [{"name": "pods"}]}}
    snap = snapshot_from_documents({"versions": ["v1"]}, groups, lists)
    assert snap.versions == {"": ("v1",), "g": ("",)}
    assert snap.resources[("", "v1")] == (APIResource("pods", "", False, frozenset()),)
    assert group_versions({}, groups) == [("g", "")]
