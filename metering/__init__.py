"""Metering: metrics through the __talos_metrics topic, aggregation, stores, quota decision model."""
