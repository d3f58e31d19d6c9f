"""kubernetes_asyncio ``ApiClient`` construction: kubeconfig, in-cluster, or a plain URL.

Configuration and authentication are kubernetes_asyncio's own loaders; this
module only chooses between them.
"""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config


async def new_api_client(*, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from in-cluster config (when running in a Pod and no kubeconfig is named) or a kubeconfig.

    Raises:
        kubernetes_asyncio.config.ConfigException: no usable configuration.
    """
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return client.ApiClient(configuration)


def api_client_for_url(url: str) -> client.ApiClient:
    """An ApiClient for a plain ``http://host:port`` API (tests against a fake API server)."""
    configuration = client.Configuration(host=url)
    return client.ApiClient(configuration)
