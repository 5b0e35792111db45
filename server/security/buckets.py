"""Token buckets: how a tenant's and a topic's rate quotas are applied on a partition's owner.

Each bucket refills at ``rate`` per second up to one second's worth (the burst). A request is admitted
while the bucket is not in debt (else 429, with the time until it is out of debt as ``Retry-After``).
Its size is charged when known (before a write, after a read); if that puts the bucket in debt, the
request is held until the debt is paid (``guard.pay``). So by any moment ``T`` at most ``rate * T`` plus
one burst has got through, however large one batch is: within a few percent of the limit over 30 s.

On a cluster each owner enforces its share of a quota: the fraction of the topic's (or the tenant's)
partitions it owns. Traffic skewed towards one server's partitions sees less than the whole quota.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TokenBucket", "retry_after_header"]


@dataclass(slots=True)
class TokenBucket:
    rate: float
    tokens: float
    updated: float
    burst: float | None = None  # the most it holds; None: one second's worth (``rate``)

    @classmethod
    def full(cls, rate: float, now: float, burst: float | None = None) -> TokenBucket:
        return cls(rate, rate if burst is None else burst, now, burst)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            most = self.rate if self.burst is None else self.burst
            self.tokens = min(most, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until the bucket is out of debt (0: admit now)."""
        self._refill(now)
        wait = -self.tokens / self.rate
        return wait if wait > 1e-6 else 0.0  # a rounding error's worth of debt is no debt

    def charge(self, cost: float, now: float) -> None:
        self._refill(now)
        self.tokens -= cost

    def wait_after(self, cost: float, now: float) -> float:
        """:meth:`wait` as it would be after charging ``cost`` (nothing charged)."""
        self._refill(now)
        wait = (cost - self.tokens) / self.rate
        return wait if wait > 1e-6 else 0.0

    def refund(self, cost: float) -> None:
        """Give back what a :meth:`charge` took for a request that was then not served (up to the burst)."""
        self.tokens = min(self.rate if self.burst is None else self.burst, self.tokens + cost)

    def retune(self, rate: float) -> None:
        """A changed limit: keep the debt (or credit, capped to the new burst)."""
        self.rate = rate
        self.tokens = min(self.tokens, rate)


def retry_after_header(wait_s: float) -> str:
    """HTTP's Retry-After is whole seconds; the precise wait goes in the error body (``retry_after_ms``)."""
    return str(max(1, math.ceil(wait_s)))
