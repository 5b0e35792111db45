"""When a server whose storage fails gives its partitions up (pure logic; docs/cluster.md, "Storage failure").

A server that cannot write keeps its partitions unwritable for as long as it holds them: stepping down (out
of the ring, so the ring keepers place them on servers that can write) ends that. But if the storage itself
is down, every server fails at once, and stepping down would empty the ring and move every partition for
nothing. So a server steps down only with evidence that another ring member can write: that member
published a successful storage operation *after* this server's storage began failing, and recently. Storage
that is down for everybody leaves nobody with such evidence, and nobody leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PeerStorage", "writers_besides"]


@dataclass(frozen=True, slots=True)
class PeerStorage:
    """What a server publishes of its storage in its registration."""

    writable: bool  # False: stepped down, its storage failing
    last_ok_ms: int  # wall time of its last successful storage operation (0: unknown)
    ok_since_ms: int = 0  # wall time since which its storage has worked without a failure (0: failing, unknown)


def writers_besides(
    me: str,
    ring_members: Mapping[str, int],
    peers: Mapping[str, PeerStorage],
    *,
    now_ms: int,
    failing_since_ms: int,
    fresh_ms: int,
    margin_ms: int = 0,
    sustained_ms: int = 0,
) -> list[str]:
    """The ring members other than ``me`` that wrote to storage more than ``margin_ms`` after
    ``failing_since_ms`` (when our storage began failing) and within the last ``fresh_ms``: evidence that the
    storage works for others. Empty: stay. The margin keeps a write that was already on its way when the
    storage went down for everybody (acknowledged a moment after our first stuck operation began) from
    counting as evidence. A member counts only once its storage has worked for ``sustained_ms`` without a
    failure: when the storage comes back after an outage for everybody, the first server to write again is no
    reason for the others, a second behind it, to step down."""
    out = []
    for member in sorted(ring_members):
        peer = peers.get(member)
        if member == me or peer is None or not peer.writable:
            continue
        if not 0 < peer.ok_since_ms <= now_ms - sustained_ms:
            continue
        if peer.last_ok_ms > failing_since_ms + margin_ms and now_ms - peer.last_ok_ms <= fresh_ms:
            out.append(member)
    return out
