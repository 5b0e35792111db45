"""The SDK's exceptions.

Tree::

    TalosError
     ├── BatchError                   a record batch cannot be used
     │    ├── CorruptBatchError       bad magic, CRC mismatch, impossible lengths or fields
     │    └── TruncatedBatchError     the buffer ends inside the batch (a torn write)
     ├── TransportError               the server could not be reached or did not answer in time (retriable)
     ├── TransactionStateError        a transaction call out of turn, or a commit of a failed transaction
     └── ApiError                     the server answered with an error: .status .code .message .retriable
          ├── InvalidRequestError     400, 413: fix the request
          ├── AuthenticationError     401: no token, or not a valid one
          ├── PermissionDeniedError   403: the token's tenant may not do this
          ├── NotFoundError           404: unknown topic or partition
          ├── ConflictError           409: e.g. the topic exists
          │    ├── CommitFailedError  409: the member no longer holds the partition (revoked, lock expired)
          │    ├── ProducerFencedError 409: a newer instance of this producer id took over (fatal for it)
          │    └── TransactionError   409: the transaction cannot go on (not in it, decided): abort it
          ├── OffsetOutOfRangeError   416: .earliest .latest
          ├── QuotaExceededError      429: .retry_after seconds (retriable; not for a partition count quota)
          └── UnavailableError        500, 503: partition moving, storage failing (retriable)
               └── MisdirectedError   421: another server owns the partition: .owner_url
"""

from __future__ import annotations

__all__ = [
    "ApiError",
    "AuthenticationError",
    "PermissionDeniedError",
    "ProducerFencedError",
    "BatchError",
    "CommitFailedError",
    "ConflictError",
    "CorruptBatchError",
    "InvalidRequestError",
    "NotFoundError",
    "OffsetOutOfRangeError",
    "QuotaExceededError",
    "TalosError",
    "TransactionError",
    "TransactionStateError",
    "TransportError",
    "TruncatedBatchError",
    "MisdirectedError",
    "UnavailableError",
    "api_error",
]


class TalosError(Exception):
    """Base class of every error Talos raises."""


class BatchError(TalosError):
    """A record batch cannot be used."""


class CorruptBatchError(BatchError):
    """The batch's bytes are damaged: bad magic, CRC mismatch, impossible lengths or fields."""


class TruncatedBatchError(BatchError):
    """The buffer ends inside the batch, as after a torn write."""


class TransportError(TalosError):
    """The server could not be reached, or did not answer in time. Retriable."""

    retriable = True


class ApiError(TalosError):
    """The server answered with an error."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retriable: bool = False,
        details: dict[str, object] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retriable = retriable
        self.details = details or {}
        self.retry_after = retry_after


class InvalidRequestError(ApiError):
    """400 or 413: the request is wrong and will stay wrong."""


class AuthenticationError(ApiError):
    """401: the server requires a bearer token and got none, or one it does not know (revoked?)."""


class PermissionDeniedError(ApiError):
    """403: the token's tenant may not do this (another tenant's topic, an admin endpoint)."""


class NotFoundError(ApiError):
    """404: unknown topic or partition."""


class ConflictError(ApiError):
    """409: the change conflicts with what exists (e.g. the topic exists)."""


class CommitFailedError(ConflictError):
    """409: a commit was refused because this member no longer holds the partition (it was revoked, or its
    lock expired) or is no longer in the group. The messages will be delivered again to the next holder."""


class TransactionStateError(TalosError):
    """A transaction call out of turn (a send or commit with no transaction open, a second begin), or a commit
    of a transaction one of whose messages was not stored: abort it."""


class TransactionError(ConflictError):
    """409 ``INVALID_TXN_STATE`` or ``INVALID_PRODUCER_ID_MAPPING``: the transaction cannot go on (a partition
    outside it, already decided, the id moved on): abort it, or start the producer again."""


class ProducerFencedError(ConflictError):
    """409 ``PRODUCER_FENCED``: a newer epoch of this producer id exists (another instance claimed it), so
    this instance may write nothing more. A producer that gets it fails every later send with it too."""


class OffsetOutOfRangeError(ApiError):
    """416: the offset is outside the partition's ``[earliest, latest]``."""

    @property
    def earliest(self) -> int:
        return int(str(self.details.get("earliest", 0)))

    @property
    def latest(self) -> int:
        return int(str(self.details.get("latest", 0)))


class QuotaExceededError(ApiError):
    """429: over quota; retry after :attr:`retry_after` seconds."""


class UnavailableError(ApiError):
    """421, 500, 503: the partition is moving or the storage is failing. Retriable."""


class MisdirectedError(UnavailableError):
    """421: the request went straight to a server that does not own the partition (client-side addressing)."""

    @property
    def owner_url(self) -> str | None:
        url = self.details.get("owner_url")
        return url if isinstance(url, str) else None


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequestError,
    413: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    416: OffsetOutOfRangeError,
    429: QuotaExceededError,
    421: MisdirectedError,
    500: UnavailableError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
}


def api_error(status: int, body: dict[str, object] | None, retry_after: float | None = None) -> ApiError:
    """The exception for an error response (``{"error": {"code", "message", "retriable", ...}}``)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"HTTP_{status}", "message": "error response without a Talos error body"}
    kind = _BY_STATUS.get(status, ApiError)
    if error.get("code") == "PRODUCER_FENCED":
        kind = ProducerFencedError
    elif error.get("code") in ("INVALID_TXN_STATE", "INVALID_PRODUCER_ID_MAPPING"):
        kind = TransactionError
    retriable = bool(error.get("retriable", kind in (UnavailableError, QuotaExceededError)))
    details = {k: v for k, v in error.items() if k not in ("code", "message", "retriable")}
    return kind(
        status,
        str(error.get("code")),
        str(error.get("message")),
        retriable=retriable,
        details=details,
        retry_after=retry_after,
    )
