"""The service layer: message requests, protocol-neutral, under every edge (REST ``server.http``, the Kafka
listener ``server.kafka``, WebSocket push ``server.push``, the portal) and for the coordinators (groups,
subscriptions, connect offsets, internal topics, the message trace).

A request is served for a :class:`~server.messaging.caller.Caller` (the tenant it acts for, the client's
address, the credentials a forward passes on), or authorized for a
:class:`~server.security.access.Principal`; never for a protocol's request headers.

- ``caller``: who a message request is served for.
- ``authorization``: may a principal produce, consume, use a producer id or a group.
- ``admission``: quota admission and metering of a request on the partition's owner.
- ``forwarder``: the call to a partition (or a coordinator) on another server, and its answer.
- ``produce``, ``fetch``, ``offsets``, ``fence``: the partition operations, on the owner or forwarded to it.
- ``records``: a stored record as JSON (REST's fetch, push subscriptions).
- ``topics``: create, describe, change and delete a topic as a principal (checked, limited, audited).
- ``producers``: idempotent producer ids and named producers' leases.

May import the partition and coordination rooms, the broker, security, usage metering, the trace recorder,
``fencing`` and ``talos``; never an edge (tests/unit/test_import_direction.py).
"""
