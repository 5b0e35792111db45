"""A minimal Kafka client over a raw socket, built on the listener's own codec: for the tests that need to
see one request's exact error code (a client library would retry it or turn it into a timeout)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from server.kafka.protocol import RequestHeader, decode_response, encode_request
from server.kafka.records import talos_to_kafka
from talos import RecordData, encode_batch

__all__ = ["KafkaWire", "kafka_batch"]


def kafka_batch(values: list[bytes]) -> bytes:
    """A Kafka record batch v2 holding ``values`` (made through the Talos codec and the listener's converter)."""
    return talos_to_kafka(bytes(encode_batch([RecordData(v, None, [], None) for v in values])))


class KafkaWire:
    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *_: object) -> None:
        self._sock.close()

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._correlation += 1
        frame = encode_request(RequestHeader(api_key, version, self._correlation, "kafka-wire"), body)
        self._sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._read(4))[0]
        correlation, answer = decode_response(api_key, version, self._read(size))
        assert correlation == self._correlation
        return answer

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data

    def login(self, token: str, mechanism: str = "PLAIN") -> dict[str, Any]:
        """The SASL exchange; the SaslAuthenticate answer."""
        assert self.call(17, 1, {"mechanism": mechanism})["error_code"] == 0
        auth = f"\0tenant\0{token}" if mechanism == "PLAIN" else f"n,,\x01auth=Bearer {token}\x01\x01"
        return self.call(36, 2, {"auth_bytes": auth.encode()})

    def produce(self, topic: str, partition: int, values: list[bytes]) -> dict[str, Any]:
        """One Produce (v9, acks -1) to one partition: that partition's answer."""
        body = {
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": kafka_batch(values)}]}],
        }
        answer = self.call(0, 9, body)
        return dict(answer["responses"][0]["partition_responses"][0])
