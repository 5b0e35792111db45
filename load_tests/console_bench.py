"""How fast the operations console's pages answer with a realistic catalog: one ``talos standalone`` (auth on)
holding 1,000 topics, 200 consumer groups with committed offsets and 100 connectors (made paused: their tasks do
not run), the portal signed in as the admin.

    .venv/bin/python load_tests/console_bench.py [--topics 1000] [--partitions 1] [--groups 200]
                                                 [--connectors 100] [--requests 20] [--limit-ms 300] [--threads 16]

Setup goes through the REST API from ``--threads`` threads at once (topics created, one message produced to each
topic a group reads, each group's offset committed without a member), so it takes seconds, not minutes. Then the
bench signs in to ``/portal/login`` as the login form does (the sign-in page's nonce, from its cookie, posted
back with the token) and times ``--requests`` GETs, one after another on one kept-alive connection, of
``/portal/topics``, ``/portal/groups``, ``/portal/connectors``, ``/portal/cluster``, one topic's page, one
group's page and one connector's page. It prints
each page's median and p95 and whether the p95 is under ``--limit-ms``. A page the server does not serve (404:
not built yet) is reported as "not served" instead of failing the run. The server is stopped by PID at the end.

Times are the whole request seen from the client on loopback (the page's work and its rendering, plus HTTP).
Run it with ``nice -n 19`` on a shared machine; the figures are then an upper bound.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import secrets
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from server.devservices import StandaloneServer

ADMIN_TOKEN = f"console-bench-{secrets.token_urlsafe(16)}"
AUTH = {"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"}


def topic_name(index: int) -> str:
    return f"bench-{index:04d}"


def group_name(index: int) -> str:
    return f"bench-group-{index:03d}"


def call(url: str, method: str = "GET", body: object | None = None) -> tuple[int, bytes]:
    """A REST call as the admin; the status and body, also of an error."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=AUTH, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def checked(url: str, method: str, body: object, what: str) -> None:
    status, answer = call(url, method, body)
    if status >= 300 and not (status == 409 and method == "POST" and url.endswith("/v1/topics")):
        raise RuntimeError(f"{what}: {status} {answer[:300]!r}")


def connector_name(index: int) -> str:
    return f"bench-connector-{index:04d}"


def populate(base: str, topics: int, partitions: int, groups: int, connectors: int, threads: int) -> None:
    """Topics, then groups: each group reads two topics (a message in each) and commits offset 1 on both; then
    connectors, each an HDFS sink of one topic, made paused (no HDFS is needed: their tasks never start)."""
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda i: checked(
                    f"{base}/v1/topics", "POST", {"name": topic_name(i), "partitions": partitions}, "create topic"
                ),
                range(topics),
            )
        )
        print(f"{topics} topics created in {time.monotonic() - started:.1f} s", flush=True)
        read = sorted({(2 * g + k) % topics for g in range(groups) for k in (0, 1)})
        message = {"messages": [{"value": "console-bench", "partition": 0}]}
        list(
            pool.map(lambda i: checked(f"{base}/v1/topics/{topic_name(i)}/messages", "POST", message, "produce"), read)
        )

        def commit(g: int) -> None:
            offsets = [{"topic": topic_name((2 * g + k) % topics), "partition": 0, "offset": 1} for k in (0, 1)]
            checked(f"{base}/v1/groups/{group_name(g)}/offsets", "POST", {"offsets": offsets}, "commit")

        list(pool.map(commit, range(groups)))

        def make(c: int) -> None:
            config = {"connector.class": "hdfs-sink", "topics": topic_name(c % topics), "tasks.max": "2"}
            config.update(namenode="http://127.0.0.1:9", path=f"/bench/{c}")
            body = {"name": connector_name(c), "config": config, "initial_state": "PAUSED"}
            checked(f"{base}/connectors", "POST", body, "make a connector")

        list(pool.map(make, range(connectors)))
    status, body = call(f"{base}/v1/groups")
    listed = len([g for g in json.loads(body)["groups"] if str(g).startswith("bench-group-")]) if status == 200 else 0
    if listed != groups:
        raise RuntimeError(f"GET /v1/groups lists {listed} of the {groups} groups committed")
    done = time.monotonic() - started
    print(f"... and {groups} groups with committed offsets, {connectors} connectors, {done:.1f} s in all", flush=True)


class Portal:
    """A signed-in admin browsing the portal over one kept-alive connection (cookies kept by hand)."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, bytes]:
        headers = {"cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else {}
        if body is not None:
            headers["content-type"] = "application/x-www-form-urlencoded"
        self.connection.request(method, path, body=body, headers=headers)
        answer = self.connection.getresponse()
        data = answer.read()
        for header in answer.headers.get_all("set-cookie") or []:
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0]
            if value and "max-age=0" not in header.lower() and "expires=thu, 01 jan 1970" not in header.lower():
                self.cookies[name.strip()] = value
            else:
                self.cookies.pop(name.strip(), None)
        return answer.status, data

    def sign_in(self, token: str) -> None:
        """As the login form: the page sets its nonce in a cookie and in the form; both go back with the token."""
        status, page = self.request("GET", "/portal/login")
        found = re.search(rb'name="csrf" value="([^"]+)"', page)
        if status != 200 or found is None:
            raise RuntimeError(f"the sign-in page: {status}, nonce {'found' if found else 'missing'}")
        status, answer = self.request("POST", "/portal/login", urlencode({"csrf": found[1].decode(), "token": token}))
        if status != 303 or "talos_portal" not in " ".join(self.cookies):
            raise RuntimeError(f"sign-in refused: {status} {answer[:300]!r}")


@dataclass
class Timing:
    page: str
    status: int
    times_ms: list[float]

    def row(self, limit_ms: float) -> str:
        if self.status == 404:
            return f"{self.page:<32} {'not served':>10}"
        if self.status != 200:
            return f"{self.page:<32} {'HTTP ' + str(self.status):>10}"
        ordered = sorted(self.times_ms)
        median = statistics.median(ordered)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        verdict = "yes" if p95 < limit_ms else "NO"
        return f"{self.page:<32} {median:>10.1f} {p95:>10.1f} {verdict:>12}"


def time_page(portal: Portal, path: str, requests: int) -> Timing:
    status, _ = portal.request("GET", path)  # warm-up (and: is it served at all?)
    if status != 200:
        return Timing(path, status, [])
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        status, _ = portal.request("GET", path)
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            return Timing(path, status, times)
    return Timing(path, 200, times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1, help="per topic")
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--connectors", type=int, default=100, help="made paused")
    parser.add_argument("--requests", type=int, default=20, help="timed GETs per page")
    parser.add_argument("--limit-ms", type=float, default=300.0, help="the p95 a page should stay under")
    parser.add_argument("--threads", type=int, default=16, help="for the setup's REST calls")
    args = parser.parse_args()
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory(prefix="console-bench-") as work:
        server = StandaloneServer(Path(work) / "data", env=env)
        try:
            server.start()
            populate(server.url, args.topics, args.partitions, args.groups, args.connectors, args.threads)
            portal = Portal(server.url)
            portal.sign_in(ADMIN_TOKEN)
            pages = [
                "/portal/topics",
                "/portal/groups",
                "/portal/connectors",
                "/portal/cluster",
                f"/portal/topics/{topic_name(0)}",
                f"/portal/groups/{group_name(0)}",
                f"/portal/connectors/{connector_name(0)}",
            ]
            results = [time_page(portal, page, args.requests) for page in pages]
        finally:
            server.stop()
    print(
        f"\n{args.topics} topics x {args.partitions} partition(s), {args.groups} groups, {args.connectors} connectors;"
        f" {args.requests} GETs each"
    )
    print(f"{'page':<32} {'median ms':>10} {'p95 ms':>10} {f'< {args.limit_ms:g} ms':>12}")
    for result in results:
        print(result.row(args.limit_ms))


if __name__ == "__main__":
    main()
