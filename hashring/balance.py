"""Traffic weighting (Xiaomi Talos): tune each member's virtual-node count until traffic is balanced.

From per-partition traffic: the expected load per member is the mean; members above it get fewer
virtual nodes, members below more (multiplicative, ``count * (mean / load) ** damping``); re-place and
repeat until max/mean load is under the threshold or the rounds run out. Arcs move in jumps, so one run
can stall in a poor state: each round tries a few damping factors, a stalled run restarts from its best
state with a random nudge, and the whole search restarts from a few base vnode counts (any counts are
fine to publish, since every server builds the same ring from them). Pure and deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hashring.ring import Ring

__all__ = ["Balance", "RebalanceResult", "imbalance", "rebalance", "worth_publishing"]

DEFAULT_STARTS = (160, 100, 240, 60, 400, 130, 200, 80)


@dataclass(frozen=True)
class Balance:
    loads: dict[str, float]

    @property
    def ratio(self) -> float:
        """max / mean load over the members (1.0 is perfect; empty or idle → 1.0)."""
        if not self.loads:
            return 1.0
        mean = sum(self.loads.values()) / len(self.loads)
        return max(self.loads.values()) / mean if mean > 0 else 1.0


def imbalance(ring: Ring, traffic: Mapping[str, float]) -> Balance:
    loads = {member: 0.0 for member in ring.members}
    for key, amount in traffic.items():
        loads[ring.owner(key)] += amount
    return Balance(loads)


@dataclass(frozen=True)
class RebalanceResult:
    ring: Ring  # the proposal (version = current + 1)
    before: float  # max/mean of the current ring
    after: float  # max/mean of the proposal
    moved: frozenset[str]  # keys whose owner would change
    rounds: int


def _step(
    counts: Mapping[str, int], loads: Mapping[str, float], damping: float, floor: int, ceiling: int
) -> dict[str, int]:
    mean = sum(loads.values()) / len(loads)
    out = {}
    for member, count in counts.items():
        load = loads[member]
        # at most halve or double per round: steady, and safe for idle or near-idle members
        factor = min(2.0, max(0.5, (mean / load) ** damping)) if load > mean * 1e-9 else 2.0
        out[member] = min(ceiling, max(floor, round(count * factor)))
    return out


def rebalance(
    ring: Ring,
    traffic: Mapping[str, float],
    *,
    threshold: float = 1.10,
    max_rounds: int = 60,
    starts: Sequence[int] = DEFAULT_STARTS,
    min_vnodes: int = 4,
    max_vnodes: int = 2048,
    seed: int = 0,
) -> RebalanceResult:
    """Propose new virtual-node counts for ``ring``'s members that bring max/mean traffic under
    ``threshold`` (or as close as the search gets). ``traffic`` maps ring keys to load (bytes/s, say).
    Counts stay within ``[min_vnodes, max_vnodes]`` (a ring's size is bounded whatever the traffic)."""
    before = imbalance(ring, traffic).ratio
    if not ring.members or not traffic:
        return RebalanceResult(ring.with_members(ring.members), before, before, frozenset(), 0)
    jitter = random.Random(seed)
    best_counts, best_ratio = dict(ring.members), before
    rounds = 0
    for base in [None, *starts]:  # None: start from the current counts
        counts = dict(ring.members) if base is None else {m: base for m in ring.members}
        current = imbalance(Ring(counts), traffic)
        run_best = (current.ratio, counts)
        for _ in range(max_rounds):
            if min(run_best[0], best_ratio) <= threshold:
                break
            rounds += 1
            candidates = []
            for damping in (1.0, 0.5, 0.25):
                proposal = _step(counts, current.loads, damping, min_vnodes, max_vnodes)
                candidates.append((imbalance(Ring(proposal), traffic), proposal))
            balance, proposal = min(candidates, key=lambda c: c[0].ratio)
            if balance.ratio >= current.ratio:  # stalled: restart from this run's best, nudged
                proposal = {
                    m: min(max_vnodes, max(min_vnodes, round(v * jitter.uniform(0.85, 1.15))))
                    for m, v in run_best[1].items()
                }
                balance = imbalance(Ring(proposal), traffic)
            counts, current = proposal, balance
            if balance.ratio < run_best[0]:
                run_best = (balance.ratio, proposal)
        if run_best[0] < best_ratio:
            best_ratio, best_counts = run_best
        if best_ratio <= threshold:
            break
    proposal_ring = ring.with_members(best_counts)
    moved = frozenset(key for key in traffic if ring.owner(key) != proposal_ring.owner(key))
    return RebalanceResult(proposal_ring, before, best_ratio, moved, rounds)


def worth_publishing(
    result: RebalanceResult, *, min_gain: float = 0.05, max_moved_share: float = 0.5, keys: int | None = None
) -> bool:
    """Publish only if balance improves by ``min_gain`` (absolute max/mean) and the moves stay bounded."""
    if result.before - result.after < min_gain:
        return False
    return keys is None or keys == 0 or len(result.moved) / keys <= max_moved_share
