"""An expected ZooKeeper session loss is not logged by kazoo as an ERROR traceback (server.coordination.kazoo_logs)."""

from __future__ import annotations

import logging
import sys

from kazoo.exceptions import SessionExpiredError
from kazoo.retry import RetryFailedError

from server.coordination.kazoo_logs import KazooConnectionLogs


def record(name: str, level: int, message: str, error: BaseException | None = None) -> logging.LogRecord:
    exc_info = None
    if error is not None:
        try:
            raise error
        except BaseException:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, level, __file__, 1, message, None, exc_info)


def test_a_watch_that_fails_with_the_session_gone_is_one_info_line_without_a_traceback() -> None:
    try:
        try:
            raise SessionExpiredError()
        except SessionExpiredError:
            raise RetryFailedError("Too many retry attempts") from None
    except RetryFailedError as exc:
        error: BaseException = exc
    logged = record("kazoo.handlers.threading", logging.ERROR, "Exception in worker queue thread", error)
    logging.getLogger("kazoo").setLevel(logging.INFO)
    try:
        assert KazooConnectionLogs().filter(logged)
    finally:
        logging.getLogger("kazoo").setLevel(logging.WARNING)
    assert logged.levelno == logging.INFO and logged.exc_info is None
    assert "ZooKeeper connection or session lost" in logged.getMessage()
    # at the server's level for kazoo (WARNING) it is not shown at all: the server's own WARNING says it
    again = record("kazoo.handlers.threading", logging.ERROR, "Exception in worker queue thread", SessionExpiredError())
    assert not KazooConnectionLogs().filter(again)


def test_kazoos_connection_state_warnings_are_demoted_and_other_records_pass() -> None:
    dropped = record("kazoo.client", logging.WARNING, "Connection dropped: socket connection broken")
    assert not KazooConnectionLogs().filter(dropped)
    unexpected = record("kazoo.client", logging.ERROR, "something else", ValueError("bug"))
    assert KazooConnectionLogs().filter(unexpected) and unexpected.exc_info is not None
    ours = record("talos.cluster", logging.ERROR, "ours", SessionExpiredError())
    assert KazooConnectionLogs().filter(ours) and ours.levelno == logging.ERROR
