"""Source and sink connectors (HDFS, Elasticsearch) and the PySpark data source; clients of the public SDK only."""
