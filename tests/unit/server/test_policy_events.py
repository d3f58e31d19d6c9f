"""CompileOffLoop: policies compiled in a thread, filed on the loop, status-only updates compile nothing."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from webhook.policy import compiler
from webhook.policy.events import PolicyEventHandler
from webhook.policy.index import PolicyIndex
from webhook.server import policy_events
from webhook.server.policy_events import CompileOffLoop


def policy(expression: str) -> dict[str, Any]:
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": "p", "resourceVersion": "1"},
            "spec": {"match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                  "operations": ["CREATE"]}]},
                     "validations": [{"expression": expression}]}}


@pytest.fixture
def compiled_on(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    threads: list[int] = []

    def compile_policy(obj: dict[str, Any]) -> compiler.CompileResult:
        threads.append(threading.get_ident())
        return compiler.compile_policy(obj)

    monkeypatch.setattr(policy_events, "compile_policy", compile_policy)
    return threads


async def test_adds_and_spec_changes_compile_in_a_thread_and_are_filed(compiled_on: list[int]) -> None:
    index = PolicyIndex()
    conditions: list[dict[str, Any]] = []
    handler = CompileOffLoop(PolicyEventHandler(index, lambda _o, c: conditions.append(c)))

    await handler.on_add(policy("true"), False)
    assert len(compiled_on) == 1 and compiled_on[0] != threading.get_ident()
    state = index.state("p")
    assert state is not None and state.ready and conditions[-1]["reason"] == "Compiled"

    broken = policy("objekt == 1")
    await handler.on_update(policy("true"), broken)
    assert len(compiled_on) == 2 and compiled_on[1] != threading.get_ident()
    state = index.state("p")
    assert state is not None and not state.ready and conditions[-1]["reason"] == "CompileError"


async def test_the_initial_list_is_compiled_on_the_loop(compiled_on: list[int]) -> None:
    # Nothing is served before the first sync: compiling there starts fastest (no GIL hand-offs per policy).
    index = PolicyIndex()
    await CompileOffLoop(PolicyEventHandler(index)).on_add(policy("true"), True)
    state = index.state("p")
    assert state is not None and state.ready and compiled_on == []


async def test_a_status_only_update_compiles_nothing_and_reports_the_known_condition(compiled_on: list[int]) -> None:
    index = PolicyIndex()
    conditions: list[dict[str, Any]] = []
    handler = CompileOffLoop(PolicyEventHandler(index, lambda _o, c: conditions.append(c)))
    await handler.on_add(policy("true"), False)
    with_status = copy.deepcopy(policy("true"))
    with_status["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    await handler.on_update(policy("true"), with_status)
    assert len(compiled_on) == 1
    assert len(conditions) == 2 and conditions[1]["reason"] == "Compiled"


async def test_a_delete_forgets_the_policy(compiled_on: list[int]) -> None:
    index = PolicyIndex()
    handler = CompileOffLoop(PolicyEventHandler(index))
    await handler.on_add(policy("true"), False)
    await handler.on_delete(policy("true"))
    assert index.state("p") is None and len(compiled_on) == 1


# -- imported policies ---------------------------------------------------------------------------------------

async def test_an_initial_list_after_serving_started_is_compiled_in_a_thread(compiled_on: list[int]) -> None:
    # A kind discovered later delivers an initial list while reviews are answered: not on the loop then.
    index = PolicyIndex()
    await CompileOffLoop(PolicyEventHandler(index), serving=lambda: True).on_add(policy("true"), True)
    assert len(compiled_on) == 1 and compiled_on[0] != threading.get_ident()


async def test_imports_are_converted_in_a_thread_and_filed_in_order(compiled_on: list[int],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.policy.imports_helpers import vap, vap_binding
    from webhook.formats.events import ImportEventHandler
    from webhook.server.policy_events import ImportOffLoop

    index = PolicyIndex()
    imports = ImportEventHandler([CompileOffLoop(PolicyEventHandler(index))])
    converted_on: list[int] = []
    convert = imports.convert

    def recording(sources: Any) -> Any:
        converted_on.append(threading.get_ident())
        return convert(sources)

    monkeypatch.setattr(imports, "convert", recording)
    delivery = ImportOffLoop(imports)
    await delivery.on_add(vap(), True)
    await delivery.on_add(vap_binding(), True)  # the initial list: on the loop (nothing is answered yet)
    assert converted_on == [threading.get_ident()] * 2 and compiled_on == []
    key = "ValidatingAdmissionPolicy/need-team/need-team-all"
    state = index.state(key)
    assert state is not None and state.ready
    await delivery.on_update(vap(), vap(failurePolicy="Ignore"))
    assert converted_on[-1] != threading.get_ident() and compiled_on and compiled_on[-1] != threading.get_ident()
    state = index.state(key)
    assert state is not None and state.obj["spec"]["failurePolicy"] == "Ignore"
    await delivery.on_delete(vap_binding())
    assert index.state(key) is None
