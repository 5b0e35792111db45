"""The four connectors under a campaign fault: one ``talos connect run`` in the clients' namespace, beside
``talos verify``, hosting an HDFS source (lines appended to files on the campaign's HDFS → topic A), an HDFS
sink and an Elasticsearch sink (topic A → files, an index) and an Elasticsearch source (an index being
filled → topic B). Input keeps arriving until the fault has healed; then, once the connectors have caught
up (or a timeout), the runner is stopped with SIGTERM and each target is checked against its input:
``lost`` (input missing from the target), ``duplicates`` (input there more than once) and ``stalled_s``
(the longest stretch, sampled every 0.5 s from the runner's status, in which the connector wrote nothing
while it had work: input it had not carried yet).
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from hdfs import InsecureClient
from opensearchpy import OpenSearch

from connectors.hdfs.files import parse_file_name
from server.devservices import wait_until
from talos import Admin, Consumer, Message
from tests.connectors.conftest import ConnectProcess
from tests.netfaults.cluster import SERVERS, TOKEN, NetCluster

__all__ = ["CONNECTORS", "ConnectorsUnderFault"]

HDFS_SOURCE, HDFS_SINK, ES_SINK, ES_SOURCE = "hdfs-source", "hdfs-sink", "elasticsearch-sink", "elasticsearch-source"
CONNECTORS = (HDFS_SOURCE, HDFS_SINK, ES_SINK, ES_SOURCE)
PARTITIONS_A = 6  # topic A; re-made under a new name until the three servers each own some
PARTITIONS_B = 2
FEED_EVERY_S = 0.2
PER_S = 50  # lines and documents a second: about 3,500 of each per fault
SEED = 200  # lines and documents there before the runner starts
SAMPLE_S = 0.5


class ConnectorsUnderFault:
    """Topics, input, the runner and its observers of one fault. ``start`` before the fault, ``stop_feeding``
    once it healed, ``finish`` for the outcome per connector; ``close`` (also on failure) stops every thread
    and the runner by PID."""

    def __init__(self, cluster: NetCluster, search_url: str, workdir: Path) -> None:
        self.cluster = cluster
        self.url = cluster.servers["s1"].url  # the entry server talos verify uses
        self.workdir = workdir
        self.search_url = search_url
        self.hdfs = InsecureClient(cluster.hdfs.webhdfs_url, timeout=10)
        self.search = OpenSearch(hosts=[search_url], timeout=30)
        stamp = int(time.time() * 1000)
        self.name = f"nfc{stamp}"
        self.topic_a = ""
        self.topic_b = f"{self.name}-b"
        self.owners_a: dict[int, str] = {}
        self.in_dir = f"/netfaults-in/{self.name}"
        self.sink_dir = f"/netfaults-sink/{self.name}"
        self.index_in = f"{self.name}-in"
        self.index_out = f"{self.name}-out"
        self.runner: ConnectProcess | None = None
        self.lines_written = 0  # appends that returned; those that failed may be there too (checked at the end)
        self.documents_written = 0
        self.feed_failures = 0
        self._sequence = 0
        self._steps = 0
        self._made: set[str] = set()
        self._stop_feeding = threading.Event()
        self._stop_sampling = threading.Event()
        self._threads: list[threading.Thread] = []
        self.samples: list[tuple[float, dict[str, int]]] = []

    # ---------------------------------------------------------------- before the fault

    def start(self, timeout: float = 60.0) -> None:
        """Topics, seeded input, the runner; returns once every connector has written something."""
        self._make_topics()
        self.hdfs.makedirs(self.in_dir)
        self.search.indices.create(index=self.index_in, body={"mappings": {"properties": {"ts": {"type": "long"}}}})
        self._append_lines(SEED)
        self._add_documents(SEED)
        self.runner = ConnectProcess(self.workdir, self.url, self._config())
        with mock.patch.dict(os.environ, {"TALOS_TOKEN": TOKEN}):  # the runner's SDK clients send it
            self.runner.start(wait=False)
        wait_until(
            lambda: all(n > 0 for n in self._progress().values()),
            timeout=timeout,
            what="every connector to write something",
            interval=0.2,
        )
        for target in (self._feed_lines, self._feed_documents, self._sample):
            thread = threading.Thread(target=target, name=f"netfaults-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _make_topics(self) -> None:
        with Admin(self.url, token=TOKEN) as admin:
            for attempt in range(10):
                topic = f"{self.name}-a{attempt}"
                admin.create_topic(topic, partitions=PARTITIONS_A)
                owners = self._routes(topic)
                if set(owners.values()) == set(SERVERS):
                    self.topic_a, self.owners_a = topic, owners
                    break
            else:
                raise AssertionError(f"no topic of {PARTITIONS_A} partitions spread over {SERVERS} in 10 tries")
            admin.create_topic(self.topic_b, partitions=PARTITIONS_B)

    def _routes(self, topic: str) -> dict[int, str]:
        owners: dict[int, str] = {}

        def routed() -> bool:
            owners.update(self.cluster.owners(topic))
            return len(owners) == PARTITIONS_A

        wait_until(routed, timeout=30, what=f"routes of {topic}", interval=0.2)
        return owners

    def _config(self) -> dict[str, Any]:
        namenode = self.cluster.hdfs.webhdfs_url
        return {
            "status_interval_s": 5,
            "connectors": [
                {
                    "name": f"{self.name}-{HDFS_SOURCE}",
                    "type": HDFS_SOURCE,
                    "topic": self.topic_a,
                    "config": {"namenode": namenode, "path": self.in_dir, "format": "text", "poll_ms": 200},
                },
                {
                    "name": f"{self.name}-{HDFS_SINK}",
                    "type": HDFS_SINK,
                    "topics": [self.topic_a],
                    # Files roll every second, so the catch-up wait sees the last records in place.
                    "config": {"namenode": namenode, "path": self.sink_dir, "roll_ms": 1000},
                },
                {
                    "name": f"{self.name}-{ES_SINK}",
                    "type": ES_SINK,
                    "topics": [self.topic_a],
                    "config": {"hosts": [self.search_url], "index": self.index_out, "flush_ms": 500},
                },
                {
                    "name": f"{self.name}-{ES_SOURCE}",
                    "type": ES_SOURCE,
                    "topic": self.topic_b,
                    "config": {
                        "hosts": [self.search_url],
                        "index": self.index_in,
                        "timestamp_field": "ts",
                        "follow": True,
                        "poll_ms": 200,
                    },
                },
            ],
        }

    # ---------------------------------------------------------------- input, while the fault is on

    def _append_lines(self, count: int) -> None:
        """``count`` new lines (each unique, also across failed tries) at the end of one of the files, or
        in a new file now and then."""
        step = self._steps
        self._steps += 1
        file = f"new-{step}.log" if step % 50 == 49 else f"app-{step % 4}.log"
        lines = [f"{self.name} {file} {self._sequence + i}" for i in range(count)]
        self._sequence += count
        path = posixpath.join(self.in_dir, file)
        exists = path in self._made or self.hdfs.status(path, strict=False) is not None
        self.hdfs.write(path, data="".join(f"{line}\n" for line in lines), append=exists, overwrite=not exists)
        self._made.add(path)
        self.lines_written += count

    def _add_documents(self, count: int) -> None:
        lines = []
        for _ in range(count):
            n = self.documents_written
            self.documents_written += 1
            lines.append(orjson.dumps({"index": {"_index": self.index_in, "_id": f"doc-{n}"}}))
            lines.append(orjson.dumps({"ts": 1_700_000_000_000 + n // 3, "n": n}))  # ties: three per timestamp
        answer = self.search.bulk(body=b"\n".join(lines) + b"\n", refresh=True)
        assert not answer["errors"], answer

    def _feed_lines(self) -> None:
        last = time.monotonic()
        while not self._stop_feeding.wait(FEED_EVERY_S):
            # As many lines as the time since the last append asks for: a slow append (a delaying link)
            # is followed by a larger one, so every fault gets about the same input.
            now = time.monotonic()
            try:
                self._append_lines(max(1, min(1000, round((now - last) * PER_S))))
                last = now
            except Exception:  # the HDFS links may be delayed or lossy too; what did land is read back later
                self.feed_failures += 1

    def _feed_documents(self) -> None:
        while not self._stop_feeding.wait(FEED_EVERY_S):
            self._add_documents(round(FEED_EVERY_S * PER_S))  # a local search server, out of every fault's reach

    def stop_feeding(self) -> None:
        self._stop_feeding.set()
        for thread in self._threads[:2]:
            thread.join(60)

    # ---------------------------------------------------------------- progress

    def _progress(self) -> dict[str, int]:
        """Records (and, for sources, records found already written) per connector, from the runner."""
        assert self.runner is not None and self.runner.process is not None
        self.runner.process.check_alive()
        totals = dict.fromkeys(CONNECTORS, 0)
        for task in self.runner.tasks():
            kind = str(task["connector"]).removeprefix(f"{self.name}-")
            totals[kind] += int(task["records"]) + (int(task["skipped"]) if kind.endswith("-source") else 0)
        return totals

    def _sample(self) -> None:
        while not self._stop_sampling.wait(SAMPLE_S):
            try:
                self.samples.append((time.monotonic(), self._progress()))
            except OSError:  # the status endpoint is local; a missed sample only coarsens the measure
                continue

    def stalled_s(self) -> dict[str, float]:
        """Per connector, the longest time between samples in which it had work and wrote nothing. Work: for
        the sources, input written that they have not carried yet; for the sinks, records the HDFS source
        wrote to topic A beyond what the sink wrote (an estimate: a sink's rewrites count as written)."""
        longest = dict.fromkeys(CONNECTORS, 0.0)
        since: dict[str, float] = {}
        previous: dict[str, int] = {}
        for moment, progress in self.samples:
            backlog = {
                HDFS_SOURCE: self.lines_written - progress[HDFS_SOURCE],
                ES_SOURCE: self.documents_written - progress[ES_SOURCE],
                HDFS_SINK: progress[HDFS_SOURCE] - progress[HDFS_SINK],
                ES_SINK: progress[HDFS_SOURCE] - progress[ES_SINK],
            }
            for kind in CONNECTORS:
                if progress[kind] > previous.get(kind, -1) or backlog[kind] <= 0:
                    since[kind] = moment
                longest[kind] = max(longest[kind], moment - since[kind])
                previous[kind] = progress[kind]
        return {kind: round(value, 1) for kind, value in longest.items()}

    # ---------------------------------------------------------------- after the fault

    def finish(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the targets hold as much as their inputs (at most ``timeout``), stop the runner with
        SIGTERM, and compare each target with its input."""
        assert self.runner is not None
        lines = self._lines_in_files()
        documents = self._documents_in_index()
        began = time.monotonic()
        caught_up = False
        while not caught_up and time.monotonic() - began < timeout:
            try:
                caught_up = self._caught_up(len(lines), len(documents))
            except Exception:  # a target or Talos still recovering: asked again
                caught_up = False
            if not caught_up:
                time.sleep(0.5)
        catch_up_s = time.monotonic() - began
        self._stop_sampling.set()
        self._threads[2].join(10)
        tasks = {str(t["connector"]).removeprefix(f"{self.name}-"): _brief(t) for t in self.runner.tasks()}
        exit_code = self.runner.terminate(timeout=120)
        logs = self.runner.logs()
        records_a = self._read_topic(self.topic_a)
        records_b = self._read_topic(self.topic_b)
        stalled = self.stalled_s()
        outcome = {
            HDFS_SOURCE: _compare(lines, [(m.value or b"").decode() for m in records_a.values()]),
            ES_SOURCE: _compare(documents, [(m.key or b"").decode() for m in records_b.values()]),
            HDFS_SINK: _compare(_ids(records_a), self._offsets_in_files()),
            ES_SINK: _compare(_ids(records_a), self._offsets_in_index()),
        }
        for kind, result in outcome.items():
            result["stalled_s"] = stalled[kind]
        return {
            "connectors": outcome,
            "connectors_caught_up": caught_up,
            "connectors_catch_up_s": round(catch_up_s, 1),
            "connectors_exit_code": exit_code,
            "connectors_feed_failures": self.feed_failures,
            "connectors_topic_a": self.topic_a,
            "connectors_owners_a": {str(p): o for p, o in sorted(self.owners_a.items())},
            "connectors_owners_b": {str(p): o for p, o in sorted(self.cluster.owners(self.topic_b).items())},
            "connectors_status": tasks,
            "connectors_log": _excerpt(logs),
        }

    def _caught_up(self, lines: int, documents: int) -> bool:
        ends = self._ends(self.topic_a)
        total_a = sum(ends.values())
        return (
            total_a >= lines
            and sum(self._ends(self.topic_b).values()) >= documents
            and self._visible_in_files() >= total_a
            and self._count(self.index_out) >= total_a
        )

    def _ends(self, topic: str) -> dict[int, int]:
        with Admin(self.url, token=TOKEN, timeout=10) as admin:
            return {p.partition: p.latest or 0 for p in admin.describe_topic(topic).partition_offsets}

    def _read_topic(self, topic: str) -> dict[tuple[int, int], Message]:
        total = sum(self._ends(topic).values())
        found: dict[tuple[int, int], Message] = {}
        deadline = time.monotonic() + 60
        with Consumer(self.url, topics=[topic], token=TOKEN) as consumer:
            while len(found) < total and time.monotonic() < deadline:
                for message in consumer.poll(timeout=1.0):
                    found[(message.partition, message.offset)] = message
        assert len(found) == total, f"read {len(found)} of the {total} records of {topic}"
        return found

    def _lines_in_files(self) -> list[str]:
        """Every complete line in the source directory: the HDFS source's input (a failed append may have
        landed; the files, not the feeder, say what is there)."""
        out: list[str] = []
        for file in self.hdfs.list(self.in_dir):
            with self.hdfs.read(posixpath.join(self.in_dir, file)) as reader:
                data: bytes = reader.read()
            out += data.decode().split("\n")[:-1]  # a last line without its newline is not for reading yet
        return out

    def _hits(self, index: str) -> Iterator[dict[str, Any]]:
        """Every document of ``index``, by id, page after page (``search_after``)."""
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {"size": 1000, "sort": [{"_id": "asc"}], "query": {"match_all": {}}}
            if after:
                body["search_after"] = after
            hits = self.search.search(index=index, body=body)["hits"]["hits"]
            if not hits:
                return
            yield from hits
            after = hits[-1]["sort"]

    def _documents_in_index(self) -> list[str]:
        return [hit["_id"] for hit in self._hits(self.index_in)]

    def _file_ranges(self) -> list[tuple[str, int, int, int]]:
        out = []
        for partition in range(PARTITIONS_A):
            directory = posixpath.join(self.sink_dir, self.topic_a, str(partition))
            for file in self.hdfs.list(directory) if self.hdfs.status(directory, strict=False) else []:
                parsed = parse_file_name(file)
                assert parsed is not None, f"a file the HDFS sink does not name: {directory}/{file}"
                out.append((posixpath.join(directory, file), *parsed[1:]))
        return out

    def _visible_in_files(self) -> int:
        return sum(last - first + 1 for _, _, first, last in self._file_ranges())

    def _offsets_in_files(self) -> list[str]:
        """The (partition, offset) of every line in the sink's files, read back; a file whose lines do not
        match the range in its name counts its lines, so a gap or an overlap shows either way."""

        def read(path: str) -> list[str]:
            with self.hdfs.read(path) as reader:
                data: bytes = reader.read()
            return [f"{row['partition']}:{row['offset']}" for row in map(orjson.loads, data.splitlines())]

        with ThreadPoolExecutor(4) as pool:
            files = list(pool.map(read, [path for path, *_ in self._file_ranges()]))
        return [offset for rows in files for offset in rows]

    def _count(self, index: str) -> int:
        options = {"ignore_unavailable": "true", "allow_no_indices": "true"}
        self.search.indices.refresh(index=index, params=options)
        return int(self.search.count(index=index, params=options)["count"])

    def _offsets_in_index(self) -> list[str]:
        """``<partition>:<offset>`` of every document in the sink's index, by its id ``<topic>-<p>-<o>``."""
        self.search.indices.refresh(index=self.index_out)
        ids: list[str] = []
        for hit in self._hits(self.index_out):
            partition, offset = hit["_id"].removeprefix(f"{self.topic_a}-").split("-")
            assert hit["_source"]["talos"]["offset"] == int(offset), hit
            ids.append(f"{partition}:{offset}")
        return ids

    def close(self) -> None:
        self._stop_feeding.set()
        self._stop_sampling.set()
        for thread in self._threads:
            thread.join(60)
        if self.runner is not None:
            self.runner.close()


def _ids(records: dict[tuple[int, int], Message]) -> list[str]:
    return [f"{p}:{o}" for p, o in records]


def _compare(expected: list[str], found: list[str]) -> dict[str, Any]:
    """``lost``: expected items not found; ``duplicates``: extra copies found (of any item); ``unexpected``:
    found items that were never input."""
    counts = Counter(found)
    wanted = set(expected)
    lost = [item for item in wanted if item not in counts]
    return {
        "expected": len(wanted),
        "found": len(found),
        "lost": len(lost),
        "duplicates": sum(n - 1 for n in counts.values()),
        "unexpected": sum(n for item, n in counts.items() if item not in wanted),
        "examples_lost": sorted(lost)[:5],
        "examples_duplicated": sorted(item for item, n in counts.items() if n > 1)[:5],
    }


def _brief(task: dict[str, Any]) -> dict[str, Any]:
    """A task's state, restarts and last error, from the runner's status before it stopped."""
    return {key: task.get(key) for key in ("state", "records", "skipped", "restarts", "error")}


def _excerpt(logs: str, lines: int = 40) -> list[str]:
    """The runner's log lines (not its periodic status lines, which start with the time alone), the last
    ``lines``: retries, refusals, fencing, standby, unavailable partitions."""
    logged = [line for line in logs.splitlines() if line[:4].isdigit() and line[4:5] == "-"]
    return logged[-lines:]
