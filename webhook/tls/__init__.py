"""Certificates: generation, and TLS serving with hot reload (the self-managed Secret is ``webhook.kube``'s)."""
