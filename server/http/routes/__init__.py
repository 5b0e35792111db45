"""REST routers of the rooms that are not message requests: consumer groups (``groups``), push
subscriptions (``subscriptions``), tenants, tokens, ACLs, quotas and the audit log (``security``, which also
says who a request's principal is), connector checkpoints (``connector_offsets``) and the message trace
(``trace``). REST edge code: each parses, calls its room's coordinator or service, and encodes."""
