"""ZooKeeper paths of a Talos cluster (under an optional chroot given in the connection string)."""

from __future__ import annotations

ROOT = "/talos"
SERVERS = f"{ROOT}/servers"
RING = f"{ROOT}/ring"
PARTITIONS = f"{ROOT}/partitions"
TOPICS = f"{ROOT}/topics"
PRODUCERS = f"{ROOT}/producers"
PRODUCER_NAMES = f"{ROOT}/producer_names"
GROUPS = f"{ROOT}/groups"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def partition(topic: str, index: int) -> str:
    return f"{PARTITIONS}/{topic}/{index}"
