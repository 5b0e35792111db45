"""Sticky assignment: balanced, and a membership change moves the fewest partitions possible.

Pure logic, no I/O. Each topic is balanced among the members that subscribe to it: with ``n`` partitions
and ``m`` subscribers every member gets ``n // m`` and ``n % m`` of them get one more. Which members get
the extra one decides how many partitions stay put, and the choice is simple: a member can only keep a
partition it holds now, so the extras go to the members holding the most. Each member then keeps as many
of its current partitions as its quota allows; only the rest (and the partitions of departed members) move.
That number, ``n - sum(min(held, quota))``, is the least any balanced assignment can move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

__all__ = ["TopicPartition", "assign", "moved"]

TopicPartition = tuple[str, int]


def assign(
    partitions: Mapping[str, int],
    subscriptions: Mapping[str, Collection[str]],
    current: Mapping[TopicPartition, str],
) -> dict[TopicPartition, str]:
    """Partition → member for ``partitions`` (topic → count) among ``subscriptions`` (member → topics).

    ``current`` is where partitions are now; entries of departed members or topics are ignored.
    """
    load: Counter[str] = Counter()  # partitions given so far, across topics: ties go to the least loaded
    out: dict[TopicPartition, str] = {}
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        tps = [(topic, p) for p in range(partitions[topic])]
        held: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for tp in tps:
            owner = current.get(tp)
            if owner in held:
                held[owner].append(tp)
        base, extra = divmod(len(tps), len(members))
        order = sorted(members, key=lambda m: (-len(held[m]), load[m], m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        free = [tp for tp in tps if current.get(tp) not in held]
        for m in members:
            free.extend(held[m][quota[m] :])
            out.update((tp, m) for tp in held[m][: quota[m]])
        free.sort(key=lambda tp: tp[1], reverse=True)
        for m in order:
            for _ in range(quota[m] - min(len(held[m]), quota[m])):
                out[free.pop()] = m
        for m in members:
            load[m] += quota[m]
    return out


def moved(before: Mapping[TopicPartition, str], after: Mapping[TopicPartition, str]) -> int:
    """How many partitions of ``after`` have a different member than in ``before`` (or had none)."""
    return sum(1 for tp, member in after.items() if before.get(tp) != member)
