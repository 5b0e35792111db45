"""What the security checks cost on the produce path, against real ``talos standalone`` servers on the local disk.

    .venv/bin/python load_tests/auth_bench.py [--seconds 10] [--rounds 3] [--baseline-tree PATH] [--json [FILE]]

Servers, all started first and kept running side by side (idle while another is measured):
- ``off``: auth off (the standalone default);
- ``on``: auth on; a tenant's token on every request, on a topic another tenant owns and granted it ``produce``
  (authentication, the ACL check, the tenant header);
- ``quota``: as ``on``, plus tenant and topic quotas far above the load, so admission runs on every request
  and never limits;
- with ``--baseline-tree PATH`` (a checkout of older code, e.g. a git worktree of the commit before a change):
  ``before-on`` and ``before-quota``, the same two with that tree's server (this venv's Python, the tree first
  on ``PYTHONPATH``). The clients are this tree's in every case, so only the server differs.

Two loads per server, each for ``--seconds``: the SDK ``Producer`` (100 B messages in binary batches over 4
partitions; latency from ``send()`` to the acknowledgement, sampled) and single-message JSON POSTs from ``wrk``
(64 keep-alive connections, durable). The servers take turns round after round (off, on, before-on, quota,
before-quota, off, ...), so drift of this shared machine falls on every case alike; each ratio is the median
of its per-round ratios. Loopback only; every server is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from performance import TOPIC, wrk

from server.devservices import StandaloneServer
from talos import Admin, Producer, RecordFuture

HERE = Path(__file__).resolve().parents[1]
ADMIN = f"bench-{secrets.token_urlsafe(16)}"
PARTITIONS = 4
VALUE_BYTES = 100
LATENCY_SAMPLE = 64  # one send in this many is timed: timing each would slow the client being measured
# (numerator, denominator): the ratios reported; the figure is auth on now over auth on before
COMPARISONS = [("on", "off"), ("quota", "off"), ("on", "before-on"), ("quota", "before-quota")]


@dataclass(frozen=True)
class Case:
    name: str
    tree: Path
    auth: bool
    quota: bool


@dataclass
class Measurement:
    rate: float
    p50_ms: float
    p99_ms: float


@dataclass
class Running:
    case: Case
    url: str
    token: str
    producer: list[Measurement] = field(default_factory=list)
    json: list[Measurement] = field(default_factory=list)


def cases(baseline: Path | None) -> list[Case]:
    """In the order they take turns: the two sides of each ratio next to each other, so that they run
    closest in time."""
    found = [Case("off", HERE, False, False), Case("on", HERE, True, False)]
    if baseline is not None:
        found.append(Case("before-on", baseline, True, False))
    found.append(Case("quota", HERE, True, True))
    if baseline is not None:
        found.append(Case("before-quota", baseline, True, True))
    return found


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that makes ``python -m talos.cli`` run ``tree``'s code. PYTHONSAFEPATH keeps the working
    directory off ``sys.path``; the tree on PYTHONPATH comes before this venv's editable install."""
    if tree == HERE:
        return {}
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def check_tree(tree: Path) -> None:
    """Fail early unless the server modules really load from ``tree`` (a silent fall-back to this tree's code
    would report a ratio of 1 and mean nothing)."""
    probe = "import server, talos.cli; print(server.__file__); print(talos.cli.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **tree_env(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"--baseline-tree {tree}: the server would load {path}, not that tree's code")


def start(case: Case, base: Path, stack: ExitStack) -> Running:
    env = {
        "TALOS_ADMIN_TOKEN": ADMIN,
        "TALOS_AUTH": "on" if case.auth else "off",
        "TALOS_LOG_LEVEL": "warning",
        **tree_env(case.tree),
    }
    server = StandaloneServer(base / case.name / "data", env=env)
    stack.callback(server.stop)
    server.start()
    with Admin(server.url, token=ADMIN) as admin:
        if not case.auth:
            admin.create_topic(TOPIC, partitions=PARTITIONS)
            return Running(case, server.url, "")
        admin.create_tenant("owner")
        admin.create_tenant("bench")
        owner_token = admin.create_token("owner")["token"]
        token = admin.create_token("bench")["token"]
        with Admin(server.url, token=owner_token) as owner:
            owner.create_topic(TOPIC, partitions=PARTITIONS)
            owner.grant(TOPIC, "bench", ["produce"])
        if case.quota:
            admin.set_quota(tenant="bench", produce_bytes_per_s=1e12, requests_per_s=1e9)
            admin.set_quota(topic=TOPIC, produce_bytes_per_s=1e12, requests_per_s=1e9)
    return Running(case, server.url, token)


def stored(running: Running) -> int:
    with Admin(running.url, token=ADMIN) as admin:
        return sum(p.latest or 0 for p in admin.describe_topic(TOPIC).partition_offsets)


def acknowledged(latencies: list[float], sent_at: float, _future: RecordFuture) -> None:
    latencies.append(time.perf_counter() - sent_at)


def produce(running: Running, seconds: float) -> Measurement:
    """The SDK producer sending as fast as it can for ``seconds``, then flushing; checks every message landed."""
    value = b"v" * VALUE_BYTES
    latencies: list[float] = []
    before = stored(running)
    sent = 0
    with Producer(running.url, token=running.token, linger_ms=5) as producer:
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            for _ in range(LATENCY_SAMPLE - 1):
                producer.send(TOPIC, value, partition=sent % PARTITIONS)
                sent += 1
            timed_at = time.perf_counter()
            future = producer.send(TOPIC, value, partition=sent % PARTITIONS)
            sent += 1
            future.add_done_callback(partial(acknowledged, latencies, timed_at))
        producer.flush(timeout=120)
        elapsed = time.perf_counter() - started
    landed = stored(running) - before
    if landed != sent:
        raise RuntimeError(f"{running.case.name}: sent {sent} messages, {landed} were stored")
    latencies.sort()
    return Measurement(
        sent / elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)] * 1000,
    )


def wrk_script(base: Path, running: Running) -> Path:
    script = base / f"{running.case.name}.lua"
    body = json.dumps({"messages": [{"value": "x" * VALUE_BYTES}]})
    lines = ['wrk.method = "POST"', f"wrk.body = '{body}'", 'wrk.headers["Content-Type"] = "application/json"']
    if running.token:
        lines.append(f'wrk.headers["Authorization"] = "Bearer {running.token}"')
    script.write_text("\n".join(lines) + "\n")
    return script


def single(running: Running, base: Path, seconds: float) -> Measurement:
    result = wrk(running.url, seconds, wrk_script(base, running), warm_up=False)
    if "Non-2xx" in str(result["problems"]):
        raise RuntimeError(f"{running.case.name}: wrk got errors: {result['problems']}")
    return Measurement(float(result["rate"]), float(result["p50_ms"]), float(result["p99_ms"]))


def median_ratio(numerator: list[Measurement], denominator: list[Measurement]) -> float:
    return statistics.median(a.rate / b.rate for a, b in zip(numerator, denominator, strict=True))


def ratios(servers: list[Running]) -> dict[str, dict[str, float]]:
    by_name = {s.case.name: s for s in servers}
    return {
        f"{a} / {b}": {
            "producer": median_ratio(by_name[a].producer, by_name[b].producer),
            "json": median_ratio(by_name[a].json, by_name[b].json),
        }
        for a, b in COMPARISONS
        if a in by_name and b in by_name
    }


def medians(runs: list[Measurement]) -> Measurement:
    return Measurement(
        statistics.median(m.rate for m in runs),
        statistics.median(m.p50_ms for m in runs),
        statistics.median(m.p99_ms for m in runs),
    )


def as_json(servers: list[Running]) -> str:
    cases_ = {
        s.case.name: {
            "tree": str(s.case.tree),
            "producer": {"median": asdict(medians(s.producer)), "rounds": [asdict(m) for m in s.producer]},
            "json": {"median": asdict(medians(s.json)), "rounds": [asdict(m) for m in s.json]},
        }
        for s in servers
    }
    return json.dumps({"cases": cases_, "ratios": ratios(servers)}, indent=2)


def table(servers: list[Running], args: argparse.Namespace) -> str:
    out = [
        f"{args.seconds:g} s per load, {args.rounds} rounds, medians; producer: SDK, {VALUE_BYTES} B messages, "
        f"{PARTITIONS} partitions; json: wrk, 64 connections, one message per POST",
        "",
        f"{'case':<13} {'producer msg/s':>15} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'json req/s':>11} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for s in servers:
        p, j = medians(s.producer), medians(s.json)
        out.append(
            f"{s.case.name:<13} {p.rate:>15,.0f} {p.p50_ms:>8.1f} {p.p99_ms:>8.1f} "
            f"{j.rate:>11,.0f} {j.p50_ms:>8.1f} {j.p99_ms:>8.1f}"
        )
    out += ["", f"{'ratio (median of rounds)':<26} {'producer':>9} {'json':>9}"]
    for name, ratio in ratios(servers).items():
        out.append(f"{name:<26} {ratio['producer']:>9.3f} {ratio['json']:>9.3f}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load in each round [10]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every case, taking turns [3]")
    parser.add_argument("--baseline-tree", type=Path, help="a checkout of the code to compare with (auth on)")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="the results as JSON: alone, printed instead of the table; with FILE, written there as well",
    )
    args = parser.parse_args()
    if args.baseline_tree is not None:
        check_tree(args.baseline_tree)
    with tempfile.TemporaryDirectory(prefix="talos-auth-bench-") as scratch, ExitStack() as stack:
        base = Path(scratch)
        servers = []
        for case in cases(args.baseline_tree):
            print(f"starting {case.name} ({case.tree}) ...", file=sys.stderr, flush=True)
            running = start(case, base, stack)
            produce(running, 0.5)  # warm-up: connections, the partitions' first segments, the token cache
            single(running, base, 1)
            servers.append(running)
        for round_ in range(args.rounds):
            for running in servers:
                print(f"round {round_ + 1}/{args.rounds}: {running.case.name} ...", file=sys.stderr, flush=True)
                running.producer.append(produce(running, args.seconds))
                running.json.append(single(running, base, args.seconds))
    if args.json is not None and args.json != "-":
        Path(args.json).write_text(as_json(servers) + "\n")
    print(as_json(servers) if args.json == "-" else table(servers, args))


if __name__ == "__main__":
    main()
