"""Keep a :class:`PolicyIndex` in step with a policy informer's notifications (pure; no I/O).

:class:`PolicyEventHandler` is a client-go ``ResourceEventHandler`` for the
ClusterAdmissionPolicy and AdmissionPolicy informers: each add or spec change
recompiles the policy (on its watch event, never per request), each delete
forgets it, and every new Ready condition goes to the ``status_sink`` (the
leader's status writer, or nothing). Structural typing keeps this package
independent of ``webhook.informer``: a deletion tombstone is anything with
``key`` and ``obj`` (client-go ``DeletedFinalStateUnknown``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from webhook.policy.compiler import CompileResult
from webhook.policy.index import PolicyIndex, policy_key
from webhook.policy.provenance import import_error

log = logging.getLogger("tollgate.policy")

#: Receives ``(policy object, Ready condition)`` whenever a policy is (re)compiled.
StatusSink = Callable[[dict[str, Any], dict[str, Any]], object]


class Tombstone(Protocol):
    """A deletion whose final state is unknown (client-go ``DeletedFinalStateUnknown``)."""

    @property
    def key(self) -> str:
        """The store key of the deleted object."""

    @property
    def obj(self) -> Any:
        """Its last known state."""


class PolicyEventHandler:
    """Compile on add/update, forget on delete; report each Ready condition.

    Args:
        index: the index to maintain.
        status_sink: called with ``(obj, condition)`` after each compile and on
            status-only updates (so a replica drops a write the leader already made), or None.
        forget: called with the deleted object (drop queued status writes), or None.
        on_change: called when the set of policies or a spec changed (e.g. the
            webhook configuration reconciler's trigger), or None.
    """

    #: Runs on the event loop (the informer's ``sync_calls``): it maintains the index the request path reads.
    sync_calls = "loop"

    def __init__(self, index: PolicyIndex, status_sink: StatusSink | None = None, *,
                 forget: Callable[[dict[str, Any]], object] | None = None,
                 on_change: Callable[[], object] | None = None) -> None:
        self.index = index
        self.status_sink = status_sink
        self.forget = forget
        self.on_change = on_change

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool, compiled: CompileResult | None = None) -> None:
        """Compile and file the policy; report its Ready condition.

        Args:
            obj: the policy object.
            is_in_initial_list: from the informer (unused: every add is compiled alike).
            compiled: ``compile_policy(obj)`` when already done off the event loop, else None.
        """
        state = self.index.upsert(obj, compiled)
        condition = state.result.condition
        if state.ready:
            log.info("policy compiled", extra={"policy": state.key})
        elif state.result.matchable is None:
            log.error("policy not ready and its match rules are unreadable: it selects nothing",
                      extra={"policy": state.key, "reason": condition["reason"], "detail": condition["message"]})
        else:
            log.warning("policy not ready: requests it selects are answered per its failurePolicy",
                        extra={"policy": state.key, "reason": condition["reason"], "detail": condition["message"]})
        if self.status_sink is not None:
            self.status_sink(obj, condition)
        if self.on_change is not None:
            self.on_change()

    def needs_compile(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Whether an update changed what compiling reads: the spec, or an imported policy's problem.

        Status writes also arrive as updates, and change neither.
        """
        return (old.get("spec") != new.get("spec") or import_error(old) != import_error(new)
                or self.index.state(policy_key(new)) is None)

    def on_update(self, old: dict[str, Any], new: dict[str, Any], compiled: CompileResult | None = None) -> None:
        """Recompile when :meth:`needs_compile`; else only report the Ready condition already known.

        Args:
            old: the previous object.
            new: the new object.
            compiled: ``compile_policy(new)`` when already done off the event loop (the caller found that
                :meth:`needs_compile`), else None.
        """
        if compiled is None and not self.needs_compile(old, new):
            self.report_known(new)
            return
        self.on_add(new, False, compiled)

    def report_known(self, new: dict[str, Any]) -> None:
        """An update that changed nothing compiling reads: report the Ready condition already known.

        The status sink drops a write the leader already made (no I/O here).
        """
        state = self.index.state(policy_key(new))
        if state is not None and self.status_sink is not None:
            self.status_sink(new, state.result.condition)

    def on_delete(self, obj: dict[str, Any] | Tombstone) -> None:
        """Forget the policy (and any status write still queued for it)."""
        if isinstance(obj, dict):
            self.index.remove(obj)
            final: Any = obj
        else:
            self.index.remove(obj.key)
            final = obj.obj
        if self.forget is not None and isinstance(final, dict):
            self.forget(final)
        if self.on_change is not None:
            self.on_change()


__all__ = ["PolicyEventHandler", "StatusSink", "Tombstone"]
