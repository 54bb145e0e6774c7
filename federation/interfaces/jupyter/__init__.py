"""Jupyter: ``FederatedExecutor`` (in-process) and ``RemoteFederatedExecutor`` (through a
running coordinator service)."""
