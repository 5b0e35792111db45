"""The transaction coordinator's pure part (Kafka's KIP-98 transactions with KIP-360 and KIP-890): the state
machine of one transactional id (``state``) and the records of the compacted internal topic
``__transaction_state`` that persist it (``records``). No I/O here: the coordinator that appends the records,
writes the markers and answers the Kafka requests calls these functions.
"""
