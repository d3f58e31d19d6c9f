"""Indexer contract (client-go thread_safe_store semantics), no sockets."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.informer.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    IndexConflictError,
    Indexer,
    drop_managed_fields,
    meta_namespace_key,
)


def obj(name: str, ns: str | None = "default", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def by_app(o: dict[str, Any]) -> list[str]:
    app = o["metadata"]["labels"].get("app")
    return [app] if app else []


def test_keys_follow_meta_namespace_key_func() -> None:
    assert meta_namespace_key(obj("a", "ns1")) == "ns1/a"
    assert meta_namespace_key(obj("node-1", None)) == "node-1"
    assert meta_namespace_key(DeletedFinalStateUnknown("ns1/a", obj("a", "ns1"))) == "ns1/a"


def test_upsert_get_delete_and_namespace_index() -> None:
    idx = Indexer()
    assert idx.upsert(obj("a", "x")) is None
    idx.upsert(obj("b", "x"))
    idx.upsert(obj("c", "y"))
    assert idx.get_by_key("x/a") == obj("a", "x")
    assert sorted(o["metadata"]["name"] for o in idx.by_index(NAMESPACE_INDEX, "x")) == ["a", "b"]
    assert idx.index_keys(NAMESPACE_INDEX, "y") == frozenset({"y/c"})
    assert idx.delete("y/c") == obj("c", "y")
    assert idx.index_values(NAMESPACE_INDEX) == ["x"]  # the emptied set is dropped
    assert idx.delete("y/c") is None


def test_update_moves_index_values_and_drops_empty_sets() -> None:
    idx = Indexer({"app": by_app})
    idx.upsert(obj("a", app="web"))
    idx.upsert(obj("a", app="api"))
    assert idx.index_keys("app", "web") == frozenset()
    assert idx.index_values("app") == ["api"]


def test_failing_index_function_leaves_the_store_untouched() -> None:
    idx = Indexer({"app": lambda o: [o["metadata"]["labels"]["app"]]})
    idx.upsert(obj("a", app="web"))
    with pytest.raises(KeyError):
        idx.upsert(obj("a"))  # no app label: the index function raises before anything changes
    assert idx.get_by_key("default/a") == obj("a", app="web")
    assert idx.index_keys("app", "web") == frozenset({"default/a"})


def test_replace_swaps_items_and_indices() -> None:
    idx = Indexer({"app": by_app})
    idx.upsert(obj("old", app="web"))
    idx.replace([obj("n1", app="api"), obj("n2", "other", app="api")])
    assert sorted(idx.list_keys()) == ["default/n1", "other/n2"]
    assert idx.index_keys("app", "web") == frozenset()
    assert idx.index_keys("app", "api") == frozenset({"default/n1", "other/n2"})


def test_add_indexers_reindexes_and_rejects_conflicts() -> None:
    idx = Indexer()
    idx.upsert(obj("a", app="web"))
    idx.add_indexers({"app": by_app})
    assert idx.index_keys("app", "web") == frozenset({"default/a"})
    with pytest.raises(IndexConflictError):
        idx.add_indexers({NAMESPACE_INDEX: by_app})


def test_unknown_index_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        Indexer().by_index("nope", "x")


def test_transform_drops_managed_fields_without_touching_the_input() -> None:
    raw = {"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}, "data": {"k": "v"}}
    out = drop_managed_fields(raw)
    assert out == {"metadata": {"name": "a"}, "data": {"k": "v"}}
    assert "managedFields" in raw["metadata"]
