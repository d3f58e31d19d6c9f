"""webhook.caches.decoded: one dict per stored version, so CEL's binding cannot leak a dict per request."""

from __future__ import annotations

import gc

import pytest

from webhook.caches.decoded import DecodedMemo
from webhook.informer.store import decode, encode
from webhook.policy.cel.env import environment


def test_the_same_stored_version_gives_the_same_dict_and_a_new_version_a_new_one() -> None:
    memo = DecodedMemo()
    v1 = encode({"metadata": {"name": "a", "resourceVersion": "1"}})
    first = memo.decode(v1)
    assert memo.decode(v1) is first and first["metadata"]["name"] == "a"
    v2 = encode({"metadata": {"name": "a", "resourceVersion": "2"}})
    second = memo.decode(v2)
    assert second is not first and second["metadata"]["resourceVersion"] == "2"
    assert (memo.hits, memo.misses) == (1, 2)


def test_a_dict_store_is_handed_out_as_is() -> None:
    obj = {"metadata": {"name": "a"}}
    memo = DecodedMemo()
    assert memo.decode(obj) is obj and len(memo) == 0


def test_bounded_least_recently_read_first_out() -> None:
    memo = DecodedMemo(size=2)
    a, b, c = (encode({"n": i}) for i in range(3))
    da = memo.decode(a)
    memo.decode(b)
    memo.decode(a)  # a is now the most recent
    memo.decode(c)  # b goes
    assert len(memo) == 2 and memo.decode(a) is da
    misses = memo.misses
    memo.decode(b)
    assert memo.misses == misses + 1
    with pytest.raises(ValueError, match="above 0"):
        DecodedMemo(size=0)


def test_a_python_function_returning_the_memoized_object_leaks_no_new_objects() -> None:
    """What the memo is for: a library function handing a cached object to CEL on every request.

    cel-expr-python 0.1.3 keeps a reference to each value a Python function returns; with a new dict per call
    the heap grows by the dict per evaluation, with the memo it does not grow at all.
    """
    env = environment()
    stored = encode({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "b"}},
                     "data": {"registries": "ghcr.io"}})
    memo = DecodedMemo()

    def grown(read: object) -> int:
        from webhook.policy.cel import scope

        program = env.compile("resource.Get('v1', 'configmaps', 'ns', 'cm').data.registries == 'ghcr.io'")

        class Reader:
            def get(self, *_: str) -> object:
                return read()  # type: ignore[operator]

        gc.collect()
        before = len(gc.get_objects())
        token = scope.set_current_scope(scope.VariableScope({}, None, None, references=Reader()))  # type: ignore[arg-type]
        try:
            for _ in range(200):
                assert program.eval(env.Activation({})).plain_value() is True
        finally:
            scope.reset_scope(token)
        gc.collect()
        return len(gc.get_objects()) - before

    assert grown(lambda: memo.decode(stored)) < 20
    # Why: a new dict per read (the compact store's own decode) stays behind, one per evaluation. If this ever
    # fails, cel-expr-python no longer leaks and the memo is only a cache.
    assert grown(lambda: decode(stored)) >= 200


def test_threads_reading_at_once_get_the_right_objects() -> None:
    """/explain reads the caches from a worker thread while the loop serves requests."""
    import threading

    memo = DecodedMemo(size=2)  # tiny: entries are evicted while other threads read them
    stored = [encode({"n": i}) for i in range(5)]
    errors: list[BaseException] = []

    def read(offset: int) -> None:
        try:
            for k in range(3000):
                i = (k + offset) % len(stored)
                assert memo.decode(stored[i]) == {"n": i}
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(memo) <= 2
