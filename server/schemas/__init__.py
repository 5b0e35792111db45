"""The schema registry (docs/schema-registry.md): schemas by format, Confluent's compatibility levels over them, the
registry's state as records of ``__schemas`` and its coordinator, and produce-time validation.

``avro``, ``json_schema``, ``protobuf``: each format's parsing, canonical form and check of what one schema reads
of another (``formats`` names them); ``compatibility``: the levels; ``state``: the registry and every change as
records (pure); ``coordinator``: the owner of ``__schemas`` that holds and changes it; ``validation``: what a
partition's owner asks before it stores a record of a topic that validates schema ids. The REST edge is
``server.http.routes.schema_registry``.
"""
