"""``serve --local``'s ListerWatcher: label selectors as the API server applies them; bad files are kept, reported."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from webhook.files.local_source import LocalDirectory, LocalDirectoryListerWatcher
from webhook.informer.types import ListOptions, WatchEvent
from webhook.policy.labelquery import parse_label_selector_text

SELECTOR = "tollgate.dev/params=true"


def configmap(name: str, labels: str = "{tollgate.dev/params: 'true'}", data: str = "{a: b}") -> str:
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: ns, labels: {labels}}}\n"
            f"data: {data}\n")


def write(path: Path, text: str, tick: list[int] = [0]) -> None:  # noqa: B006 - a counter shared across calls
    path.write_text(text)
    tick[0] += 1
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + tick[0] * 1_000_000_000))  # a change the poller sees


async def names(lw: LocalDirectoryListerWatcher, selector: str | None = SELECTOR) -> list[str]:
    result = await lw.list(ListOptions(label_selector=selector))
    return sorted(o["metadata"]["name"] for o in result.items)


async def test_list_honours_the_label_selector(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", configmap("param") + "---\n" + configmap("other", labels="{x: y}"))
    lw = LocalDirectoryListerWatcher(tmp_path, kinds={"ConfigMap"}, default_namespace="default")
    assert await names(lw) == ["param"]
    assert await names(lw, None) == ["other", "param"]
    assert await names(lw, "x in (y, z),!tollgate.dev/params") == ["other"]


async def test_watch_turns_crossing_the_selector_into_added_and_deleted(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    write(path, configmap("c"))
    lw = LocalDirectoryListerWatcher(tmp_path, kinds={"ConfigMap"}, default_namespace="default", poll_interval=0.01,
                                     directory=LocalDirectory(tmp_path, settle_seconds=0))
    rv = (await lw.list(ListOptions(label_selector=SELECTOR))).resource_version
    bookmarks = 0
    seen: list[tuple[str, str]] = []
    edits = [configmap("c", data="{a: c}"), configmap("c", labels="{}"), configmap("c", labels="{}", data="{a: d}"),
             configmap("c")]
    events = lw.watch(ListOptions(label_selector=SELECTOR, resource_version=rv, timeout_seconds=10,
                                  allow_watch_bookmarks=True))
    async for event in events:
        assert isinstance(event, WatchEvent)
        if event.type == "BOOKMARK":
            bookmarks += 1
            if bookmarks % 3:
                continue  # a change is served on the poll after the one that first sees it
            if not edits:
                break
            write(path, edits.pop(0))
            continue
        seen.append((event.type, event.object["data"]["a"]))
    await events.aclose()
    # unlabelled: DELETED; changed while unselected: nothing; labelled again: ADDED (kube-apiserver's watch cache)
    assert seen == [("MODIFIED", "c"), ("DELETED", "b"), ("ADDED", "b")]


async def test_a_broken_file_keeps_its_last_good_objects_and_is_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cm.yaml"
    write(path, configmap("c"))
    lw = LocalDirectoryListerWatcher(tmp_path, kinds={"ConfigMap"}, default_namespace="default",
                                     directory=LocalDirectory(tmp_path, settle_seconds=0))
    assert await names(lw) == ["c"] and lw.errors == {} and lw.error_count == 0
    write(path, configmap("c") + "  oops: [\n")
    with caplog.at_level(logging.WARNING, logger="tollgate.local"):
        assert await names(lw) == ["c"] and lw.errors == {}  # not confirmed yet: it may be half-written
        assert await names(lw) == ["c"]
        assert await names(lw) == ["c"]
    assert list(lw.errors) == [str(path)]
    assert lw.errors[str(path)].startswith(f"{path}:5:3: invalid YAML: did not find expected key")
    assert lw.error_count == 1
    assert len([r for r in caplog.records if "keeping its last good objects" in r.getMessage()]) == 1  # once
    write(path, configmap("c", data="{n: 1}"))  # parses, but kubectl apply would refuse it
    assert await names(lw) == ["c"]
    assert await names(lw) == ["c"]
    assert lw.errors == {str(path): f"{path}:4: document 1: data.n: must be a string, got an integer"}
    assert lw.error_count == 2
    write(path, configmap("d"))
    assert await names(lw) == ["c"]
    assert await names(lw) == ["d"] and lw.errors == {}


@pytest.mark.parametrize(("text", "labels", "selected"), [
    ("a=b", {"a": "b"}, True), ("a==b", {"a": "c"}, False), ("a!=b", {}, True), ("a", {"a": ""}, True),
    ("!a", {"a": "x"}, False), ("a in (x, y),b notin (z)", {"a": "y", "b": "q"}, True),
    ("a in (x, y)", {"a": "z"}, False), ("", {}, True),
])
def test_selector_text(text: str, labels: dict[str, str], selected: bool) -> None:
    assert parse_label_selector_text(text).matches(labels) is selected


@pytest.mark.parametrize("text", ["a=b=c", "a in x", "=b", "a b"])
def test_malformed_selectors_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid label selector"):
        parse_label_selector_text(text)


ROOT = Path(__file__).resolve().parents[3]
PRIVILEGED = ROOT / "policies" / "pod-security" / "baseline" / "disallow-privileged-containers.yaml"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def denies_a_privileged_pod(directory: LocalDirectory, cache: dict[str, bool]) -> bool:
    """Whether what the directory serves now denies a privileged Pod (the engine the server runs)."""
    from webhook.files.requests import build_request
    from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating

    documents, _errors = directory.listing()
    served = [d for _path, d in documents if d.get("kind") == "ClusterAdmissionPolicy"]
    key = json.dumps(served, sort_keys=True)
    if key not in cache:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": True}}]}}
        request = build_request(pod, operation="CREATE", user_info={"username": "mallory"})
        compiled = [c for c in (compile_policy(d).matchable for d in served) if c is not None]
        cache[key] = not evaluate_validating(request, compiled, InMemoryLookups()).allowed
    return cache[key]


def test_no_byte_prefix_of_a_policy_file_ever_removes_its_effect(tmp_path: Path) -> None:
    # An editor or `cp` rewriting the file in place exposes every prefix in turn: empty, comments only, a policy
    # cut after its variables (no validations), invalid YAML. None may be served in place of the whole file.
    text = PRIVILEGED.read_bytes()
    path = tmp_path / PRIVILEGED.name
    clock = FakeClock()
    directory = LocalDirectory(tmp_path, settle_seconds=1.0, clock=clock)
    path.write_bytes(text)
    cache: dict[str, bool] = {}
    assert denies_a_privileged_pod(directory, cache)
    admitted = []
    for size in range(len(text)):
        path.write_bytes(text[:size])
        os.utime(path, ns=(0, 1_000_000 + size))  # every write is a change the poller sees
        for _poll in range(3):  # seen by three polls within the settle time
            if not denies_a_privileged_pod(directory, cache):
                admitted.append(size)
            clock.now += 0.3
        clock.now += 0.5  # a new prefix
    path.write_bytes(text)
    assert admitted == []
    assert denies_a_privileged_pod(directory, cache) and directory.listing()[1] == {}
    assert len(cache) == 1  # the served policy never changed


def test_a_change_is_served_once_it_holds_for_the_settle_time(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = LocalDirectory(tmp_path, settle_seconds=1.0, clock=clock)
    path = tmp_path / "cm.yaml"
    write(path, configmap("a"))

    def served() -> list[str]:
        return [d["metadata"]["name"] for _path, d in directory.listing()[0]]

    assert served() == ["a"]  # the first listing is served as read
    write(path, "# nothing yet\n")
    assert served() == ["a"]
    clock.now += 0.9
    assert served() == ["a"]
    clock.now += 0.2
    assert served() == ["a"]  # emptied for good: still not a removal (only deleting the file is)
    write(path, configmap("b"))  # a file's new content, a new file and a removal are all confirmed alike
    write(tmp_path / "new.yaml", configmap("n"))
    assert served() == ["a"]
    clock.now += 1.0
    assert served() == ["b", "n"]
    (tmp_path / "new.yaml").unlink()
    assert served() == ["b", "n"]
    clock.now += 1.0
    assert served() == ["b"]
    write(path, configmap("c"))
    clock.now += 1.0
    assert served() == ["b"]  # one observation is never enough, however late it comes
    clock.now += 0.1
    assert served() == ["b"]  # changed again before it was confirmed: the settle time starts over
    clock.now += 1.0
    assert served() == ["c"]


@pytest.mark.parametrize("emptied", ["", "# nothing yet\n", "---\n# only comments\n---\n"])
def test_a_file_that_holds_no_documents_removes_nothing_however_long_it_stays_so(
        tmp_path: Path, emptied: str, caplog: pytest.LogCaptureFixture) -> None:
    # Truncated to 0 bytes or left with comments (a writer that died mid-save): its objects stay, and it is
    # reported; deleting the file is the one way to remove them.
    caplog.set_level(logging.INFO, logger="tollgate.local")
    clock = FakeClock()
    directory = LocalDirectory(tmp_path, settle_seconds=1.0, clock=clock)
    path = tmp_path / "cm.yaml"
    write(path, configmap("a"))
    assert [d["metadata"]["name"] for _path, d in directory.listing()[0]] == ["a"]
    write(path, emptied)
    for _poll in range(10):
        clock.now += 1.0
        documents, errors = directory.listing()
        assert [d["metadata"]["name"] for _path, d in documents] == ["a"]
    assert errors == {str(path): f"{path}: holds no documents (empty, or only comments); delete the file to "
                                 f"remove its objects"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{path}: holds no documents (empty, or only comments); delete the file to remove its "
                        f"objects (keeping its last good objects: 1 document(s))"]  # logged once
    path.unlink()
    assert directory.listing()[0] != []  # a removal is confirmed like any change ...
    clock.now += 1.0
    assert directory.listing() == ([], {})  # ... and then served
    assert [r.getMessage() for r in caplog.records][-1] == f"{path}: deleted: its 1 document(s) are no longer served"
    write(path, emptied)  # a file that never held a document serves none, and is no problem
    clock.now += 1.0
    assert directory.listing() == ([], {})


async def test_sources_whose_polls_come_due_together_share_one_listing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each walk of the directory holds the event loop; one per served kind, back to back, held it 30-44 ms."""
    import asyncio

    from webhook.files import local_source

    walks: list[Path] = []
    real = local_source.yaml_files
    monkeypatch.setattr(local_source, "yaml_files", lambda root: walks.append(root) or real(root))
    for i in range(40):  # enough files that the listing yields the loop between them
        (tmp_path / f"cm{i}.yaml").write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n")
    directory = local_source.LocalDirectory(tmp_path)
    listings = await asyncio.gather(*(directory.listing_yielding(0.5) for _ in range(9)))
    assert len(walks) == 1 and all(listing is listings[0] for listing in listings)
    assert len(listings[0][0]) == 40

    leader = asyncio.create_task(directory.listing_yielding(0.0))  # max_age 0: always a listing of its own
    await asyncio.sleep(0)
    waiter = asyncio.create_task(directory.listing_yielding(0.0))
    await asyncio.sleep(0)
    leader.cancel()  # the waiter lists by itself rather than wait for nothing
    await asyncio.gather(leader, return_exceptions=True)
    assert len((await waiter)[0]) == 40 and len(walks) == 3
