"""The only package that talks to the API server (kubernetes_asyncio).

ListerWatcher, the JSON call helper (api.py), leader election, the status
writer, the webhook configuration reconciler, self-managed certificates and
ApiClient construction.
"""
