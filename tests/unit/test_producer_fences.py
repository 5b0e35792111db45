"""Fences in the pure producer state, and when the SDK takes a PRODUCER_FENCED as the end of its instance."""

from __future__ import annotations

import pytest

from server.errors import ApiError
from server.partition.producers import Append, ProducerStates
from talos import ProducerFencedError, RecordData, encode_batch, read_header
from talos._errors import api_error
from talos._idempotence import fenced_by_another as _fenced_by_another


def header(epoch: int, sequence: int, count: int = 1) -> object:
    return read_header(
        encode_batch([RecordData(b"x")] * count, producer_id=7, producer_epoch=epoch, base_sequence=sequence)
    )


def test_a_fence_refuses_older_epochs_on_a_partition_the_new_epoch_never_wrote() -> None:
    states = ProducerStates()
    states.record(header(0, 0), 0)  # type: ignore[arg-type]
    states.fence(7, 1)
    with pytest.raises(ApiError) as fenced:
        states.check(header(0, 1))  # type: ignore[arg-type]
    assert fenced.value.code == "PRODUCER_FENCED"
    assert fenced.value.details == {"producer_epoch": 0, "current_epoch": 1}
    assert isinstance(states.check(header(1, 0)), Append)  # the new epoch starts at sequence 0
    states.fence(7, 0)  # an older fence changes nothing
    assert states.epoch_of(7) == 1


def test_an_epoch_only_batch_is_fenced_when_stale_and_never_deduplicated() -> None:
    states = ProducerStates()
    states.fence(7, 2)
    with pytest.raises(ApiError):
        states.check(header(1, -1))  # type: ignore[arg-type]
    assert isinstance(states.check(header(2, -1)), Append)
    states.record(header(3, -1), 5)  # type: ignore[arg-type]
    assert states.epoch_of(7) == 3


def answer(current: int) -> ProducerFencedError:
    body = {"error": {"code": "PRODUCER_FENCED", "message": "m", "producer_epoch": 0, "current_epoch": current}}
    error = api_error(409, body)
    assert isinstance(error, ProducerFencedError)
    return error


def test_the_sdk_is_finished_only_when_another_instance_holds_a_newer_epoch() -> None:
    assert _fenced_by_another(answer(current=3), epoch=2)  # someone else's epoch: stop for good
    assert not _fenced_by_another(answer(current=2), epoch=2)  # its own newer epoch fenced an old batch
    assert _fenced_by_another(api_error(409, {"error": {"code": "PRODUCER_FENCED", "message": "m"}}), epoch=2)  # type: ignore[arg-type]


def test_a_batch_keeps_the_epoch_its_sequence_was_given_in() -> None:
    """Resent under a newer epoch, a batch's old sequence would name another batch of that epoch, whose
    offsets the partition would answer with: an acknowledgement pointing at someone else's records."""
    from talos._accumulator import PendingBatch
    from talos._idempotence import Idempotence

    idempotence = Idempotence(7, 1)
    old = PendingBatch("t", 0, created=0.0)
    old.records.append(RecordData(b"a"))
    assert idempotence.fields(old) == {"producer_id": 7, "producer_epoch": 1, "base_sequence": 0}
    idempotence.restart(2)  # a gap elsewhere: a new epoch, sequences from 0 again
    new = PendingBatch("t", 0, created=0.0)
    new.records.append(RecordData(b"b"))
    assert idempotence.fields(new) == {"producer_id": 7, "producer_epoch": 2, "base_sequence": 0}
    assert idempotence.fields(old) == {"producer_id": 7, "producer_epoch": 1, "base_sequence": 0}  # a resend
