"""Gatekeeper: ConstraintTemplates with K8sNativeValidation (CEL) code, their Constraints, gator Suites (pure).

:mod:`.convert` (a template and one of its constraints → a Tollgate policy), :mod:`.suite` (gator's
``test.gatekeeper.sh/v1alpha1`` Suite files: parsing and their assertions).
"""
