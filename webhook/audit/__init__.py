"""Background audit: existing objects judged with the admission engine, and the PolicyReports built from it.

One evaluation, two drivers (pure: no HTTP, no API client):

- :mod:`webhook.audit.auditable` — whether a policy can be judged on a stored object, from its parse trees;
- :mod:`webhook.audit.evaluate` — which policies are audited (``audit_policy``), which rules they select
  (``audit_rules``), and a policy over stored objects → result rows (``evaluate_policy``);
- :mod:`webhook.audit.reports` — rows → one PolicyReport per namespace plus one ClusterPolicyReport;
- :mod:`webhook.audit.auditor` — the server's driver: informer events → incremental re-evaluation.

Around it: ``webhook.server.audit_stack`` wires the auditor to dynamic informers and
``webhook.kube.reports`` (the leader's report writer); ``webhook.cli.audit`` is the one-shot driver
(``tollgate audit``, over files or objects listed once by ``webhook.kube.live``). See docs/audit.md.
"""
