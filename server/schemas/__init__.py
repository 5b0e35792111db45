"""The schema registry (issue 40, in progress): schemas by format, and the compatibility levels over them.

``avro``: parsing, the Parsing Canonical Form and Avro's schema resolution; ``compatibility``: Confluent's levels
(BACKWARD, FORWARD, FULL, their TRANSITIVE forms, NONE) for any format's check. Pure, and not served yet: the
registry's REST API, its storage and the JSON Schema and Protobuf formats are still to come.
"""
