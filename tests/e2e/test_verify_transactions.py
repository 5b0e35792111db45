"""``talos verify --transactions`` as users run it, against a real standalone server: for 8 s the plain checker
and the transaction checker run side by side (transactional writers committing and aborting over several
partitions, read-committed readers); every anomaly of both must be 0, and both outcomes must have happened."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from server.devservices import StandaloneServer
from talos import Admin
from talos._verify_transactions import TransactionSummary

pytestmark = pytest.mark.slow


def test_verify_transactions_finds_no_anomaly_on_a_standalone_server(server: StandaloneServer) -> None:
    argv = [sys.executable, "-m", "talos.cli", "verify", "--url", server.url, "--topic", "verify-e2e"]
    argv += ["--seconds", "8", "--transactions", "--json"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    print(run.stderr[-3000:])
    report = json.loads(run.stdout.strip().splitlines()[-1])
    txn = report["transactions"]
    print(json.dumps(txn, indent=1)[:3000])
    assert {name: txn[name] for name in TransactionSummary.ANOMALIES} == dict.fromkeys(TransactionSummary.ANOMALIES, 0)
    assert txn["committed"] > 20
    assert txn["aborted"] > 5
    assert txn["values_sent"] == txn["final_uncommitted"]  # every value was stored, aborted ones too
    assert txn["observed"] > 0 and txn["final_committed"] > 0
    assert txn["ok"] and report["ok"] and report["lost"] == 0
    assert run.returncode == 0
    with Admin(server.url) as admin:
        assert admin.describe_topic("verify-e2e-txn").partitions == 6


def test_verify_transactions_prints_its_report_and_exits_0(server: StandaloneServer) -> None:
    argv = [sys.executable, "-m", "talos.cli", "verify", "--url", server.url, "--seconds", "2", "--transactions"]
    argv += ["--transaction-writers", "1", "--writers", "1", "--consumers", "0", "--partitions", "2"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    print(run.stderr[-3000:])
    print(run.stdout)
    assert "-- transactions (verify-" in run.stdout
    for line in ("aborted reads             0", "torn transactions         0", "read past the LSO         0"):
        assert line in run.stdout
    assert run.stdout.strip().endswith("OK")
    assert run.returncode == 0
