"""Shared test support: the local cluster, namespaces and small waiting helpers."""
