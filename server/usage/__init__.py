"""Usage metering: per tenant/topic/partition counters (``meter``), their emission into the
``__talos_metrics`` topic (``emitter``) and the recent history the portal reads (``history``).

May import ``server.metrics``, ``server.broker``, ``server.topics``, ``server.internal_topics``, ``server.errors``,
``metering`` and ``talos``; not the HTTP edge.
"""
