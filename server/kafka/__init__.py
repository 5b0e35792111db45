"""The Kafka wire-protocol listener."""
