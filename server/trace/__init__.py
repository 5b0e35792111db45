"""Message trace (JMQ's, as RocketMQ has it): per topic, off / on / sampled 1 in N, servers record what happened
to a message (produced, delivered, committed, retried, dead-lettered) into ``__talos_trace``; an index over that
topic answers "what happened to this message / this key" (docs/trace.md)."""
