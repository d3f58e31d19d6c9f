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
    ListBuffer,
    decode,
    drop_managed_fields,
    encode,
    meta_namespace_key,
    namespace_index,
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
        {"metadata": {"name": "m", "namespace": "8"}},
        {"metadata": {"name": "m", "namespace": 8}},  # the same key, kept flat: it moves out of 8's dict ...
        {"metadata": {"name": "o", "namespace": "8"}},  # ... which was dropped, emptied: found again
        {"metadata": {"name": "n", "namespace": "7"}},  # the key of 7/n again: moves out of the flat ones
        {"metadata": {"name": "b", "namespace": "a/"}},  # a namespace with a slash: kept flat
        {"metadata": {"name": "x/d"}},  # a cluster-scoped name that is a namespaced key: replaces it
    ]


def _namespace_index(buffer: ListBuffer) -> dict[Any, set[str]]:
    """The namespace index an Indexer holding ``buffer`` answers (keys by namespace)."""
    idx = Indexer(compact=True)
    idx.replace_with(buffer)
    return {ns: set(idx.index_keys(NAMESPACE_INDEX, ns)) for ns in idx.index_values(NAMESPACE_INDEX)}


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
    assert fast.indices == general.indices
    assert _namespace_index(fast) == _namespace_index(general) == {
        "x": {"x/a", "x/b", "x/5", "x/e"}, "y": {"y/c"}, "z": {"z/"}, "7": {"7/n"}, "q": {"q/6"}, 8: {"8/m"},
        "8": {"8/o"}, "a/": {"a//b"}}
    assert len(fast) == len(general) == len(dict(fast.items.items())) == 14
    assert decode(fast.items["x/d"]) == {"metadata": {"name": "x/d"}}
    assert decode(fast.items["8/m"])["metadata"]["namespace"] == 8
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


def test_keys_move_between_namespace_dicts_and_flat_keeping_one_object_per_key() -> None:
    idx = Indexer({"app": by_app}, compact=True)
    idx.upsert(obj("d", "x", app="web"))
    idx.upsert({"metadata": {"name": "x/d", "labels": {"app": "api"}}})  # cluster-scoped, the same key
    assert len(idx) == 1 and idx.index_values(NAMESPACE_INDEX) == [] and idx.list_keys() == ["x/d"]
    assert idx.index_keys("app", "web") == frozenset() and idx.index_keys("app", "api") == frozenset({"x/d"})
    idx.upsert(obj("d", "x", app="web"))  # back into x's dict
    assert idx.by_index(NAMESPACE_INDEX, "x") == [obj("d", "x", app="web")] and len(idx) == 1
    idx.upsert({"metadata": {"name": "n", "namespace": 7, "labels": {}}})  # kept flat, indexed under 7
    idx.upsert(obj("m", "7"))
    assert idx.index_keys(NAMESPACE_INDEX, 7) == frozenset({"7/n"})  # type: ignore[arg-type]
    assert idx.index_keys(NAMESPACE_INDEX, "7") == frozenset({"7/m"}) and sorted(idx.index_values(NAMESPACE_INDEX),
                                                                                key=str) == [7, "7", "x"]
    assert idx.delete("x/d") is not None and idx.delete("7/m") is not None
    assert idx.index_values(NAMESPACE_INDEX) == [7] and idx.get_by_key("x/d") is None and "7/n" in idx
    idx.remove_indexer(NAMESPACE_INDEX)
    idx.upsert(obj("a", "y"))
    with pytest.raises(KeyError):
        idx.index_keys(NAMESPACE_INDEX, "y")
    idx.add_indexers({NAMESPACE_INDEX: lambda o: ["all"]})  # not namespace_index: an index of its own
    assert idx.index_keys(NAMESPACE_INDEX, "all") == frozenset({"7/n", "y/a"})
    assert idx.index_keys(NAMESPACE_INDEX, "y") == frozenset()


def test_custom_key_functions_keep_every_object_flat() -> None:
    idx = Indexer(key_func=lambda o: "k/" + o["metadata"]["name"])
    idx.upsert(obj("a", "x"))
    assert idx.get_by_key("k/a") == obj("a", "x") and idx.index_keys(NAMESPACE_INDEX, "x") == frozenset({"k/a"})
    buffer = idx.new_buffer()
    buffer.add_page([obj("b", "x")])
    idx.replace_with(buffer)
    assert idx.list_keys() == ["k/b"] and idx.index_keys(NAMESPACE_INDEX, "x") == frozenset({"k/b"})


def test_a_namespace_index_added_again_lists_each_object_once() -> None:
    idx = Indexer(compact=True)
    idx.upsert(obj("a", "x"))
    idx.remove_indexer(NAMESPACE_INDEX)
    idx.add_indexers({NAMESPACE_INDEX: namespace_index})
    assert idx.by_index(NAMESPACE_INDEX, "x") == [obj("a", "x")]
    idx.remove_indexer(NAMESPACE_INDEX)
    buffer = idx.new_buffer()
    idx.add_indexers({NAMESPACE_INDEX: namespace_index})  # after the buffer was made: computed by replace_with
    buffer.add(obj("b", "x"))
    idx.replace_with(buffer)
    assert idx.by_index(NAMESPACE_INDEX, "x") == [obj("b", "x")]
