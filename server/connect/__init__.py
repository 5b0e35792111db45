"""Connectors run by the cluster (docs/connectors.md, "Run by the cluster"): their configurations in the compacted
topic ``__connectors`` (``state``, kept by ``coordinator``), and on every server the supervisor of the tasks the
ring gives it (``workers``), each task a ``talos connect run`` process of its own."""
