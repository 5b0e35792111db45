"""The JSON produce body's parser: its shortcut for the common call (one message, a text value) gives what the
general path gives, errors included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.errors import ApiError
from server.http.messages import _parse_messages


def _parsed(doc: object, limit: int) -> object:
    try:
        return _parse_messages(doc, limit)
    except ApiError as exc:
        return (exc.status, exc.code)


@given(value=st.text(max_size=40), limit=st.integers(0, 100))
def test_one_text_message_parses_as_the_general_path_does(value: str, limit: int) -> None:
    shortcut = {"messages": [{"value": value}]}
    general = {"messages": [{"value": value}], "acks": "durable"}  # a second key: the loop parses it
    assert _parsed(shortcut, limit) == _parsed(general, limit)


@pytest.mark.parametrize(
    "doc",
    [
        {"messages": [{"value": 5}]},
        {"messages": [{"key": "k"}]},
        {"messages": [[]]},
        {"messages": []},
        {"messages": {"value": "x"}},
    ],
)
def test_other_shapes_of_one_message_go_on_to_the_general_checks(doc: object) -> None:
    with pytest.raises(ApiError):
        _parse_messages(doc, 100)
