"""The Kafka listeners a server opens, as configured: Kafka's ``listeners`` and ``advertised.listeners``.

``kafka_listeners = "PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093"`` opens two ports: one in the clear (say, inside
a private network) and one with TLS. Each is advertised at its own address (``kafka_advertised_listeners``, by
name; default: its listening address): a client sees, in Metadata, every broker's address *of the listener it
connected to*, so it stays on the network and the security it chose. A listener's name is its security protocol:
``PLAINTEXT`` or ``SSL``, or ``SASL_PLAINTEXT`` / ``SASL_SSL`` (the same two; with auth on every listener requires
SASL or a client certificate anyway). ``kafka_port`` alone is one listener: TLS when a certificate is configured.

Pure: parsing and checking, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KafkaListenerSpec", "parse_listeners"]

_PROTOCOLS = {"PLAINTEXT": False, "SSL": True, "SASL_PLAINTEXT": False, "SASL_SSL": True}  # name -> TLS


@dataclass(frozen=True)
class KafkaListenerSpec:
    name: str
    host: str  # where it listens
    port: int
    advertised: str  # HOST:PORT clients connect to
    tls: bool

    def protocol(self, *, sasl: bool) -> str:
        """Its security protocol as Kafka names it (``advertised.listeners``)."""
        return ("SASL_" if sasl else "") + ("SSL" if self.tls else "PLAINTEXT")


def _entries(setting: str, text: str) -> dict[str, tuple[str, int]]:
    found: dict[str, tuple[str, int]] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, sep, address = raw.partition("://")
        host, _, port = address.rpartition(":")
        name = name.upper()
        if not sep or name not in _PROTOCOLS or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{setting}: {raw!r} is not NAME://HOST:PORT with NAME one of {', '.join(_PROTOCOLS)}")
        if name in found:
            raise ValueError(f"{setting}: {name} is given twice")
        found[name] = (host.strip("[]"), int(port))
    return found


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def parse_listeners(
    listeners: str, advertised: str, *, port: int, port_advertised: str, host: str, tls: bool
) -> list[KafkaListenerSpec]:
    """The listeners of ``kafka_listeners`` (advertised by ``kafka_advertised_listeners``), else the one of
    ``kafka_port`` (``port_advertised``; TLS if ``tls``), else none. ``tls``: a certificate is configured, which
    an SSL listener needs. Raises :class:`ValueError` saying what is wrong."""
    if not listeners:
        if advertised:
            raise ValueError("kafka_advertised_listeners needs kafka_listeners")
        if not port:
            return []
        address = port_advertised or f"{_reachable(host)}:{port}"
        return [KafkaListenerSpec("SSL" if tls else "PLAINTEXT", host, port, address, tls)]
    if port:
        raise ValueError("kafka_listeners and kafka_port are two ways to say the same: set one")
    opened = _entries("kafka_listeners", listeners)
    told = _entries("kafka_advertised_listeners", advertised)
    unknown = sorted(set(told) - set(opened))
    if unknown:
        raise ValueError(f"kafka_advertised_listeners names listeners that are not opened: {', '.join(unknown)}")
    ports = [p for _, p in opened.values()]
    if len(set(ports)) != len(ports):
        raise ValueError("kafka_listeners: each listener needs a port of its own")
    specs = []
    for name, (given_host, listen_port) in opened.items():
        listen_host = given_host or host  # NAME://:PORT: the server's own host
        secure = _PROTOCOLS[name]
        if secure and not tls:
            raise ValueError(f"kafka_listeners: {name} needs a TLS certificate (tls_cert_file)")
        advertised_host, advertised_port = told.get(name, (_reachable(listen_host), listen_port))
        specs.append(KafkaListenerSpec(name, listen_host, listen_port, f"{advertised_host}:{advertised_port}", secure))
    return specs
