"""Implementations of :class:`iobridge.runtime.cluster.Cluster` (imported only when used)."""
