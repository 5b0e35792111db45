"""Traffic-weighted consistent-hash ring with delayed reassignment (pure logic, no I/O).

``Ring`` places ``"<topic>:<partition>"`` keys on members with per-member virtual-node counts;
``rebalance`` is Talos's traffic weighting; ``next_members`` is the delayed-reassignment rule.

Imports no other package of this repository.
"""

from __future__ import annotations

from hashring.balance import Balance, RebalanceResult, imbalance, rebalance, worth_publishing
from hashring.membership import MembershipChange, next_members
from hashring.ring import DEFAULT_VNODES, Ring, partition_key

__all__ = [
    "DEFAULT_VNODES",
    "Balance",
    "MembershipChange",
    "RebalanceResult",
    "Ring",
    "imbalance",
    "next_members",
    "partition_key",
    "rebalance",
    "worth_publishing",
]
