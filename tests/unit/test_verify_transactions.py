"""``talos verify --transactions``' pure analysis: hand-made histories, each with one anomaly the checker must name
(aborted reads, lost committed writes, torn transactions, duplicates, offset conflicts, reads past the last stable
offset, values nobody sent, partitions never settled), and a clean one with none."""

from __future__ import annotations

import json

from talos._verify_transactions import Observation, Transaction, TransactionSummary, analyse

COMMIT_AT = 10.0


Reads = dict[int, list[tuple[int, str]]]


def history() -> tuple[list[Transaction], list[Observation], Reads, Reads]:
    """A clean history over two partitions: t0:0 committed (two partitions), t0:1 aborted, t1:0 committed,
    t1:1 indefinite and committed after all. Offsets count the markers: each transaction's marker follows its
    records in every partition it wrote."""
    committed_a = Transaction("t0", 0, {"t0:0:0": 0, "t0:0:1": 1}, "committed", COMMIT_AT)
    committed_a.acked = {"t0:0:0": (0, 0), "t0:0:1": (1, 0)}
    aborted = Transaction("t0", 1, {"t0:1:0": 0, "t0:1:1": 0}, "aborted")
    aborted.acked = {"t0:1:0": (0, 2), "t0:1:1": (0, 3)}
    committed_b = Transaction("t1", 0, {"t1:0:0": 1}, "committed", COMMIT_AT + 1)
    committed_b.acked = {"t1:0:0": (1, 2)}
    indefinite = Transaction("t1", 1, {"t1:1:0": 0, "t1:1:1": 1}, "indefinite", COMMIT_AT + 2)
    # partition 0: t0:0:0, marker, t0:1:0, t0:1:1, marker (abort), t1:1:0, marker
    # partition 1: t0:0:1, marker, t1:0:0, marker, t1:1:1, marker
    final_committed = {0: [(0, "t0:0:0"), (5, "t1:1:0")], 1: [(0, "t0:0:1"), (2, "t1:0:0"), (4, "t1:1:1")]}
    final_uncommitted = {
        0: [(0, "t0:0:0"), (2, "t0:1:0"), (3, "t0:1:1"), (5, "t1:1:0")],
        1: [(0, "t0:0:1"), (2, "t1:0:0"), (4, "t1:1:1")],
    }
    observed = [
        Observation("r0", 0, 0, "t0:0:0", COMMIT_AT + 0.1),
        Observation("r0", 1, 0, "t0:0:1", COMMIT_AT + 0.1),
        Observation("g1", 1, 2, "t1:0:0", COMMIT_AT + 1.5),
        Observation("r0", 0, 5, "t1:1:0", COMMIT_AT + 3),
        Observation("r0", 0, 0, "t0:0:0", COMMIT_AT + 4),  # read again (a new reader from 0): the same offset
    ]
    return [committed_a, aborted, committed_b, indefinite], observed, final_committed, final_uncommitted


def anomalies(summary: TransactionSummary) -> dict[str, int]:
    return {name: count for name, count in summary.anomalies().items() if count}


def test_a_clean_history_has_no_anomaly() -> None:
    summary = analyse(*history())
    assert anomalies(summary) == {}
    assert summary.ok()
    assert (summary.transactions, summary.committed, summary.aborted, summary.indefinite) == (4, 2, 1, 1)
    assert (summary.values_sent, summary.observed, summary.final_committed, summary.final_uncommitted) == (7, 5, 5, 7)
    assert "torn transactions         0" in summary.render()
    assert json.loads(json.dumps(summary.as_json()))["ok"] is True


def test_an_indefinite_transaction_that_did_not_commit_is_fine_if_wholly_invisible() -> None:
    txns, observed, committed, uncommitted = history()
    committed = {0: committed[0][:1], 1: committed[1][:2]}  # t1:1 never committed
    observed = observed[:3]
    assert analyse(txns, observed, committed, uncommitted).ok()


def test_an_aborted_value_read_committed_is_an_aborted_read() -> None:
    txns, observed, committed, uncommitted = history()
    observed.append(Observation("g0", 0, 2, "t0:1:0", COMMIT_AT + 5))
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"aborted_reads": 1}
    assert "t0:1:0 of aborted t0:1 read at 0/2 by g0" in summary.examples["aborted read"][0]


def test_an_aborted_transaction_in_the_final_read_committed_read_is_aborted_reads_and_not_past_the_lso() -> None:
    txns, observed, committed, uncommitted = history()
    committed[0] = [(0, "t0:0:0"), (2, "t0:1:0"), (3, "t0:1:1"), (5, "t1:1:0")]
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"aborted_reads": 2}


def test_a_committed_value_missing_from_the_final_read_is_lost_and_its_transaction_torn() -> None:
    txns, observed, committed, uncommitted = history()
    committed[1] = [(2, "t1:0:0"), (4, "t1:1:1")]  # t0:0:1 gone
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"lost": 1, "torn": 1}
    assert "t0:0" in summary.examples["lost"][0]
    assert "['t0:0:0'] visible, ['t0:0:1'] not" in summary.examples["torn"][0]


def test_a_committed_transaction_wholly_missing_is_lost_not_torn() -> None:
    txns, observed, committed, uncommitted = history()
    committed[1] = [(0, "t0:0:1"), (4, "t1:1:1")]  # t1:0 (one value) gone
    assert anomalies(analyse(txns, observed, committed, uncommitted)) == {"lost": 1}


def test_part_of_an_indefinite_transaction_is_torn() -> None:
    txns, observed, committed, uncommitted = history()
    committed[1] = committed[1][:2]  # t1:1:1 missing, t1:1:0 visible
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"torn": 1}
    assert summary.examples["torn"][0].startswith("t1:1 (indefinite)")


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    txns, observed, committed, uncommitted = history()
    committed[1].append((5, "t1:0:0"))
    uncommitted[1].append((5, "t1:0:0"))
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"duplicates": 1}
    assert summary.examples["duplicate"] == ["t1:0:0 at [(1, 2), (1, 5)]"]


def test_a_duplicate_seen_only_by_a_reader_while_writing_counts_too() -> None:
    txns, observed, committed, uncommitted = history()
    observed.append(Observation("r1", 1, 3, "t1:0:0", COMMIT_AT + 5))
    summary = analyse(txns, observed, committed, uncommitted)
    assert summary.duplicates == 1
    assert summary.offset_conflicts == 0  # offset 1/3 is a marker: nothing else claims it


def test_an_offset_with_two_values_is_a_conflict_whichever_read_saw_them() -> None:
    txns, observed, committed, uncommitted = history()
    observed.append(Observation("r1", 1, 0, "t1:0:0", COMMIT_AT + 5))  # 1/0 holds t0:0:1 in every other read
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"offset_conflicts": 1, "duplicates": 1}  # (and t1:0:0 is at 1/2 as well)
    assert summary.examples["offset conflict"] == ["1/0: t0:0:1 (r0), t1:0:0 (r1)"]


def test_an_acknowledgement_disagreeing_with_the_log_is_a_conflict() -> None:
    txns, observed, committed, uncommitted = history()
    txns[2].acked["t1:0:0"] = (1, 0)  # acknowledged at 1/0, which holds t0:0:1
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"offset_conflicts": 1}
    assert "the acknowledgement to t1" in summary.examples["offset conflict"][0]


def test_an_acknowledgement_without_an_offset_claims_nothing() -> None:
    txns, observed, committed, uncommitted = history()
    txns[2].acked["t1:0:0"] = (1, -1)
    assert analyse(txns, observed, committed, uncommitted).ok()


def test_a_value_read_committed_before_its_commit_was_asked_for_is_past_the_lso() -> None:
    txns, observed, committed, uncommitted = history()
    observed.append(Observation("g0", 1, 2, "t1:0:0", COMMIT_AT + 0.5))  # committed at COMMIT_AT + 1
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"past_lso": 1}
    assert "0.500s before its commit" in summary.examples["past the LSO"][0]


def test_an_indefinite_value_read_committed_that_never_committed_is_past_the_lso() -> None:
    txns, observed, committed, uncommitted = history()
    committed = {0: committed[0][:1], 1: committed[1][:2]}  # t1:1 did not commit, yet r0 saw t1:1:0
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"past_lso": 1}
    assert "indefinite, never committed" in summary.examples["past the LSO"][0]


def test_a_value_nobody_sent_is_unknown() -> None:
    txns, observed, committed, uncommitted = history()
    uncommitted[1].append((6, "garbage"))
    summary = analyse(txns, observed, committed, uncommitted)
    assert anomalies(summary) == {"unknown": 1}


def test_an_unsettled_partition_is_reported() -> None:
    summary = analyse(*history(), unsettled=["partition 1: last stable offset 3 below its end 5"])
    assert anomalies(summary) == {"unsettled": 1}
    assert not summary.ok()
    assert "unsettled: partition 1" in summary.render()


def test_examples_are_bounded() -> None:
    txns = [Transaction("t0", n, {f"t0:{n}:0": 0}, "aborted") for n in range(50)]
    observed = [Observation("r0", 0, n, f"t0:{n}:0", 1.0) for n in range(50)]
    summary = analyse(txns, observed, {0: []}, {0: [(n, f"t0:{n}:0") for n in range(50)]})
    assert summary.aborted_reads == 50
    assert len(summary.examples["aborted read"]) == 10
