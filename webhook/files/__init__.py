"""Kubernetes objects from YAML files: loading, schema checks, the local ListerWatcher and TestSuites."""
