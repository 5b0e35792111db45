"""KafkaJS (2.2.4, pinned in tests/kafkajs/package.json; ``scripts/install --dev`` installs it with npm), a Kafka
client no one here wrote, against a real ``talos standalone --kafka-port``, each scenario a node script run as a
process owned by PID:

* ``transactions.js``: a transactional producer commits one transaction over 2 partitions and aborts another (then
  commits a last one, after which nothing before it is pending); a read_committed KafkaJS consumer sees exactly the
  committed records, a read_uncommitted one sees the aborted ones too.
* ``groups.js``: two KafkaJS consumers in one group split the 2 partitions; an idempotent KafkaJS producer's
  messages are each read once, by the member holding their partition, and the offsets the members commit on
  leaving are the partitions' ends.

Without node or tests/kafkajs/node_modules the tests are skipped, but not in CI (``CI`` set): there they fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.devservices import ManagedProcess
from talos import Admin
from tests.helpers import KafkaStandalone, running_kafka_standalone

pytestmark = pytest.mark.slow  # a real server and node processes, seconds each

REPO = Path(__file__).parents[2]
SCRIPTS = REPO / "tests" / "kafkajs"
TIMEOUT_S = 90


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (SCRIPTS / "node_modules" / "kafkajs").is_dir():
        return "tests/kafkajs/node_modules has no kafkajs: run scripts/install --dev (npm ci in tests/kafkajs)"
    return None


@pytest.fixture(scope="module")
def node() -> str:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} (CI: the KafkaJS tests must run)")
        pytest.skip(missing)
    node = shutil.which("node")
    assert node is not None
    return node


@pytest.fixture(scope="module")
def kafka(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(tmp_path_factory.mktemp("kafkajs") / "data") as running:
        yield running


def _topic(kafka: KafkaStandalone, partitions: int = 2) -> str:
    name = f"kjs-{uuid.uuid4().hex[:10]}"
    with Admin(kafka.url) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def _run(node: str, script: str, args: list[str], tmp_path: Path) -> Any:
    """``node tests/kafkajs/SCRIPT *args``, owned by PID and killed after TIMEOUT_S; the JSON it printed. Its log
    holds stdout and stderr: KafkaJS's log lines (``LEVEL [namespace] ...``, see common.js), then the answer, the
    one line that starts with ``{``."""
    argv = [node, str(SCRIPTS / script), *args]
    process = ManagedProcess(script, argv, log_path=tmp_path / f"{script}.log", cwd=SCRIPTS)
    process.start()
    try:
        status = process.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"node {script} still running after {TIMEOUT_S} s (killed):\n{process.tail(60)}")
    finally:
        process.stop()
    assert status == 0, f"node {script} exited with {status}:\n{process.tail(60)}"
    answers = [line for line in process.log_path.read_text().splitlines() if line.startswith("{")]
    assert len(answers) == 1, f"node {script} printed no single answer:\n{process.tail(60)}"
    return json.loads(answers[0])


def _values(records: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Partition → the values read from it, in order."""
    out: dict[int, list[str]] = {}
    for record in records:
        out.setdefault(record["partition"], []).append(record["value"])
    return out


def test_a_read_committed_kafkajs_consumer_sees_exactly_the_committed_transaction(
    node: str, kafka: KafkaStandalone, tmp_path: Path
) -> None:
    topic = _topic(kafka)
    answer = _run(node, "transactions.js", [kafka.bootstrap, topic], tmp_path)
    committed = {p: [f"committed-{p}", f"after-{p}"] for p in (0, 1)}
    assert _values(answer["read_committed"]) == committed
    # the aborted records are in the log (read_uncommitted reads them), between the two committed transactions
    assert _values(answer["read_uncommitted"]) == {p: [f"committed-{p}", f"aborted-{p}", f"after-{p}"] for p in (0, 1)}
    # each transaction's records, then its marker: offsets 0, 2, 4 (the markers at 1, 3, 5 are never delivered)
    for record in answer["read_uncommitted"]:
        assert record["offset"] == {"committed": 0, "aborted": 2, "after": 4}[record["value"].split("-")[0]]


def test_kafkajs_idempotent_producer_and_consumer_group(node: str, kafka: KafkaStandalone, tmp_path: Path) -> None:
    topic = _topic(kafka)
    count = 40
    answer = _run(node, "groups.js", [kafka.bootstrap, topic, str(count)], tmp_path)
    assert sorted(p for partitions in answer["assignments"].values() for p in partitions) == [0, 1]
    assert answer["rejoins"] == 0, "the group rebalanced while its members read"
    expected = {p: [f"m-{n}" for n in range(p, count, 2)] for p in (0, 1)}
    for member, records in answer["seen"].items():
        (held,) = answer["assignments"][member]
        assert _values(records) == {held: expected[held]}, f"member {member} holding partition {held}"
        assert [r["offset"] for r in records] == list(range(count // 2))
    assert answer["committed"] == {"0": count // 2, "1": count // 2}
