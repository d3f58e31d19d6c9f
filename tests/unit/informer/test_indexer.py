"""Indexer contract (client-go thread_safe_store semantics), no sockets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.informer.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    IndexConflictError,
    Indexer,
    decode,
    drop_managed_fields,
    encode,
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


def _page() -> list[dict[str, Any]]:
    """A LIST page the compact fast path takes, with the cases it must treat as the general loop does."""
    managed = [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]
    return [
        {"metadata": {"name": "a", "namespace": "x", "managedFields": managed, "labels": {"k": "v"}}, "data": {"d": 1}},
        {"metadata": {"name": "b", "namespace": "x"}, "data": {}},
        {"metadata": {"name": "c", "namespace": "y", "managedFields": None}},
        {"metadata": {"name": "a", "namespace": "x", "resourceVersion": "2", "managedFields": []}},  # a repeated key
        {"metadata": {"name": "node-1", "managedFields": managed}},  # cluster-scoped
        {"metadata": {"namespace": "z"}},  # no name
        {"kind": "NoMetadata"},
        {"metadata": {"name": 5, "namespace": "x"}},  # not strings: formatted as the general loop does
        {"metadata": {"name": "n", "namespace": 7}},
        {"metadata": {"name": "d", "namespace": "x"}},
        {"metadata": {"name": 6, "namespace": "q"}},  # a new namespace whose name is not a string ...
        {"metadata": {"name": "e", "namespace": "x"}},  # ... leaves the run of x as it was
    ]


def test_compact_list_page_stores_what_the_general_loop_stores_and_leaves_the_input_whole() -> None:
    page = _page()
    received = copy.deepcopy(page)
    fast = Indexer(compact=True).new_buffer(drop_managed_fields)
    fast.add_page(page)

    def same_transform(o: dict[str, Any]) -> dict[str, Any]:  # not drop_managed_fields itself: the general loop
        return drop_managed_fields(o)

    general = Indexer(compact=True).new_buffer(same_transform)
    general.add_page(copy.deepcopy(received))
    assert fast.items == general.items
    assert fast.indices == general.indices == {"namespace": {
        "x": {"x/a": None, "x/b": None, "x/5": None, "x/d": None, "x/e": None}, "y": {"y/c": None},
        "z": {"z/": None}, 7: {"7/n": None}, "q": {"q/6": None}}}
    assert decode(fast.items["x/a"]) == {"metadata": {"name": "a", "namespace": "x", "resourceVersion": "2"}}
    assert all("managedFields" not in decode(v).get("metadata", {}) for v in fast.items.values())
    assert page == received  # managedFields put back into what the ListerWatcher returned


def test_compact_list_page_puts_managed_fields_back_when_encoding_fails() -> None:
    page = [{"metadata": {"name": "a", "namespace": "x", "managedFields": [{"m": 1}]}, "bad": {1, 2}}]
    with pytest.raises(TypeError):
        Indexer(compact=True).new_buffer(drop_managed_fields).add_page(page)
    assert page[0]["metadata"]["managedFields"] == [{"m": 1}]


def test_compact_stored_forms_take_their_size_not_the_encoders_buffer() -> None:
    import tracemalloc

    objs = [{"metadata": {"name": f"cm-{i}", "namespace": "x"}, "data": {"p": "x" * 500}} for i in range(300)]
    size = len(encode(objs[0]))
    kept: list[bytes] = []
    adders = {"add_page": lambda b: b.add_page(objs), "add": lambda b: [b.add(o) for o in objs],
              "encode": lambda _: kept.extend(encode(o) for o in objs)}
    for name, add in adders.items():
        buffer = Indexer(compact=True).new_buffer(drop_managed_fields)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            add(buffer)
            per_object = (tracemalloc.get_traced_memory()[0] - before) / len(objs)
        finally:
            tracemalloc.stop()
        # orjson's own buffer is 4 KiB or more per object; the key, its index entry and bytes header ~200 B.
        assert per_object < size + 400, (name, per_object)


def test_index_key_sets_are_not_walked_by_the_garbage_collector() -> None:
    import gc

    buffer = Indexer(compact=True).new_buffer(drop_managed_fields)
    buffer.add_page(_page())
    general = Indexer({"app": by_app}).new_buffer()
    general.add_page([obj("a", app="web"), obj("b", "other", app="web")])
    idx = Indexer({"app": by_app})
    idx.replace_with(general)
    idx.upsert(obj("c", app="api"))
    idx.add_indexers({"ns2": lambda o: [o["metadata"].get("namespace") or ""]})
    for indices in (buffer.indices, general.indices, idx._indices):
        key_sets = [keys for index in indices.values() for keys in index.values()]
        assert key_sets and not any(gc.is_tracked(keys) for keys in key_sets)
