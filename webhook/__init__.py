"""Tollgate: a Kubernetes admission webhook with informer-backed caches and CEL policies."""
