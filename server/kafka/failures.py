"""What a Talos failure is called in Kafka's error codes. Pure.

The REST code raises :class:`ApiError` with an HTTP status and a stable code; a Kafka client needs one of
Kafka's codes, and its retry behaviour depends on which: ``NOT_LEADER_OR_FOLLOWER`` makes it refresh
metadata and resend (the partition moved: REST's 421/503 ``NOT_OWNER``), ``OUT_OF_ORDER_SEQUENCE_NUMBER``
and ``INVALID_PRODUCER_EPOCH`` are an idempotent producer's, and quota waits that ran out
(429) are a retriable timeout, never a loss.
"""

from __future__ import annotations

from fencing import OffsetOutOfRangeError
from server.errors import ApiError
from server.kafka.protocol.errors import ErrorCode

__all__ = ["admin_error_code", "error_code"]

_BY_CODE: dict[str, ErrorCode] = {
    "UNKNOWN_TOPIC": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "UNKNOWN_PARTITION": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "OFFSET_OUT_OF_RANGE": ErrorCode.OFFSET_OUT_OF_RANGE,
    "OUT_OF_ORDER_SEQUENCE": ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "PRODUCER_FENCED": ErrorCode.INVALID_PRODUCER_EPOCH,
    "UNKNOWN_PRODUCER": ErrorCode.UNKNOWN_PRODUCER_ID,
    "MESSAGE_TOO_LARGE": ErrorCode.MESSAGE_TOO_LARGE,
    "CORRUPT_BATCH": ErrorCode.CORRUPT_MESSAGE,
    "INVALID_RECORD": ErrorCode.INVALID_RECORD,
    "SCHEMA_VALIDATION_FAILED": ErrorCode.INVALID_RECORD,  # as Confluent Server and Redpanda refuse such records
    "NOT_OWNER": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "MISDIRECTED_REQUEST": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "OWNER_UNAVAILABLE": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "OWNER_UNREACHABLE": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "PARTITION_UNAVAILABLE": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "NO_SERVERS": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "TOO_MANY_HOPS": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "STORAGE_ERROR": ErrorCode.KAFKA_STORAGE_ERROR,
    "TOPIC_EXISTS": ErrorCode.TOPIC_ALREADY_EXISTS,
    "INVALID_TOPIC_NAME": ErrorCode.INVALID_TOPIC_EXCEPTION,
    "PARTITION_QUOTA_EXCEEDED": ErrorCode.POLICY_VIOLATION,
    "INVALID_GROUP_NAME": ErrorCode.INVALID_GROUP_ID,
    "UNKNOWN_GROUP": ErrorCode.GROUP_ID_NOT_FOUND,
    "GROUP_NOT_EMPTY": ErrorCode.NON_EMPTY_GROUP,
    "NOT_COORDINATOR": ErrorCode.NOT_COORDINATOR,
    # The transaction coordinator's refusals (``server.transactions.state.TxnErrorCode``) and a partition's. The
    # handlers gate by version what older clients must not see (PRODUCER_FENCED, and Produce's disguises).
    "CONCURRENT_TRANSACTIONS": ErrorCode.CONCURRENT_TRANSACTIONS,
    # A live named producer (a connector task) holds the id's lease: a Kafka client retries this one until it
    # runs out, as it does while the previous transaction completes.
    "PRODUCER_BUSY": ErrorCode.CONCURRENT_TRANSACTIONS,
    "INVALID_TXN_STATE": ErrorCode.INVALID_TXN_STATE,
    "INVALID_PRODUCER_ID_MAPPING": ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    "TRANSACTIONAL_ID_NOT_FOUND": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
    "INVALID_TRANSACTION_TIMEOUT": ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    "TRANSACTION_COORDINATOR_FENCED": ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    "UNSTABLE_OFFSET_COMMIT": ErrorCode.UNSTABLE_OFFSET_COMMIT,
}


def error_code(error: Exception, *, denied: ErrorCode = ErrorCode.TOPIC_AUTHORIZATION_FAILED) -> ErrorCode:
    """The Kafka code of ``error`` (``denied``: what a 403 is about, a topic or a group)."""
    if isinstance(error, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if not isinstance(error, ApiError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    known = _BY_CODE.get(error.code)
    if known is not None:
        return known
    if error.status in (401, 403):
        return denied
    if error.status == 404:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if error.status == 413:
        return ErrorCode.MESSAGE_TOO_LARGE
    if error.status == 429:  # a quota's wait ran out: retriable; admin calls say what it was
        return (
            ErrorCode.REQUEST_TIMED_OUT
            if denied is not ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            else (ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        )
    if error.status == 400:
        return ErrorCode.INVALID_REQUEST
    if error.retriable:
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


def admin_error_code(error: Exception) -> ErrorCode:
    """The Kafka code of a topic admin call's failure (create, delete, alter, more partitions): a setting Talos
    refuses is ``INVALID_CONFIG``, a bad partition count ``INVALID_PARTITIONS``."""
    if isinstance(error, ApiError):
        if error.code == "INVALID_CONFIG":
            return ErrorCode.INVALID_CONFIG
        if error.status == 400 and error.code == "INVALID_REQUEST":
            return ErrorCode.INVALID_PARTITIONS if "partitions" in error.message else ErrorCode.INVALID_REQUEST
    return error_code(error, denied=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
