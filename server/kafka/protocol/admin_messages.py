"""The message schemas of the admin APIs the listener serves: configs, partitions, records, groups, the cluster.

Transcribed, as ``messages.py`` is, from Apache Kafka's message definitions
(``clients/src/main/resources/common/message/*.json`` at the 3.8.0 release; Apache License 2.0): field names in
snake_case, version ranges, nullable versions and defaults as the JSON gives them. ``ApiSchema.versions`` is the
range served here, within the JSON's ``validVersions`` at 3.8.0 (DescribeConfigs still has its version 0 there).
"""

from __future__ import annotations

from server.kafka.protocol.schema import ApiSchema, Field

__all__ = ["ADMIN_APIS"]

DELETE_RECORDS = ApiSchema(
    api_key=21,
    name="DeleteRecords",
    versions=(0, 2),
    flexible_versions="2+",
    request=(
        Field(
            "topics",
            "[]DeleteRecordsTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]DeleteRecordsPartition",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("offset", "int64", "0+"),
                    ),
                ),
            ),
        ),
        Field("timeout_ms", "int32", "0+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "topics",
            "[]DeleteRecordsTopicResult",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]DeleteRecordsPartitionResult",
                    "0+",
                    fields=(
                        Field("partition_index", "int32", "0+"),
                        Field("low_watermark", "int64", "0+"),
                        Field("error_code", "int16", "0+"),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_CONFIGS = ApiSchema(
    api_key=32,
    name="DescribeConfigs",
    versions=(0, 4),
    flexible_versions="4+",
    request=(
        Field(
            "resources",
            "[]DescribeConfigsResource",
            "0+",
            fields=(
                Field("resource_type", "int8", "0+"),
                Field("resource_name", "string", "0+"),
                Field("configuration_keys", "[]string", "0+", nullable_versions="0+"),
            ),
        ),
        Field("include_synonyms", "bool", "1+", default="false"),
        Field("include_documentation", "bool", "3+", default="false"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "results",
            "[]DescribeConfigsResult",
            "0+",
            fields=(
                Field("error_code", "int16", "0+"),
                Field("error_message", "string", "0+", nullable_versions="0+"),
                Field("resource_type", "int8", "0+"),
                Field("resource_name", "string", "0+"),
                Field(
                    "configs",
                    "[]DescribeConfigsResourceResult",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field("value", "string", "0+", nullable_versions="0+"),
                        Field("read_only", "bool", "0+"),
                        Field("is_default", "bool", "0"),
                        Field("config_source", "int8", "1+", default="-1"),
                        Field("is_sensitive", "bool", "0+"),
                        Field(
                            "synonyms",
                            "[]DescribeConfigsSynonym",
                            "1+",
                            fields=(
                                Field("name", "string", "1+"),
                                Field("value", "string", "1+", nullable_versions="0+"),
                                Field("source", "int8", "1+"),
                            ),
                        ),
                        Field("config_type", "int8", "3+", default="0"),
                        Field("documentation", "string", "3+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
    ),
)


_RESOURCE_RESPONSE = (
    Field("throttle_time_ms", "int32", "0+"),
    Field(
        "responses",
        "[]AlterConfigsResourceResponse",
        "0+",
        fields=(
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "0+", nullable_versions="0+"),
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
        ),
    ),
)


ALTER_CONFIGS = ApiSchema(
    api_key=33,
    name="AlterConfigs",
    versions=(0, 2),
    flexible_versions="2+",
    request=(
        Field(
            "resources",
            "[]AlterConfigsResource",
            "0+",
            fields=(
                Field("resource_type", "int8", "0+"),
                Field("resource_name", "string", "0+"),
                Field(
                    "configs",
                    "[]AlterableConfig",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field("value", "string", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
        Field("validate_only", "bool", "0+"),
    ),
    response=_RESOURCE_RESPONSE,
)


CREATE_PARTITIONS = ApiSchema(
    api_key=37,
    name="CreatePartitions",
    versions=(0, 3),
    flexible_versions="2+",
    request=(
        Field(
            "topics",
            "[]CreatePartitionsTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("count", "int32", "0+"),
                Field(
                    "assignments",
                    "[]CreatePartitionsAssignment",
                    "0+",
                    nullable_versions="0+",
                    fields=(Field("broker_ids", "[]int32", "0+"),),
                ),
            ),
        ),
        Field("timeout_ms", "int32", "0+"),
        Field("validate_only", "bool", "0+"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "results",
            "[]CreatePartitionsTopicResult",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field("error_code", "int16", "0+"),
                Field("error_message", "string", "0+", nullable_versions="0+", default="null"),
            ),
        ),
    ),
)


DELETE_GROUPS = ApiSchema(
    api_key=42,
    name="DeleteGroups",
    versions=(0, 2),
    flexible_versions="2+",
    request=(Field("groups_names", "[]string", "0+"),),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "results",
            "[]DeletableGroupResult",
            "0+",
            fields=(
                Field("group_id", "string", "0+"),
                Field("error_code", "int16", "0+"),
            ),
        ),
    ),
)


INCREMENTAL_ALTER_CONFIGS = ApiSchema(
    api_key=44,
    name="IncrementalAlterConfigs",
    versions=(0, 1),
    flexible_versions="1+",
    request=(
        Field(
            "resources",
            "[]AlterConfigsResource",
            "0+",
            fields=(
                Field("resource_type", "int8", "0+"),
                Field("resource_name", "string", "0+"),
                Field(
                    "configs",
                    "[]AlterableConfig",
                    "0+",
                    fields=(
                        Field("name", "string", "0+"),
                        Field("config_operation", "int8", "0+"),
                        Field("value", "string", "0+", nullable_versions="0+"),
                    ),
                ),
            ),
        ),
        Field("validate_only", "bool", "0+"),
    ),
    response=_RESOURCE_RESPONSE,
)


OFFSET_DELETE = ApiSchema(
    api_key=47,
    name="OffsetDelete",
    versions=(0, 0),
    flexible_versions="none",
    request=(
        Field("group_id", "string", "0+"),
        Field(
            "topics",
            "[]OffsetDeleteRequestTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]OffsetDeleteRequestPartition",
                    "0+",
                    fields=(Field("partition_index", "int32", "0+"),),
                ),
            ),
        ),
    ),
    response=(
        Field("error_code", "int16", "0+"),
        Field("throttle_time_ms", "int32", "0+"),
        Field(
            "topics",
            "[]OffsetDeleteResponseTopic",
            "0+",
            fields=(
                Field("name", "string", "0+"),
                Field(
                    "partitions",
                    "[]OffsetDeleteResponsePartition",
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


DESCRIBE_CLUSTER = ApiSchema(
    api_key=60,
    name="DescribeCluster",
    versions=(0, 1),
    flexible_versions="0+",
    request=(
        Field("include_cluster_authorized_operations", "bool", "0+"),
        Field("endpoint_type", "int8", "1+", default="1"),
    ),
    response=(
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
        Field("error_message", "string", "0+", nullable_versions="0+", default="null"),
        Field("endpoint_type", "int8", "1+", default="1"),
        Field("cluster_id", "string", "0+"),
        Field("controller_id", "int32", "0+", default="-1"),
        Field(
            "brokers",
            "[]DescribeClusterBroker",
            "0+",
            fields=(
                Field("broker_id", "int32", "0+"),
                Field("host", "string", "0+"),
                Field("port", "int32", "0+"),
                Field("rack", "string", "0+", nullable_versions="0+", default="null"),
            ),
        ),
        Field("cluster_authorized_operations", "int32", "0+", default="-2147483648"),
    ),
)


ADMIN_APIS: tuple[ApiSchema, ...] = (
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    OFFSET_DELETE,
    DESCRIBE_CLUSTER,
)
