"""The message schemas of the Kafka APIs the listener serves, request and response, for the versions it serves.

Transcribed from Apache Kafka's message definitions (``clients/src/main/resources/common/message/*.json``
at the 3.8.0 release; Apache License 2.0): field names in snake_case, version ranges, nullable versions,
tags and defaults as the JSON gives them. Fields that exist only outside the served versions are left out.
``ApiSchema.versions`` is the range served here, always within the JSON's ``validVersions``. The admin APIs
(configs, partitions, records, group deletion, the cluster) are in ``admin_messages.py``, the transaction
APIs in ``txn_messages.py``.
"""

from __future__ import annotations

from server.kafka.protocol.admin_messages import ADMIN_APIS
from server.kafka.protocol.schema import ApiSchema, Field
from server.kafka.protocol.txn_messages import TXN_APIS

__all__ = ["APIS"]

PRODUCE = ApiSchema(
    api_key=0,
    name="Produce",
    versions=(3, 9),
    flexible_versions="9+",
    request=(
        Field("transactional_id", "string", "3+", nullable_versions="3+", default="null"),
        Field("acks", "int16", "0+"),
        Field("timeout_ms", "int32", "0+"),
        Field(
            "topic_data",
            "[]TopicProduceData",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partition_data",
                    "[]PartitionProduceData",
                    "0+",
                    fields=(
                        Field("index", "int32", "0+"),
                        Field("records", "records", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        Field(
            "responses",
            "[]TopicProduceResponse",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partition_responses",
                    "[]PartitionProduceResponse",
                    "0+",
                    fields=(
                        Field("index", "int32", "0+"),
                        Field("error_code", "int16", "0+"),
                        Field("base_offset", "int64", "0+"),
                        Field("log_append_time_ms", "int64", "2+", default="-1"),
                        Field("log_start_offset", "int64", "5+", default="-1"),
                        Field(
                            "record_errors",
                            "[]BatchIndexAndErrorMessage",
                            "8+",
                            fields=(
                                Field("batch_index", "int32", "8+"),
                                Field(
                                    "batch_index_error_message", "string", "8+", nullable_versions="8+", default="null"
                                ),
                            ),
                        ),
                        Field("error_message", "string", "8+", nullable_versions="8+", default="null"),
                    ),
                ),
            ),
        ),
        Field("throttle_time_ms", "int32", "1+", default="0"),
    ),
)


FETCH = ApiSchema(
    api_key=1,
    name="Fetch",
    versions=(4, 12),
    flexible_versions="12+",
    request=(
        Field("cluster_id", "string", "12+", nullable_versions="12+", default="null", tag=0, tagged_versions="12+"),
        Field("replica_id", "int32", "0-14", default="-1"),
        Field("max_wait_ms", "int32", "0+"),
        Field("min_bytes", "int32", "0+"),
        Field("max_bytes", "int32", "3+", default="0x7fffffff"),
        Field("isolation_level", "int8", "4+", default="0"),
        Field("session_id", "int32", "7+", default="0"),
        Field("session_epoch", "int32", "7+", default="-1"),
        Field(
            "topics",
            "[]FetchTopic",
            "0+",
            fields=(
                Field("topic", "string", "0-12"),
                Field(
                    "partitions",
                    "[]FetchPartition",
                    "0+",
                    fields=(
                        Field("partition", "int32", "0+"),
                        Field("current_leader_epoch", "int32", "9+", default="-1"),
                        Field("fetch_offset", "int64", "0+"),
                        Field("last_fetched_epoch", "int32", "12+", default="-1"),
                        Field("log_start_offset", "int64", "5+", default="-1"),
                        Field("partition_max_bytes", "int32", "0+"),
                    ),
                ),
            ),
        ),
        Field(
            "forgotten_topics_data",
            "[]ForgottenTopic",
            "7+",
            fields=(
                Field("topic", "string", "7-12"),
                Field("partitions", "[]int32", "7+"),
            ),
        ),
        Field("rack_id", "string", "11+", default=""),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "7+"),
        Field("session_id", "int32", "7+", default="0"),
        Field(
            "responses",
            "[]FetchableTopicResponse",
            "0+",
            fields=(
                Field("topic", "string", "0-12"),
                Field(
                    "partitions",
                    "[]PartitionData",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("error_code", "int16", "0+"),
                        Field("high_watermark", "int64", "0+"),
                        Field("last_stable_offset", "int64", "4+", default="-1"),
                        Field("log_start_offset", "int64", "5+", default="-1"),
                        Field(
                            "diverging_epoch",
                            "EpochEndOffset",
                            "12+",
                            tag=0,
                            tagged_versions="12+",
                            fields=(
                                Field("epoch", "int32", "12+", default="-1"),
                                Field("end_offset", "int64", "12+", default="-1"),
                            ),
                        ),
                        Field(
                            "current_leader",
                            "LeaderIdAndEpoch",
                            "12+",
                            tag=1,
                            tagged_versions="12+",
                            fields=(
                                Field("leader_id", "int32", "12+", default="-1"),
                                Field("leader_epoch", "int32", "12+", default="-1"),
                            ),
                        ),
                        Field(
                            "snapshot_id",
                            "SnapshotId",
                            "12+",
                            tag=2,
                            tagged_versions="12+",
                            fields=(
                                Field("end_offset", "int64", "0+", default="-1"),
                                Field("epoch", "int32", "0+", default="-1"),
                            ),
                        ),
                        Field(
                            "aborted_transactions",
                            "[]AbortedTransaction",
                            "4+",
                            nullable_versions="4+",
                            fields=(
                                Field("producer_id", "int64", "4+"),
                                Field("first_offset", "int64", "4+"),
                            ),
                        ),
                        Field("preferred_read_replica", "int32", "11+", default="-1"),
                        Field("records", "records", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
    ),
)


LIST_OFFSETS = ApiSchema(
    api_key=2,
    name="ListOffsets",
    versions=(1, 7),
    flexible_versions="6+",
    request=(
        Field("replica_id", "int32", "0+"),
        Field("isolation_level", "int8", "2+"),
        Field(
            "topics",
            "[]ListOffsetsTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]ListOffsetsPartition",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("current_leader_epoch", "int32", "4+", default="-1"),
                        Field("timestamp", "int64", "0+"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "2+"),
        Field(
            "topics",
            "[]ListOffsetsTopicResponse",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]ListOffsetsPartitionResponse",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("error_code", "int16", "0+"),
                        Field("timestamp", "int64", "1+", default="-1"),
                        Field("offset", "int64", "1+", default="-1"),
                        Field("leader_epoch", "int32", "4+", default="-1"),
                    ),
                ),
            ),
        ),
    ),
)


METADATA = ApiSchema(
    api_key=3,
    name="Metadata",
    versions=(0, 12),
    flexible_versions="9+",
    request=(
        Field(
            "topics",
            "[]MetadataRequestTopic",
            "0+",
            nullable_versions="1+",
            fields=(
                Field("topic_id", "uuid", "10+"),
                Field("name", "string", "0+", nullable_versions="10+"),
            ),
        ),
        Field("allow_auto_topic_creation", "bool", "4+", default="true"),
        Field("include_cluster_authorized_operations", "bool", "8-10"),
        Field("include_topic_authorized_operations", "bool", "8+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "brokers",
            "[]MetadataResponseBroker",
            "0+",
            fields=(
                Field("node_id", "int32", "0+"),
                Field("host", "string", "0+"),
                Field("port", "int32", "0+"),
                Field("rack", "string", "1+", nullable_versions="1+", default="null"),
            ),
        ),
        Field("cluster_id", "string", "2+", nullable_versions="2+", default="null"),
        Field("controller_id", "int32", "1+", default="-1"),
        Field(
            "topics",
            "[]MetadataResponseTopic",
            "0+",
            fields=(
                Field("error_code", "int16", "0+"),
                Field("name", "string", "0+", nullable_versions="12+"),
                Field("topic_id", "uuid", "10+"),
                Field("is_internal", "bool", "1+", default="false"),
                Field(
                    "partitions",
                    "[]MetadataResponsePartition",
                    "0+",
                    fields=(
                        Field("error_code", "int16", "0+"),
                        Field("partition_index", "int32", "0+"),
                        Field("leader_id", "int32", "0+"),
                        Field("leader_epoch", "int32", "7+", default="-1"),
                        Field("replica_nodes", "[]int32", "0+"),
                        Field("isr_nodes", "[]int32", "0+"),
                        Field("offline_replicas", "[]int32", "5+"),
                    ),
                ),
                Field("topic_authorized_operations", "int32", "8+", default="-2147483648"),
            ),
        ),
        Field("cluster_authorized_operations", "int32", "8-10", default="-2147483648"),
    ),
)


OFFSET_COMMIT = ApiSchema(
    api_key=8,
    name="OffsetCommit",
    versions=(0, 8),
    flexible_versions="8+",
    request=(
        Field("group_id", "string", "0+"),
        Field("generation_id_or_member_epoch", "int32", "1+", default="-1"),
        Field("member_id", "string", "1+"),
        Field("group_instance_id", "string", "7+", nullable_versions="7+", default="null"),
        Field("retention_time_ms", "int64", "2-4", default="-1"),
        Field(
            "topics",
            "[]OffsetCommitRequestTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]OffsetCommitRequestPartition",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("committed_offset", "int64", "0+"),
                        Field("committed_leader_epoch", "int32", "6+", default="-1"),
                        Field("commit_timestamp", "int64", "1", default="-1"),
                        Field("committed_metadata", "string", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "topics",
            "[]OffsetCommitResponseTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]OffsetCommitResponsePartition",
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


OFFSET_FETCH = ApiSchema(
    api_key=9,
    name="OffsetFetch",
    versions=(0, 7),
    flexible_versions="6+",
    request=(
        Field("group_id", "string", "0-7"),
        Field(
            "topics",
            "[]OffsetFetchRequestTopic",
            "0-7",
            nullable_versions="2-7",
            fields=(
                Field("name", "string", "0-7"),
                Field("partition_indexes", "[]int32", "0-7"),
            ),
        ),
        Field("require_stable", "bool", "7+", default="false"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "topics",
            "[]OffsetFetchResponseTopic",
            "0-7",
            fields=(
                Field("name", "string", "0-7"),
                Field(
                    "partitions",
                    "[]OffsetFetchResponsePartition",
                    "0-7",
                    fields=(
                        Field("partition_index", "int32", "0-7"),
                        Field("committed_offset", "int64", "0-7"),
                        Field("committed_leader_epoch", "int32", "5-7", default="-1"),
                        Field("metadata", "string", "0-7", nullable_versions="0-7"),
                        Field("error_code", "int16", "0-7"),
                    ),
                ),
            ),
        ),
        Field("error_code", "int16", "2-7", default="0"),
    ),
)


FIND_COORDINATOR = ApiSchema(
    api_key=10,
    name="FindCoordinator",
    versions=(0, 4),
    flexible_versions="3+",
    request=(
        Field("key", "string", "0-3"),
        Field("key_type", "int8", "1+", default="0"),
        Field("coordinator_keys", "[]string", "4+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0-3"),
        Field("error_message", "string", "1-3", nullable_versions="1-3"),
        Field("node_id", "int32", "0-3"),
        Field("host", "string", "0-3"),
        Field("port", "int32", "0-3"),
        Field(
            "coordinators",
            "[]Coordinator",
            "4+",
            fields=(
                Field("key", "string", "4+"),
                Field("node_id", "int32", "4+"),
                Field("host", "string", "4+"),
                Field("port", "int32", "4+"),
                Field("error_code", "int16", "4+"),
                Field("error_message", "string", "4+", nullable_versions="4+"),
            ),
        ),
    ),
)


JOIN_GROUP = ApiSchema(
    api_key=11,
    name="JoinGroup",
    versions=(0, 7),
    flexible_versions="6+",
    request=(
        Field("group_id", "string", "0+"),
        Field("session_timeout_ms", "int32", "0+"),
        Field("rebalance_timeout_ms", "int32", "1+", default="-1"),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "5+", nullable_versions="5+", default="null"),
        Field("protocol_type", "string", "0+"),
        Field(
            "protocols",
            "[]JoinGroupRequestProtocol",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("metadata", "bytes", "0+"),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "2+"),
        Field("error_code", "int16", "0+"),
        Field("generation_id", "int32", "0+", default="-1"),
        Field("protocol_type", "string", "7+", nullable_versions="7+", default="null"),
        Field("protocol_name", "string", "0+", nullable_versions="7+"),
        Field("leader", "string", "0+"),
        Field("member_id", "string", "0+"),
        Field(
            "members",
            "[]JoinGroupResponseMember",
            "0+",
            fields=(
                Field("member_id", "string", "0+"),
                Field("group_instance_id", "string", "5+", nullable_versions="5+", default="null"),
                Field("metadata", "bytes", "0+"),
            ),
        ),
    ),
)


HEARTBEAT = ApiSchema(
    api_key=12,
    name="Heartbeat",
    versions=(0, 4),
    flexible_versions="4+",
    request=(
        Field("group_id", "string", "0+"),
        Field("generation_id", "int32", "0+"),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "3+", nullable_versions="3+", default="null"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
    ),
)


LEAVE_GROUP = ApiSchema(
    api_key=13,
    name="LeaveGroup",
    versions=(0, 4),
    flexible_versions="4+",
    request=(
        Field("group_id", "string", "0+"),
        Field("member_id", "string", "0-2"),
        Field(
            "members",
            "[]MemberIdentity",
            "3+",
            fields=(
                Field("member_id", "string", "3+"),
                Field("group_instance_id", "string", "3+", nullable_versions="3+", default="null"),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field(
            "members",
            "[]MemberResponse",
            "3+",
            fields=(
                Field("member_id", "string", "3+"),
                Field("group_instance_id", "string", "3+", nullable_versions="3+"),
                Field("error_code", "int16", "3+"),
            ),
        ),
    ),
)


SYNC_GROUP = ApiSchema(
    api_key=14,
    name="SyncGroup",
    versions=(0, 5),
    flexible_versions="4+",
    request=(
        Field("group_id", "string", "0+"),
        Field("generation_id", "int32", "0+"),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "3+", nullable_versions="3+", default="null"),
        Field("protocol_type", "string", "5+", nullable_versions="5+", default="null"),
        Field("protocol_name", "string", "5+", nullable_versions="5+", default="null"),
        Field(
            "assignments",
            "[]SyncGroupRequestAssignment",
            "0+",
            fields=(
                Field("member_id", "string", "0+"),
                Field("assignment", "bytes", "0+"),
            ),
        ),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field("protocol_type", "string", "5+", nullable_versions="5+", default="null"),
        Field("protocol_name", "string", "5+", nullable_versions="5+", default="null"),
        Field("assignment", "bytes", "0+"),
    ),
)


DESCRIBE_GROUPS = ApiSchema(
    api_key=15,
    name="DescribeGroups",
    versions=(0, 5),
    flexible_versions="5+",
    request=(
        Field("groups", "[]string", "0+"),
        Field("include_authorized_operations", "bool", "3+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "groups",
            "[]DescribedGroup",
            "0+",
            fields=(
                Field("error_code", "int16", "0+"),
                Field("group_id", "string", "0+"),
                Field("group_state", "string", "0+"),
                Field("protocol_type", "string", "0+"),
                Field("protocol_data", "string", "0+"),
                Field(
                    "members",
                    "[]DescribedGroupMember",
                    "0+",
                    fields=(
                        Field("member_id", "string", "0+"),
                        Field("group_instance_id", "string", "4+", nullable_versions="4+", default="null"),
                        Field("client_id", "string", "0+"),
                        Field("client_host", "string", "0+"),
                        Field("member_metadata", "bytes", "0+"),
                        Field("member_assignment", "bytes", "0+"),
                    ),
                ),
                Field("authorized_operations", "int32", "3+", default="-2147483648"),
            ),
        ),
    ),
)


LIST_GROUPS = ApiSchema(
    api_key=16,
    name="ListGroups",
    versions=(0, 4),
    flexible_versions="3+",
    request=(Field("states_filter", "[]string", "4+"),),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field(
            "groups",
            "[]ListedGroup",
            "0+",
            fields=(
                Field("group_id", "string", "0+"),
                Field("protocol_type", "string", "0+"),
                Field("group_state", "string", "4+"),
            ),
        ),
    ),
)


SASL_HANDSHAKE = ApiSchema(
    api_key=17,
    name="SaslHandshake",
    versions=(0, 1),
    flexible_versions="none",
    request=(Field("mechanism", "string", "0+"),),
    response=(
        Field("error_code", "int16", "0+"),
        Field("mechanisms", "[]string", "0+"),
    ),
)


API_VERSIONS = ApiSchema(
    api_key=18,
    name="ApiVersions",
    versions=(0, 3),
    flexible_versions="3+",
    request=(
        Field("client_software_name", "string", "3+"),
        Field("client_software_version", "string", "3+"),
    ),
    response=(
        Field("error_code", "int16", "0+"),
        Field(
            "api_keys",
            "[]ApiVersion",
            "0+",
            fields=(
                Field("api_key", "int16", "0+"),
                Field("min_version", "int16", "0+"),
                Field("max_version", "int16", "0+"),
            ),
        ),
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "supported_features",
            "[]SupportedFeatureKey",
            "3+",
            tag=0,
            tagged_versions="3+",
            fields=(
                Field("name", "string", "3+"),
                Field("min_version", "int16", "3+"),
                Field("max_version", "int16", "3+"),
            ),
        ),
        Field("finalized_features_epoch", "int64", "3+", default="-1", tag=1, tagged_versions="3+"),
        Field(
            "finalized_features",
            "[]FinalizedFeatureKey",
            "3+",
            tag=2,
            tagged_versions="3+",
            fields=(
                Field("name", "string", "3+"),
                Field("max_version_level", "int16", "3+"),
                Field("min_version_level", "int16", "3+"),
            ),
        ),
        Field("zk_migration_ready", "bool", "3+", default="false", tag=3, tagged_versions="3+"),
    ),
)


CREATE_TOPICS = ApiSchema(
    api_key=19,
    name="CreateTopics",
    versions=(0, 7),
    flexible_versions="5+",
    request=(
        Field(
            "topics",
            "[]CreatableTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("num_partitions", "int32", "0+"),
                Field("replication_factor", "int16", "0+"),
                Field(
                    "assignments",
                    "[]CreatableReplicaAssignment",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("broker_ids", "[]int32", "0+"),
                    ),
                ),
                Field(
                    "configs",
                    "[]CreateableTopicConfig",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field("value", "string", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
        Field("timeout_ms", "int32", "0+", default="60000"),
        Field("validate_only", "bool", "1+", default="false"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "2+"),
        Field(
            "topics",
            "[]CreatableTopicResult",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("topic_id", "uuid", "7+"),
                Field("error_code", "int16", "0+"),
                Field("error_message", "string", "1+", nullable_versions="0+"),
                Field("topic_config_error_code", "int16", "5+", tag=0, tagged_versions="5+"),
                Field("num_partitions", "int32", "5+", default="-1"),
                Field("replication_factor", "int16", "5+", default="-1"),
                Field(
                    "configs",
                    "[]CreatableTopicConfigs",
                    "5+",
                    nullable_versions="5+",
                    fields=(
                        Field("name", "string", "5+"),
                        Field("value", "string", "5+", nullable_versions="5+"),
                        Field("read_only", "bool", "5+"),
                        Field("config_source", "int8", "5+", default="-1"),
                        Field("is_sensitive", "bool", "5+"),
                    ),
                ),
            ),
        ),
    ),
)


DELETE_TOPICS = ApiSchema(
    api_key=20,
    name="DeleteTopics",
    versions=(0, 6),
    flexible_versions="4+",
    request=(
        Field(
            "topics",
            "[]DeleteTopicState",
            "6+",
            fields=(
                Field("name", "string", "6+", nullable_versions="6+", default="null"),
                Field("topic_id", "uuid", "6+"),
            ),
        ),
        Field("topic_names", "[]string", "0-5"),
        Field("timeout_ms", "int32", "0+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "responses",
            "[]DeletableTopicResult",
            "0+",
            fields=(
                Field("name", "string", "0+", nullable_versions="6+"),
                Field("topic_id", "uuid", "6+"),
                Field("error_code", "int16", "0+"),
                Field("error_message", "string", "5+", nullable_versions="5+", default="null"),
            ),
        ),
    ),
)


INIT_PRODUCER_ID = ApiSchema(
    api_key=22,
    name="InitProducerId",
    versions=(0, 4),
    flexible_versions="2+",
    request=(
        Field("transactional_id", "string", "0+", nullable_versions="0+"),
        Field("transaction_timeout_ms", "int32", "0+"),
        Field("producer_id", "int64", "3+", default="-1"),
        Field("producer_epoch", "int16", "3+", default="-1"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
        Field("producer_id", "int64", "0+", default="-1"),
        Field("producer_epoch", "int16", "0+"),
    ),
)


SASL_AUTHENTICATE = ApiSchema(
    api_key=36,
    name="SaslAuthenticate",
    versions=(0, 2),
    flexible_versions="2+",
    request=(Field("auth_bytes", "bytes", "0+"),),
    response=(
        Field("error_code", "int16", "0+"),
        Field("error_message", "string", "0+", nullable_versions="0+"),
        Field("auth_bytes", "bytes", "0+"),
        Field("session_lifetime_ms", "int64", "1+", default="0"),
    ),
)


APIS: dict[int, ApiSchema] = {
    PRODUCE.api_key: PRODUCE,
    FETCH.api_key: FETCH,
    LIST_OFFSETS.api_key: LIST_OFFSETS,
    METADATA.api_key: METADATA,
    OFFSET_COMMIT.api_key: OFFSET_COMMIT,
    OFFSET_FETCH.api_key: OFFSET_FETCH,
    FIND_COORDINATOR.api_key: FIND_COORDINATOR,
    JOIN_GROUP.api_key: JOIN_GROUP,
    HEARTBEAT.api_key: HEARTBEAT,
    LEAVE_GROUP.api_key: LEAVE_GROUP,
    SYNC_GROUP.api_key: SYNC_GROUP,
    DESCRIBE_GROUPS.api_key: DESCRIBE_GROUPS,
    LIST_GROUPS.api_key: LIST_GROUPS,
    SASL_HANDSHAKE.api_key: SASL_HANDSHAKE,
    API_VERSIONS.api_key: API_VERSIONS,
    CREATE_TOPICS.api_key: CREATE_TOPICS,
    DELETE_TOPICS.api_key: DELETE_TOPICS,
    INIT_PRODUCER_ID.api_key: INIT_PRODUCER_ID,
    SASL_AUTHENTICATE.api_key: SASL_AUTHENTICATE,
    **{api.api_key: api for api in ADMIN_APIS},
    **{api.api_key: api for api in TXN_APIS},
}
