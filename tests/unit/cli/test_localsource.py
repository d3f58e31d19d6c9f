"""``serve --local``'s ListerWatcher: label selectors as the API server applies them; bad files are kept, reported."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from webhook.files.local_source import LocalDirectoryListerWatcher
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
    lw = LocalDirectoryListerWatcher(tmp_path, kinds={"ConfigMap"}, default_namespace="default", poll_interval=0.01)
    rv = (await lw.list(ListOptions(label_selector=SELECTOR))).resource_version
    seen: list[tuple[str, str]] = []
    edits = [configmap("c", data="{a: c}"), configmap("c", labels="{}"), configmap("c", labels="{}", data="{a: d}"),
             configmap("c")]
    events = lw.watch(ListOptions(label_selector=SELECTOR, resource_version=rv, timeout_seconds=10,
                                  allow_watch_bookmarks=True))
    async for event in events:
        assert isinstance(event, WatchEvent)
        if event.type == "BOOKMARK":
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
    lw = LocalDirectoryListerWatcher(tmp_path, kinds={"ConfigMap"}, default_namespace="default")
    assert await names(lw) == ["c"] and lw.errors == {} and lw.error_count == 0
    write(path, configmap("c") + "  oops: [\n")
    with caplog.at_level(logging.WARNING, logger="tollgate.local"):
        assert await names(lw) == ["c"]
        assert await names(lw) == ["c"]
    assert list(lw.errors) == [str(path)]
    assert lw.errors[str(path)].startswith(f"{path}:5:3: invalid YAML: did not find expected key")
    assert lw.error_count == 1
    assert len([r for r in caplog.records if "keeping its last good objects" in r.getMessage()]) == 1  # once
    write(path, configmap("c", data="{n: 1}"))  # parses, but kubectl apply would refuse it
    assert await names(lw) == ["c"]
    assert lw.errors == {str(path): f"{path}:4: document 1: data.n: must be a string, got an integer"}
    assert lw.error_count == 2
    write(path, configmap("d"))
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
