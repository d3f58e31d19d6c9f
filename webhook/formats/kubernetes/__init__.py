"""Kubernetes' own admission policies: ValidatingAdmissionPolicy/MutatingAdmissionPolicy and bindings (pure).

:mod:`.convert` turns a policy and a binding into a Tollgate policy; :mod:`.export` renders a Tollgate
policy as the API server's objects (``tollgate export``). Both use one field mapping
(:data:`.export.POLICY_FIELDS`, :data:`.export.BINDING_FIELDS`).
"""
