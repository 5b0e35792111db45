"""The quota decision model: approve, reject or escalate a tenant's request for a higher limit.

Quota and partition requests used to be approved by hand. Measured against each business's real traffic,
most requests (about 70 %) sat under a threshold that real growth could explain and could be approved
automatically; about 28 % were exaggerated and would only waste resources, so they can be rejected
automatically as long as the tenant is shown why; only the rest (about 2 %: above the threshold with a real
need behind it, such as a genuine sudden surge) needs a human. :func:`decide` is that triage, as a pure
function of the request, the observed usage and a :class:`Policy`: no I/O, no clock, so the same inputs
always give the same decision and the reason can be re-derived later.

The model
---------
``usage`` is one sample per period (e.g. the hourly peak), oldest first.

* ``peak`` is the largest sample (0 with no samples).
* ``growth`` compares the two halves of the history: (max of the recent half / max of the earlier half) - 1.
  Traffic appearing from nothing counts as +100 %; fewer than two samples have no trend (0). Growth is
  capped at +300 % so one burst cannot justify an unbounded ask.
* ``projected`` need = peak x (1 + max(growth, 0)): one more period of the observed growth. Shrinking
  traffic is not projected downwards, because the peak already happened and must still fit.
* ``threshold`` = max(floor, projected x headroom). Requests up to the per-resource floor are never worth
  a human's time.

Partitions are sized from throughput: the samples are bytes/s (in + out) and one partition carries
``partition_bytes_per_s``, so the threshold is ceil(projected x headroom / partition_bytes_per_s)
partitions, never below the floor nor below the partitions the topic already has (asking for no more than
what exists changes nothing). ``peak`` is then reported as the partitions needed at peak. The partitions
already held count as the allotment for the utilisation check: a topic with far more partitions than its
traffic needs is not short of partitions, whatever its quota says. (``partitions_now`` is a lower bound on
the threshold rather than on the need: applying headroom to it would let a topic with idle partitions
double them automatically.)

Rules, first match wins:

1. ``requested <= current``: a decrease or no change is always approved.
2. ``requested <= threshold``: approved; the reason names the threshold and the peak and growth behind it.
3. Fewer than ``min_samples`` samples (no traffic history) and above the threshold: rejected if the ask is
   more than ``exaggeration`` x the threshold, otherwise pending (nothing to judge it by either way).
4. Above the threshold, with history, each of these is a problem:

   * the ask is more than ``exaggeration`` x the threshold and growth is below ``growth_backing``;
   * peak use is below ``low_utilization`` of the current allotment and growth is below ``growth_backing``
     (the tenant is not using what it has);
   * traffic is shrinking (by at least ``growth_backing``, so that noise is not reported as a decline),
     reported only alongside one of the above: on its own it is not a reason to reject, since the peak
     still has to fit.

   Any problem: rejected, with every problem spelled out with figures.
5. Otherwise pending: above the threshold but backed by real growth or high utilisation (or simply not
   exaggerated), so an administrator decides.

Monotonicity in ``requested`` follows from the shape of the rules: the approved set is
``requested <= max(threshold, current)``; above it the only rule that depends on ``requested`` is the
exaggeration test ``requested > exaggeration x threshold``, which can only switch on as ``requested``
grows. So approving r approves every smaller ask, and rejecting r rejects (never approves) every larger one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["RESOURCES", "Decision", "Demand", "Policy", "decide", "format_amount"]

RESOURCES = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "partitions")

APPROVED = "approved"
REJECTED = "rejected"
PENDING = "pending"

MIB = 1024 * 1024
# Past +300 % the "trend" is more likely one burst than a rate of growth worth projecting.
GROWTH_CAP = 3.0

_DEFAULT_FLOORS: Mapping[str, float] = MappingProxyType(
    {
        "produce_bytes_per_s": 1.0 * MIB,
        "fetch_bytes_per_s": 2.0 * MIB,
        "requests_per_s": 100.0,
        "partitions": 4.0,
    }
)


def _default_floors() -> Mapping[str, float]:
    return _DEFAULT_FLOORS


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


@dataclass(frozen=True, slots=True)
class Policy:
    """The knobs of the model; see the module docstring for how each is used."""

    headroom: float = 2.0
    exaggeration: float = 4.0
    growth_backing: float = 0.2
    low_utilization: float = 0.3
    min_samples: int = 3
    partition_bytes_per_s: float = float(MIB)
    floors: Mapping[str, float] = field(default_factory=_default_floors)

    def __post_init__(self) -> None:
        for name in ("headroom", "exaggeration", "growth_backing", "low_utilization", "partition_bytes_per_s"):
            _finite(name, getattr(self, name))
        # Below 1 the threshold would sit under observed use, and the exaggeration bound under the threshold.
        if self.headroom < 1:
            raise ValueError(f"headroom must be >= 1, got {self.headroom}")
        if self.exaggeration < 1:
            raise ValueError(f"exaggeration must be >= 1, got {self.exaggeration}")
        if self.growth_backing < 0:
            raise ValueError(f"growth_backing must be >= 0, got {self.growth_backing}")
        if not 0 <= self.low_utilization <= 1:
            raise ValueError(f"low_utilization must be in [0, 1], got {self.low_utilization}")
        if self.min_samples < 0:
            raise ValueError(f"min_samples must be >= 0, got {self.min_samples}")
        if self.partition_bytes_per_s <= 0:
            raise ValueError(f"partition_bytes_per_s must be > 0, got {self.partition_bytes_per_s}")
        unknown = set(self.floors) - set(RESOURCES)
        if unknown:
            raise ValueError(f"floors for unknown resources: {sorted(unknown)}")
        for resource, floor in self.floors.items():
            _finite(f"floor for {resource}", floor)
            if floor < 0:
                raise ValueError(f"floor for {resource} must be >= 0, got {floor}")
        # A partial mapping overrides only the floors it names; freezing it keeps the policy immutable.
        object.__setattr__(self, "floors", MappingProxyType({**_DEFAULT_FLOORS, **self.floors}))


@dataclass(frozen=True, slots=True)
class Demand:
    """A request for a new limit on one resource, with the usage observed so far."""

    resource: str
    requested: float
    current: float | None
    usage: Sequence[float]
    partitions_now: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome, the reason shown to the tenant, and the figures it was derived from."""

    outcome: str
    reason: str
    threshold: float
    peak: float
    growth: float
    problems: tuple[str, ...] = ()


def _validate(demand: Demand) -> None:
    if demand.resource not in RESOURCES:
        raise ValueError(f"unknown resource {demand.resource!r}; expected one of {', '.join(RESOURCES)}")
    _finite("requested", demand.requested)
    if demand.requested <= 0:
        raise ValueError(f"requested must be > 0, got {demand.requested}")
    if demand.current is not None:
        _finite("current", demand.current)
        if demand.current < 0:
            raise ValueError(f"current must be >= 0, got {demand.current}")
    for sample in demand.usage:
        _finite("usage sample", sample)
        if sample < 0:
            raise ValueError(f"usage samples must be >= 0, got {sample}")
    if demand.partitions_now < 0:
        raise ValueError(f"partitions_now must be >= 0, got {demand.partitions_now}")


def _growth(usage: Sequence[float]) -> float:
    if len(usage) < 2:
        return 0.0
    half = len(usage) // 2
    earlier, recent = max(usage[:half]), max(usage[half:])
    if earlier == 0:
        return 1.0 if recent > 0 else 0.0
    return min(recent / earlier - 1.0, GROWTH_CAP)


def _number(value: float) -> str:
    # Enough precision to recognise the figure, not so much that it reads as measured to the byte.
    if value == int(value) or abs(value) >= 100:
        return f"{round(value):,}"
    text = f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return text.rstrip("0").rstrip(".")


def format_amount(resource: str, value: float) -> str:
    """Render ``value`` in the resource's unit: ``"1.5 MiB/s"``, ``"120 req/s"``, ``"12 partitions"``."""
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}; expected one of {', '.join(RESOURCES)}")
    if resource == "requests_per_s":
        return f"{_number(value)} req/s"
    if resource == "partitions":
        return f"{_number(value)} partition{'' if value == 1 else 's'}"
    units = ("B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s")
    scaled, unit = value, 0
    while unit < len(units) - 1 and abs(scaled) >= 1024:
        scaled /= 1024
        unit += 1
    # 1023.999 KiB/s would otherwise print as "1,024 KiB/s".
    if unit < len(units) - 1 and abs(round(scaled)) >= 1024:
        scaled /= 1024
        unit += 1
    return f"{_number(scaled)} {units[unit]}"


def _percent(fraction: float) -> str:
    value = fraction * 100
    return f"{value:.1f} %" if 0 < abs(value) < 1 else f"{value:.0f} %"


def _signed_percent(fraction: float) -> str:
    return ("+" if fraction >= 0 else "") + _percent(fraction)


def decide(demand: Demand, policy: Policy = Policy()) -> Decision:
    """Decide a quota request; see the module docstring for the model. Raises ValueError on invalid input."""
    _validate(demand)
    resource, requested, current = demand.resource, demand.requested, demand.current
    is_partitions = resource == "partitions"
    floor = policy.floors[resource]

    def fmt(value: float) -> str:
        return format_amount(resource, value)

    raw_peak = float(max(demand.usage, default=0.0))
    growth = _growth(demand.usage)
    projected = raw_peak * (1.0 + max(growth, 0.0))
    if is_partitions:
        peak = float(math.ceil(raw_peak / policy.partition_bytes_per_s))
        sized = float(math.ceil(projected * policy.headroom / policy.partition_bytes_per_s))
        threshold = max(floor, float(demand.partitions_now), sized)
        allotted = max(current or 0.0, float(demand.partitions_now))
        at_peak = f"peak traffic needs {format_amount(resource, peak)}"
    else:
        peak = raw_peak
        sized = projected * policy.headroom
        threshold = max(floor, sized)
        allotted = current or 0.0
        at_peak = f"peak use {format_amount(resource, peak)}"
    basis = f"{at_peak}, growth {_signed_percent(growth)}, x{_number(policy.headroom)} headroom"

    def decision(outcome: str, reason: str, problems: tuple[str, ...] = ()) -> Decision:
        return Decision(outcome, reason, threshold, peak, growth, problems)

    if current is not None and requested <= current:
        return decision(
            APPROVED,
            f"Approved: {fmt(requested)} is not above the current limit of {fmt(current)}; "
            "a decrease or no change is always approved.",
        )

    if requested <= threshold:
        if threshold == floor and floor >= sized:
            why = f"the automatic limit of {fmt(floor)}, which needs no review"
        elif is_partitions and threshold == demand.partitions_now and demand.partitions_now > sized:
            why = f"the {fmt(threshold)} the topic already has"
        else:
            why = f"the modelled threshold of {fmt(threshold)} ({basis})"
        return decision(APPROVED, f"Approved: {fmt(requested)} is within {why}.")

    exaggerated = requested > policy.exaggeration * threshold
    # threshold is 0 only when a policy sets a zero floor and there is no traffic at all.
    times = f"{_number(requested / threshold)}x" if threshold > 0 else "infinitely many times"

    samples = len(demand.usage)
    if samples < policy.min_samples:
        history = (
            f"there {'is' if samples == 1 else 'are'} only {samples} usage sample{'' if samples == 1 else 's'} "
            f"(at least {policy.min_samples} are needed), so no traffic history backs the request"
        )
        if exaggerated:
            return decision(
                REJECTED,
                f"Rejected: {fmt(requested)} is far above the automatic limit of {fmt(threshold)} "
                "with no traffic history to back it.",
                (
                    _sentence(history),
                    _sentence(
                        f"the request is {times} the automatic limit of {fmt(threshold)}, "
                        f"more than the {_number(policy.exaggeration)}x allowed without history"
                    ),
                ),
            )
        return decision(
            PENDING,
            f"Pending review: {fmt(requested)} is above the automatic limit of {fmt(threshold)} and "
            f"{history}; an administrator will decide.",
        )

    backed_by_growth = growth >= policy.growth_backing
    found: list[str] = []
    if exaggerated and not backed_by_growth:
        found.append(
            f"the request is {times} the modelled threshold of {fmt(threshold)} ({basis}), more than the "
            f"{_number(policy.exaggeration)}x allowed when traffic is not growing by at least "
            f"{_percent(policy.growth_backing)}"
        )
    # Growth excuses low use: a tenant ramping up has not filled its quota yet.
    if allotted > 0 and peak < policy.low_utilization * allotted and not backed_by_growth:
        found.append(
            f"{at_peak}, only {_percent(peak / allotted)} of the current {fmt(allotted)}, "
            f"is below the {_percent(policy.low_utilization)} that would show the limit is used"
        )
    # Shrinking alone is no reason to reject (the peak still has to fit), but it strengthens the others.
    # The same margin as for growth keeps sampling noise from being reported as a decline.
    if found and growth <= -policy.growth_backing and growth < 0:
        found.append(f"traffic is shrinking: the recent peak is {_percent(-growth)} below the earlier one")
    if found:
        return decision(
            REJECTED,
            f"Rejected: {fmt(requested)} is above the modelled threshold of {fmt(threshold)} "
            "and real use does not support it.",
            tuple(_sentence(problem) for problem in found),
        )

    if backed_by_growth:
        backing = f"traffic grew {_signed_percent(growth)} from the earlier to the recent half of the history"
    elif allotted > 0:
        backing = f"{at_peak}, {_percent(peak / allotted)} of the current {fmt(allotted)}"
    else:
        backing = f"it is within {_number(policy.exaggeration)}x of that threshold"
    return decision(
        PENDING,
        f"Pending review: {fmt(requested)} is above the modelled threshold of {fmt(threshold)} ({basis}), "
        f"but {backing}, so an administrator will decide.",
    )


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."
