"""Talos: a message queue with compute separated from storage.

The public SDK. Implementation lives in private modules; everything a user needs is re-exported here::

    from talos import Admin, Producer, Consumer            # and AsyncAdmin, AsyncProducer, AsyncConsumer

The rooms: the clients (``_admin``; ``_producer`` with ``_send_planning``, ``_accumulator``, ``_sender``,
``_idempotence``, ``_window`` and ``_futures``; ``_consumer`` with ``_fetcher``, ``_consumer_state``,
``_group_coordinator`` and ``_group``), each written once for both ways of waiting (``_clients``: the blocking and
asyncio kinds; ``_steps``: behaviour as generators of requests and pauses); addressing (``_routing``,
``_partitioning``); the wire (``_transport``, ``_codec``, ``_errors``, ``_names``); ``talos verify``
(``_verify``); the command line (``cli/``).

Client-only: ``pip install talos-mq`` brings what these modules and the client commands import (click, orjson,
websockets, aiohttp, urllib3, crc32c, cramjam). Imports no other package of this repository at module level
(``server`` with its local services ``server.devservices``, ``connectors`` and ``metering`` only inside the CLI
commands that need them, which first check that their extra is installed: ``talos.cli._extras``), and no
third-party package beyond those; ``import talos`` loads no ``cli``.
"""

from __future__ import annotations

from talos._admin import DEFAULT_URL, Admin, AsyncAdmin, PartitionInfo, ProducerIdentity, TopicInfo
from talos._codec import (
    HEADER_SIZE,
    BatchHeader,
    DecodedBatch,
    Record,
    RecordData,
    crc32c,
    decode_batches,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    validate_batch,
    verify_batch,
)
from talos._consumer import AsyncConsumer, Consumer
from talos._errors import (
    ApiError,
    AuthenticationError,
    BatchError,
    CommitFailedError,
    ConflictError,
    CorruptBatchError,
    InvalidRequestError,
    MisdirectedError,
    NotFoundError,
    OffsetOutOfRangeError,
    PermissionDeniedError,
    ProducerFencedError,
    QuotaExceededError,
    TalosError,
    TransactionError,
    TransactionStateError,
    TransportError,
    TruncatedBatchError,
    UnavailableError,
)
from talos._fetcher import Message
from talos._futures import RecordFuture, RecordMetadata, RecordsFuture
from talos._partitioning import SLOTS, partition_for_key, slot_for_key, slot_range
from talos._producer import AsyncProducer, Producer, ProducerClosedError
from talos._subscriber import AsyncSubscriber, SubscribedMessage, Subscriber, SubscriberOptions
from talos._tls import TLS
from talos._transport import AiohttpTransport, AsyncFunctionTransport, FunctionTransport, Response, Urllib3Transport

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "HEADER_SIZE",
    "SLOTS",
    "TLS",
    "Admin",
    "AiohttpTransport",
    "ApiError",
    "AuthenticationError",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncFunctionTransport",
    "AsyncProducer",
    "AsyncSubscriber",
    "BatchError",
    "BatchHeader",
    "DecodedBatch",
    "CommitFailedError",
    "ConflictError",
    "Consumer",
    "CorruptBatchError",
    "FunctionTransport",
    "InvalidRequestError",
    "Message",
    "NotFoundError",
    "OffsetOutOfRangeError",
    "PartitionInfo",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProducerIdentity",
    "PermissionDeniedError",
    "QuotaExceededError",
    "Record",
    "RecordData",
    "RecordFuture",
    "RecordsFuture",
    "RecordMetadata",
    "SubscribedMessage",
    "Subscriber",
    "SubscriberOptions",
    "Response",
    "TalosError",
    "TopicInfo",
    "TransactionError",
    "TransactionStateError",
    "TransportError",
    "TruncatedBatchError",
    "MisdirectedError",
    "UnavailableError",
    "Urllib3Transport",
    "__version__",
    "crc32c",
    "decode_batches",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "partition_for_key",
    "read_header",
    "set_base_offset",
    "slot_for_key",
    "slot_range",
    "validate_batch",
    "verify_batch",
]
