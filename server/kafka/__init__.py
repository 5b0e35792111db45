"""The Kafka wire-protocol listener: an edge. Each API handler decodes a request, calls the service layer
(``server.messaging``: produce, fetch, authorization, topics, producer ids) or the group coordinator as the
connection's principal and caller (``session``), and encodes the answer.

May import the services and coordinators, security, the broker and below; never another edge
(``server.http``, ``server.portal``, ``server.push``). Only the app assembly (``server.app``) imports it
(tests/unit/test_import_direction.py).
"""
