"""kazoo's own logging of a ZooKeeper connection loss, made what an operator can act on.

A lost connection or session is expected (a pause, a network cut, a ZooKeeper restart) and this server
says so itself in one WARNING line (``server.cluster``). kazoo also logs it: "Connection dropped",
"Transition to CONNECTING", "Session has expired" as warnings, and, when a watch's re-read fails with the
session gone, a traceback from its worker thread at ERROR level, although nothing is wrong once the session
is back. This filter turns those into single INFO lines without a traceback; anything else kazoo logs
passes unchanged.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.retry import RetryFailedError

__all__ = ["EXPECTED_ZOOKEEPER_ERRORS", "KazooConnectionLogs", "install"]

#: What a ZooKeeper call raises while the connection or session is being lost or re-made.
EXPECTED_ZOOKEEPER_ERRORS = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, RetryFailedError)

_STATE_MESSAGES = ("Connection dropped", "Transition to CONNECTING", "Session has expired", "Connection time-out")


class KazooConnectionLogs(logging.Filter):
    """On a handler: kazoo's records of an expected loss become INFO (shown only if kazoo logs at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kazoo"):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, EXPECTED_ZOOKEEPER_ERRORS) or _caused_by_expected(error):
            record.msg = f"{record.getMessage()} ({error!r}: ZooKeeper connection or session lost)"
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        elif record.levelno == logging.WARNING and str(record.msg).startswith(_STATE_MESSAGES):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return record.levelno >= logging.getLogger(record.name).getEffectiveLevel()


def _caused_by_expected(error: BaseException | None) -> bool:
    seen = 0
    while error is not None and seen < 5:
        if isinstance(error, EXPECTED_ZOOKEEPER_ERRORS):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def install() -> None:
    """Filter kazoo's records on the root logger's handlers (kazoo logs under ``kazoo.*``, and a filter on a
    parent logger does not see its children's records)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(KazooConnectionLogs())
