"""Segment file names: every state a segment goes through parses back to itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fencing import SegmentName

offsets = st.integers(min_value=0, max_value=10**20 - 1)
epochs = st.integers(min_value=1, max_value=10**10 - 1)


@given(base=offsets, epoch=epochs, size=st.integers(min_value=0, max_value=2**40), span=st.integers(0, 10**6))
def test_open_moved_aside_and_sealed_names_round_trip(base: int, epoch: int, size: int, span: int) -> None:
    opened = SegmentName(base, epoch)
    moved = opened.move_aside()
    sealed = moved.seal(min(base + span, 10**20 - 1), size)
    assert [SegmentName.parse(str(name)) for name in (opened, moved, sealed)] == [opened, moved, sealed]
    assert str(opened).endswith(".log") and str(moved).endswith(".sealing") and str(sealed).endswith(".sealed")
    assert not opened.sealed and not moved.sealed and sealed.sealed
    assert not sealed.moved_aside  # a sealed name is the same whoever sealed it


def test_other_names_are_not_segments() -> None:
    for name in ["_epoch", "00000000000000000000.0000000001.tmp", "0.1.log", "00000000000000000000.0000000001.logx"]:
        assert SegmentName.parse(name) is None
