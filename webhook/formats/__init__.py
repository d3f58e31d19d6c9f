"""Foreign policy formats, one home per source: reading, conversion both ways and test files (pure; no I/O).

Tollgate enforces, beside its own kinds, the policies its users already have. Each source has one
subpackage here holding everything Tollgate knows of it, so that adding the next source touches one
package (and one line of :mod:`.kinds`):

* :mod:`.kubernetes` — ``admissionregistration.k8s.io`` ValidatingAdmissionPolicy/MutatingAdmissionPolicy
  and their bindings: :mod:`.kubernetes.convert` (to a Tollgate policy) and :mod:`.kubernetes.export`
  (a Tollgate policy as the API server's objects);
* :mod:`.kyverno` — Kyverno's CEL policies (``policies.kyverno.io``): :mod:`.kyverno.convert`.

What the sources share: :mod:`.kinds` (what is imported, the registry of sources), :mod:`.matching`
(match rules and their intersection), :mod:`.libraries` (CEL libraries Tollgate lacks, resource reads),
:mod:`.catalog` (a set of objects → policies), :mod:`.events` (informer notifications → policy
notifications), :mod:`.imported` (the result types), :mod:`.common` (field helpers). The annotations an
imported policy carries are the native core's vocabulary (:mod:`webhook.policy.provenance`).

Each converted policy is a ``ClusterAdmissionPolicy`` object evaluated by the same engine with the same
failure semantics; what it cannot honour is a :class:`~.imported.Problem` naming the source's field,
carried by the object so that it is not Ready (reason ``ImportError``) and answered per its
``failurePolicy``. Only the native core (:mod:`webhook.policy`) lies below this package; files, the
server and the CLI read through it.
"""

from __future__ import annotations
