"""The message schemas of the transaction APIs: the producer's (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit), the coordinator's markers (WriteTxnMarkers) and the admin views (DescribeProducers,
DescribeTransactions, ListTransactions).

Transcribed, as ``messages.py`` is, from Apache Kafka's message definitions
(``clients/src/main/resources/common/message/*.json``, here the Kafka 4.x copy shipped with kafka-python 3.0;
Apache License 2.0): field names in snake_case, version ranges, nullable versions and defaults as the JSON gives
them. Fields that exist only outside the served versions are left out (EndTxn v5's producer id and epoch,
WriteTxnMarkers v2's transaction version, ListTransactions v2's transactional id pattern). ``ApiSchema.versions``
is the range served here, within the JSON's ``validVersions``: no KIP-890 part 2 version (EndTxn 5) and none that
only adds an error code (AddPartitionsToTxn 5, AddOffsetsToTxn 4, TxnOffsetCommit 4 and 5).
"""

from __future__ import annotations

from server.kafka.protocol.schema import ApiSchema, Field

__all__ = ["TXN_APIS"]

# AddPartitionsToTxn's common structs: the same topic list and topic result serve the client form (versions 0-3)
# and the batched broker-to-coordinator form (4+).
_ADD_PARTITIONS_TOPIC = (
    Field("name", "string", "0+"),
    Field("partitions", "[]int32", "0+"),
)

_ADD_PARTITIONS_TOPIC_RESULT = (
    Field("name", "string", "0+"),
    Field(
        "results_by_partition",
        "[]AddPartitionsToTxnPartitionResult",
        "0+",
        fields=(
            Field("partition_index", "int32", "0+"),
            Field("partition_error_code", "int16", "0+"),
        ),
    ),
)


ADD_PARTITIONS_TO_TXN = ApiSchema(
    api_key=24,
    name="AddPartitionsToTxn",
    versions=(0, 4),
    flexible_versions="3+",
    request=(
        Field(
            "transactions",
            "[]AddPartitionsToTxnTransaction",
            "4+",
            fields=(
                Field("transactional_id", "string", "4+"),
                Field("producer_id", "int64", "4+"),
                Field("producer_epoch", "int16", "4+"),
                Field("verify_only", "bool", "4+", default="false"),
                Field("topics", "[]AddPartitionsToTxnTopic", "4+", fields=_ADD_PARTITIONS_TOPIC),
            ),
        ),
        Field("v3_and_below_transactional_id", "string", "0-3"),
        Field("v3_and_below_producer_id", "int64", "0-3"),
        Field("v3_and_below_producer_epoch", "int16", "0-3"),
        Field("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", fields=_ADD_PARTITIONS_TOPIC),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "4+"),
        Field(
            "results_by_transaction",
            "[]AddPartitionsToTxnResult",
            "4+",
            fields=(
                Field("transactional_id", "string", "4+"),
                Field("topic_results", "[]AddPartitionsToTxnTopicResult", "4+", fields=_ADD_PARTITIONS_TOPIC_RESULT),
            ),
        ),
        Field(
            "results_by_topic_v3_and_below",
            "[]AddPartitionsToTxnTopicResult",
            "0-3",
            fields=_ADD_PARTITIONS_TOPIC_RESULT,
        ),
    ),
)


ADD_OFFSETS_TO_TXN = ApiSchema(
    api_key=25,
    name="AddOffsetsToTxn",
    versions=(0, 3),
    flexible_versions="3+",
    request=(
        Field("transactional_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("group_id", "string", "0+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
    ),
)


END_TXN = ApiSchema(
    api_key=26,
    name="EndTxn",
    versions=(0, 4),
    flexible_versions="3+",
    request=(
        Field("transactional_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("committed", "bool", "0+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
    ),
)


WRITE_TXN_MARKERS = ApiSchema(
    api_key=27,
    name="WriteTxnMarkers",
    versions=(1, 1),
    flexible_versions="1+",
    request=(
        Field(
            "markers",
            "[]WritableTxnMarker",
            "0+",
            fields=(
                Field("producer_id", "int64", "0+"),
                Field("producer_epoch", "int16", "0+"),
                Field("transaction_result", "bool", "0+"),
                Field(
                    "topics",
                    "[]WritableTxnMarkerTopic",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field("partition_indexes", "[]int32", "0+"),
                    ),
                ),
                Field("coordinator_epoch", "int32", "0+"),
            ),
        ),
    ),
    response=(
        Field(
            "markers",
            "[]WritableTxnMarkerResult",
            "0+",
            fields=(
                Field("producer_id", "int64", "0+"),
                Field(
                    "topics",
                    "[]WritableTxnMarkerTopicResult",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field(
                            "partitions",
                            "[]WritableTxnMarkerPartitionResult",
                            "0+",
                            fields=(
                                Field("partition_index", "int32", "0+"),
                                Field("error_code", "int16", "0+"),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


TXN_OFFSET_COMMIT = ApiSchema(
    api_key=28,
    name="TxnOffsetCommit",
    versions=(0, 3),
    flexible_versions="3+",
    request=(
        Field("transactional_id", "string", "0+"),
        Field("group_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("generation_id", "int32", "3+", default="-1"),
        Field("member_id", "string", "3+", default=""),
        Field("group_instance_id", "string", "3+", nullable_versions="3+", default="null"),
        Field(
            "topics",
            "[]TxnOffsetCommitRequestTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]TxnOffsetCommitRequestPartition",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("committed_offset", "int64", "0+"),
                        Field("committed_leader_epoch", "int32", "2+", default="-1"),
                        Field("committed_metadata", "string", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "topics",
            "[]TxnOffsetCommitResponseTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]TxnOffsetCommitResponsePartition",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("error_code", "int16", "0+"),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_PRODUCERS = ApiSchema(
    api_key=61,
    name="DescribeProducers",
    versions=(0, 0),
    flexible_versions="0+",
    request=(
        Field(
            "topics",
            "[]TopicRequest",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("partition_indexes", "[]int32", "0+"),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "topics",
            "[]TopicResponse",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]PartitionResponse",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("error_code", "int16", "0+"),
                        Field("error_message", "string", "0+", nullable_versions="0+", default="null"),
                        Field(
                            "active_producers",
                            "[]ProducerState",
                            "0+",
                            fields=(
                                Field("producer_id", "int64", "0+"),
                                Field("producer_epoch", "int32", "0+"),
                                Field("last_sequence", "int32", "0+", default="-1"),
                                Field("last_timestamp", "int64", "0+", default="-1"),
                                Field("coordinator_epoch", "int32", "0+"),
                                Field("current_txn_start_offset", "int64", "0+", default="-1"),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_TRANSACTIONS = ApiSchema(
    api_key=65,
    name="DescribeTransactions",
    versions=(0, 0),
    flexible_versions="0+",
    request=(Field("transactional_ids", "[]string", "0+"),),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "transaction_states",
            "[]TransactionState",
            "0+",
            fields=(
                Field("error_code", "int16", "0+"),
                Field("transactional_id", "string", "0+"),
                Field("transaction_state", "string", "0+"),
                Field("transaction_timeout_ms", "int32", "0+"),
                Field("transaction_start_time_ms", "int64", "0+"),
                Field("producer_id", "int64", "0+"),
                Field("producer_epoch", "int16", "0+"),
                Field(
                    "topics",
                    "[]TopicData",
                    "0+",
                    fields=(
                        Field("topic", "string", "0+"),
                        Field("partitions", "[]int32", "0+"),
                    ),
                ),
            ),
        ),
    ),
)


LIST_TRANSACTIONS = ApiSchema(
    api_key=66,
    name="ListTransactions",
    versions=(0, 1),
    flexible_versions="0+",
    request=(
        Field("state_filters", "[]string", "0+"),
        Field("producer_id_filters", "[]int64", "0+"),
        Field("duration_filter", "int64", "1+", default="-1"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
        Field("unknown_state_filters", "[]string", "0+"),
        Field(
            "transaction_states",
            "[]TransactionState",
            "0+",
            fields=(
                Field("transactional_id", "string", "0+"),
                Field("producer_id", "int64", "0+"),
                Field("transaction_state", "string", "0+"),
            ),
        ),
    ),
)


TXN_APIS: tuple[ApiSchema, ...] = (
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
)
