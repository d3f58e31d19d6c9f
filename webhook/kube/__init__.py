"""The only package that talks to the API server (kubernetes_asyncio).

ListerWatcher, status writer, leader election and ApiClient construction.
"""
