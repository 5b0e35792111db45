"""TLS on every listener of real ``talos standalone`` processes, with clients no one here wrote: curl, confluent-kafka
and kcat, the ``websockets`` client under the SDK's subscriber, and the SDK itself. Certificates are made here
(``trustme``), never committed. Refused: a client trusting another CA, plaintext to a TLS port, an expired
certificate, a missing client certificate where one is required, files that do not load. The certificate is
reloaded when its files change, and a half-rotated pair (a new certificate, the old key) is not taken."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import ConfigResource, ResourceType
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from server.devservices import StandaloneServer, free_port, wait_until
from talos import TLS, Admin, Consumer, Producer, Subscriber, TransportError


@dataclass
class Certificates:
    directory: Path
    ca: trustme.CA
    ca_file: Path  # signs the server's certificate and the clients'
    server_pem: Path  # the server's key and chain, for 127.0.0.1 and localhost
    client_pem: Path  # a client certificate of ca (CN=acme)
    other_ca_file: Path  # a CA that signed nothing here
    stranger_pem: Path  # a client certificate of the other CA


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    directory = tmp_path_factory.mktemp("certs")
    ca, other = trustme.CA(), trustme.CA()
    made = Certificates(
        directory,
        ca,
        directory / "ca.pem",
        directory / "server.pem",
        directory / "client.pem",
        directory / "other-ca.pem",
        directory / "stranger.pem",
    )
    ca.cert_pem.write_to_path(str(made.ca_file))
    other.cert_pem.write_to_path(str(made.other_ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(made.server_pem))
    ca.issue_cert("acme@clients", common_name="acme").private_key_and_cert_chain_pem.write_to_path(str(made.client_pem))
    stranger = other.issue_cert("stranger@clients", common_name="stranger")
    stranger.private_key_and_cert_chain_pem.write_to_path(str(made.stranger_pem))
    return made


@dataclass
class TlsServer:
    server: StandaloneServer
    kafka_port: int
    globex: str = ""  # with auth on: a token of tenant globex

    @property
    def url(self) -> str:
        return self.server.url


def _tls_standalone(data: Path, certs: Certificates, env: dict[str, str] | None = None) -> TlsServer:
    """A standalone server (not started) with TLS on every listener, client certificates optional."""
    kafka_port = free_port()
    server = StandaloneServer(
        data,
        args=("--tls-cert", str(certs.server_pem), "--tls-ca", str(certs.ca_file), "--tls-client-auth", "optional"),
        env={"TALOS_KAFKA_PORT": str(kafka_port), **(env or {})},
        tls_ca=certs.ca_file,
    )
    return TlsServer(server, kafka_port)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[TlsServer]:
    running = _tls_standalone(tmp_path_factory.mktemp("tls") / "data", certs)
    try:
        running.server.start()
        Admin(running.url, tls=TLS(ca_file=str(certs.ca_file))).create_topic("secret", partitions=2)
        yield running
    finally:
        running.server.stop()


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=60, env=env)


def _curl(*args: str) -> subprocess.CompletedProcess[str]:
    return _run("curl", "-sS", "--max-time", "10", *args)


@contextlib.contextmanager
def _tls_connection(context: ssl.SSLContext, port: int) -> Iterator[ssl.SSLSocket]:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        yield tls


def test_curl_with_the_ca_produces_and_fetches_and_is_refused_without_it(
    tls_server: TlsServer, certs: Certificates
) -> None:
    url = f"{tls_server.url}/v1/topics/secret/partitions/0/messages"
    body = json.dumps({"messages": [{"value": "over tls"}]})
    produced = _curl("--cacert", str(certs.ca_file), "-H", "content-type: application/json", "-d", body, url)
    assert produced.returncode == 0, produced.stderr
    offset = json.loads(produced.stdout)["results"][0]["offset"]
    fetched = _curl("--cacert", str(certs.ca_file), f"{url}?offset={offset}")
    assert [m["value"] for m in json.loads(fetched.stdout)["messages"]] == ["over tls"]
    # A client certificate of the CA is accepted where one is optional.
    with_cert = _curl("--cacert", str(certs.ca_file), "--cert", str(certs.client_pem), f"{tls_server.url}/readyz")
    assert json.loads(with_cert.stdout) == {"status": "ready"}
    for refused in (
        _curl(f"{tls_server.url}/readyz"),  # the system's CAs
        _curl("--cacert", str(certs.other_ca_file), f"{tls_server.url}/readyz"),
    ):
        assert refused.returncode == 60, refused  # curl: the peer's certificate cannot be verified
        assert "certificate" in refused.stderr
    # The portal over https: its cookies are Secure (never sent back in the clear).
    portal = _curl("--cacert", str(certs.ca_file), "-i", f"{tls_server.url}/portal/login")
    cookies = [line.lower() for line in portal.stdout.splitlines() if line.lower().startswith("set-cookie:")]
    assert cookies and all("; secure" in line for line in cookies), portal.stdout[:500]
    # A client certificate of another CA fails the handshake, even where a certificate is optional.
    stranger = _curl("--cacert", str(certs.ca_file), "--cert", str(certs.stranger_pem), f"{tls_server.url}/readyz")
    assert stranger.returncode != 0 and "ready" not in stranger.stdout


def test_plaintext_to_the_tls_ports_gets_no_answer_and_the_server_serves_on(
    tls_server: TlsServer, certs: Certificates
) -> None:
    plain = tls_server.url.replace("https://", "http://")
    answer = _curl(f"{plain}/readyz")
    assert answer.returncode != 0 and "ready" not in answer.stdout
    for port in (tls_server.server.port, tls_server.kafka_port):
        # A Kafka ApiVersions request, then an HTTP request, in the clear: not a TLS ClientHello.
        assert _answer_to(port, b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test") == b""
        assert _answer_to(port, b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n") == b""
    assert json.loads(_curl("--cacert", str(certs.ca_file), f"{tls_server.url}/readyz").stdout)["status"] == "ready"


def _answer_to(port: int, request: bytes) -> bytes:
    """What the port sends back to ``request`` sent in the clear, until it closes the connection (or resets it)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
    # A TLS alert record at most (content type 21), never an HTTP or Kafka answer.
    return b"" if received[:1] in (b"", b"\x15") else received


def test_the_sdk_produces_and_consumes_over_https_and_trusts_only_its_ca(
    tls_server: TlsServer, certs: Certificates
) -> None:
    tls = TLS(ca_file=str(certs.ca_file), cert_file=str(certs.client_pem))
    with Producer(tls_server.url, tls=tls) as producer:
        sent = [producer.send("secret", f"sdk-{i}".encode(), partition=1) for i in range(20)]
        producer.flush()
    assert [f.result(10).offset for f in sent] == list(range(sent[0].result(10).offset, sent[0].result(10).offset + 20))
    with Consumer(tls_server.url, partitions=[("secret", 1)], tls=tls) as consumer:
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m.value for m in consumer.poll(timeout=1) if m.value is not None]
    assert got == [f"sdk-{i}".encode() for i in range(20)]
    with pytest.raises(TransportError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        Admin(tls_server.url, tls=TLS(ca_file=str(certs.other_ca_file))).list_topics()
    with pytest.raises(TransportError):
        Admin(tls_server.url).list_topics()  # the system's CAs do not know this one


def test_the_cli_takes_the_ca_from_a_flag_or_the_environment(tls_server: TlsServer, certs: Certificates) -> None:
    talos = (sys.executable, "-m", "talos.cli")
    listed = _run(*talos, "--ca-file", str(certs.ca_file), "topics", "list", "--url", tls_server.url)
    assert listed.returncode == 0, listed.stderr
    assert "secret" in listed.stdout
    env = {**os.environ, "TALOS_CA_FILE": str(certs.ca_file)}
    env_listed = _run(*talos, "topics", "list", "--url", tls_server.url, env=env)
    assert env_listed.returncode == 0 and "secret" in env_listed.stdout, env_listed.stderr
    refused = _run(*talos, "--ca-file", str(certs.other_ca_file), "topics", "list", "--url", tls_server.url)
    assert refused.returncode != 0 and "certificate" in refused.stderr.lower()


def test_push_subscriptions_over_wss(tls_server: TlsServer, certs: Certificates) -> None:
    tls = TLS(ca_file=str(certs.ca_file))
    admin = Admin(tls_server.url, tls=tls)
    admin.create_topic("pushed", partitions=1)
    with Producer(tls_server.url, tls=tls) as producer:
        for i in range(5):
            producer.send("pushed", f"push-{i}".encode())
        producer.flush()
    with Subscriber(tls_server.url, "watchers", topic="pushed", start="earliest", tls=tls) as subscriber:
        values = []
        for _ in range(5):
            message = subscriber.receive(timeout=20)
            assert message is not None
            message.ack().result(10)
            values.append(message.value)
    assert sorted(v or b"" for v in values) == [f"push-{i}".encode() for i in range(5)]


@pytest.mark.slow
def test_kafka_clients_over_ssl(tls_server: TlsServer, certs: Certificates) -> None:
    bootstrap = f"127.0.0.1:{tls_server.kafka_port}"
    common = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca_file)}
    producer = KafkaProducer({**common, "acks": "all"})
    failures: list[object] = []
    offsets: list[int] = []

    def delivered(error: object, message: Any) -> None:
        failures.append(error) if error is not None else offsets.append(message.offset())

    for i in range(10):
        producer.produce("secret", f"kafka-{i}".encode(), partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == [] and len(offsets) == 10
    consumer = KafkaConsumer({**common, "group.id": "tls-readers", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["secret"])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len([v for v in values if v.startswith(b"kafka-")]) < 10 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert [v for v in values if v.startswith(b"kafka-")] == [f"kafka-{i}".encode() for i in range(10)]
    admin = KafkaAdmin(common)
    [broker_id] = admin.list_topics(timeout=10).brokers
    [described] = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
    assert described.result()["advertised.listeners"].value == f"SSL://{bootstrap}"
    if shutil.which("kcat"):
        listed = _run(
            "kcat",
            *("-b", bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca_file}"),
            *("-X", f"ssl.certificate.location={certs.client_pem}", "-X", f"ssl.key.location={certs.client_pem}"),
            *("-C", "-t", "secret", "-p", "0", "-o", str(min(offsets)), "-c", "10", "-e", "-q"),
        )
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines() == [f"kafka-{i}" for i in range(10)]
    # Trusting another CA, the client never gets a broker.
    stranger = KafkaProducer({**common, "ssl.ca.location": str(certs.other_ca_file), "message.timeout.ms": 3000})
    errors: list[object] = []
    stranger.produce("secret", b"never", partition=0, on_delivery=lambda e, _m: errors.append(e))
    stranger.flush(15)
    assert len(errors) == 1 and errors[0] is not None


@pytest.mark.slow
def test_a_required_client_certificate_and_files_reloaded_when_they_change(tmp_path: Path, certs: Certificates) -> None:
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "cert.pem", live / "key.pem"
    first = certs.ca.issue_cert("127.0.0.1")
    first.cert_chain_pems[0].write_to_path(str(cert))
    first.private_key_pem.write_to_path(str(key))
    server = StandaloneServer(
        tmp_path / "data",
        args=(
            *("--tls-cert", str(cert), "--tls-key", str(key)),
            *("--tls-ca", str(certs.ca_file), "--tls-client-auth", "required"),
        ),
        env={"TALOS_TLS_RELOAD_S": "0.2"},
        tls_ca=certs.ca_file,
        tls_client_cert=certs.client_pem,
    )
    client = ssl.create_default_context(cafile=str(certs.ca_file))
    client.load_cert_chain(str(certs.client_pem))
    try:
        server.start()
        assert server.process is not None

        def serial() -> int | None:
            try:
                with _tls_connection(client, server.port) as tls:
                    tls.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    answer = tls.recv(4096)
                    assert b" 200 " in answer.split(b"\r\n", 1)[0]
                    peer = tls.getpeercert()
                    assert peer is not None
                    return int(str(peer["serialNumber"]), 16)
            except (OSError, ssl.SSLError):
                return None

        first_serial = serial()
        assert first_serial is not None
        # Without a client certificate: refused at the handshake (TLS 1.3: when the server answers).
        without = ssl.create_default_context(cafile=str(certs.ca_file))
        with pytest.raises((ssl.SSLError, ConnectionResetError)), _tls_connection(without, server.port) as tls:
            tls.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
            if not tls.recv(4096):
                raise ConnectionResetError("closed without an answer")
        # Half rotated (a new certificate, the old key): not taken; the old pair goes on serving.
        second = certs.ca.issue_cert("127.0.0.1")
        second.cert_chain_pems[0].write_to_path(str(cert))
        time.sleep(1.0)
        assert serial() == first_serial
        # The key too: new handshakes get the new certificate, with no restart.
        second.private_key_pem.write_to_path(str(key))
        wait_until(lambda: serial() not in (None, first_serial), timeout=10, what="the new certificate")
        # An expired certificate, once loaded, is refused by clients.
        expired = certs.ca.issue_cert(
            "127.0.0.1",
            not_before=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
            not_after=datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC),
        )
        expired.private_key_pem.write_to_path(str(key))
        expired.cert_chain_pems[0].write_to_path(str(cert))

        def refused_as_expired() -> bool:
            try:
                with _tls_connection(client, server.port):
                    return False
            except ssl.SSLCertVerificationError as exc:
                return "expired" in str(exc)

        wait_until(refused_as_expired, timeout=10, what="the expired certificate refused")
        assert server.process.alive()
    finally:
        server.stop()


@pytest.mark.slow
def test_tls_files_that_do_not_load_stop_the_start_saying_which(tmp_path: Path, certs: Certificates) -> None:
    server = (
        sys.executable,
        "-m",
        "server",
        "standalone",
        "--data-dir",
        str(tmp_path / "d"),
        "--port",
        str(free_port()),
    )
    missing = tmp_path / "missing.pem"
    started = _run(*server, "--tls-cert", str(missing))
    assert started.returncode == 2
    assert str(missing) in started.stderr
    no_ca = _run(*server, "--tls-cert", str(certs.server_pem), "--tls-client-auth", "required")
    assert no_ca.returncode == 2
    assert "tls_ca_file" in no_ca.stderr


ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"


@pytest.fixture(scope="module")
def secured_tls(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[TlsServer]:
    """Auth on, TLS with optional client certificates: tenant acme (its certificate's CN) owns ``acme-orders``."""
    env = {"TALOS_AUTH": "on", "TALOS_ADMIN_TOKEN": ADMIN_TOKEN}
    running = _tls_standalone(tmp_path_factory.mktemp("secured-tls") / "data", certs, env)
    tls = TLS(ca_file=str(certs.ca_file))
    try:
        running.server.start()
        with Admin(running.url, token=ADMIN_TOKEN, tls=tls) as admin:
            admin.create_tenant("acme")
            admin.create_tenant("globex")
            acme = admin.create_token("acme")["token"]
            running.globex = admin.create_token("globex")["token"]
        with Admin(running.url, token=acme, tls=tls) as tenant:
            tenant.create_topic("acme-orders", partitions=1)
        yield running
    finally:
        running.server.stop()


def test_a_client_certificate_names_its_tenant_and_nobody_can_claim_one(
    secured_tls: TlsServer, certs: Certificates
) -> None:
    whoami = f"{secured_tls.url}/v1/whoami"
    ca = ("--cacert", str(certs.ca_file))
    as_acme = _curl(*ca, "--cert", str(certs.client_pem), whoami)
    assert json.loads(as_acme.stdout) == {"tenant": "acme", "admin": False, "token_id": None, "auth": True}
    produced = _curl(
        *ca,
        *("--cert", str(certs.client_pem), "-H", "content-type: application/json"),
        *("-d", json.dumps({"messages": [{"value": "by certificate"}]})),
        f"{secured_tls.url}/v1/topics/acme-orders/partitions/0/messages",
    )
    assert json.loads(produced.stdout)["results"][0]["offset"] >= 0, produced.stdout
    # The header the server sets from a certificate, sent by a client: dropped (with a certificate or without).
    claimed = ("-H", "x-talos-certificate-tenant: globex")
    assert json.loads(_curl(*ca, "--cert", str(certs.client_pem), *claimed, whoami).stdout)["tenant"] == "acme"
    forged = json.loads(_curl(*ca, *claimed, whoami).stdout)
    assert forged["error"]["code"] == "UNAUTHENTICATED", forged
    # A token decides over the certificate; a certificate of the CA naming no tenant is refused.
    token = ("-H", f"authorization: Bearer {secured_tls.globex}")
    assert json.loads(_curl(*ca, "--cert", str(certs.client_pem), *token, whoami).stdout)["tenant"] == "globex"
    nobody = certs.directory / "nobody.pem"
    certs.ca.issue_cert("nobody@clients", common_name="nobody").private_key_and_cert_chain_pem.write_to_path(
        str(nobody)
    )
    refused = json.loads(_curl(*ca, "--cert", str(nobody), whoami).stdout)
    assert refused["error"]["code"] == "UNAUTHENTICATED" and "CN=nobody" in refused["error"]["message"]
    # The SDK's client certificate: the same tenant, its topic only.
    tls = TLS(ca_file=str(certs.ca_file), cert_file=str(certs.client_pem))
    with Admin(secured_tls.url, tls=tls, token="") as admin:
        assert admin.whoami()["tenant"] == "acme"
    with Producer(secured_tls.url, tls=tls, token="") as producer:
        assert producer.send("acme-orders", b"sdk by certificate").result(30).offset >= 1


def test_the_schema_registry_over_https_with_a_client_certificate(secured_tls: TlsServer, certs: Certificates) -> None:
    url = f"{secured_tls.url}/schema-registry"
    by_cert = SchemaRegistryClient(
        {
            "url": url,
            "ssl.ca.location": str(certs.ca_file),
            "ssl.certificate.location": str(certs.client_pem),
            "ssl.key.location": str(certs.client_pem),
        }
    )
    schema = Schema(json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}))
    schema_id = by_cert.register_schema("acme-orders-value", schema)  # acme's topic: the certificate's tenant's
    assert by_cert.get_latest_version("acme-orders-value").schema_id == schema_id
    with pytest.raises(SchemaRegistryError) as anonymous:
        SchemaRegistryClient({"url": url, "ssl.ca.location": str(certs.ca_file)}).get_subjects()
    assert anonymous.value.http_status_code == 401


@pytest.mark.slow
def test_kafka_over_sasl_ssl_with_a_token_and_over_ssl_with_a_client_certificate(
    secured_tls: TlsServer, certs: Certificates
) -> None:
    bootstrap = f"127.0.0.1:{secured_tls.kafka_port}"
    ssl_common = {"bootstrap.servers": bootstrap, "ssl.ca.location": str(certs.ca_file)}
    sasl = {
        **ssl_common,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "globex",
        "sasl.password": secured_tls.globex,
    }
    by_cert = {
        **ssl_common,
        "security.protocol": "SSL",
        "ssl.certificate.location": str(certs.client_pem),
        "ssl.key.location": str(certs.client_pem),
    }
    with Admin(secured_tls.url, token=secured_tls.globex, tls=TLS(ca_file=str(certs.ca_file))) as globex:
        globex.create_topic("globex-events", partitions=1)
    outcomes: dict[str, list[object]] = {}
    for name, config, topic in (
        ("globex by SASL_SSL", sasl, "globex-events"),
        ("acme by certificate", by_cert, "acme-orders"),
        ("acme by certificate, globex's topic", by_cert, "globex-events"),
        ("no certificate, no SASL", {**ssl_common, "security.protocol": "SSL"}, "acme-orders"),
    ):
        refused = "globex's topic" in name or "no SASL" in name  # given up sooner: their answers will not come
        producer = KafkaProducer({**config, "acks": "all", "message.timeout.ms": 4000 if refused else 15000})
        results: list[object] = []
        producer.produce(topic, name.encode(), on_delivery=lambda e, m, out=results: out.append(e or m.offset()))
        producer.flush(30)
        outcomes[name] = results
    assert isinstance(outcomes["globex by SASL_SSL"][0], int)
    assert isinstance(outcomes["acme by certificate"][0], int)
    for refused in ("acme by certificate, globex's topic", "no certificate, no SASL"):
        assert len(outcomes[refused]) == 1 and not isinstance(outcomes[refused][0], int), outcomes
    consumer = KafkaConsumer({**by_cert, "group.id": "acme-readers", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["acme-orders"])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while b"acme by certificate" not in values and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert b"acme by certificate" in values


@pytest.mark.slow
def test_two_kafka_listeners_each_advertising_its_own_address(tmp_path: Path, certs: Certificates) -> None:
    """A plaintext listener (say, inside) and a TLS one (outside), as Kafka's ``listeners``: a client sees every
    broker at the address of the listener it connected to, and stays on it."""
    plain_port, tls_port = free_port(), free_port()
    server = StandaloneServer(
        tmp_path / "data",
        args=("--tls-cert", str(certs.server_pem)),
        env={
            "TALOS_KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{tls_port}",
            "TALOS_KAFKA_ADVERTISED_LISTENERS": f"SSL://localhost:{tls_port}",
        },
        tls_ca=certs.ca_file,
    )
    try:
        server.start()
        Admin(server.url, tls=TLS(ca_file=str(certs.ca_file))).create_topic("two-ways", partitions=1)
        clients = {
            "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
            "SSL": {
                "bootstrap.servers": f"localhost:{tls_port}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca_file),
            },
        }
        for name, config in clients.items():
            admin = KafkaAdmin(config)
            brokers = admin.list_topics(timeout=10).brokers
            assert [f"{b.host}:{b.port}" for b in brokers.values()] == [
                f"127.0.0.1:{plain_port}" if name == "PLAINTEXT" else f"localhost:{tls_port}"
            ]
            [described] = admin.describe_configs(
                [ConfigResource(ResourceType.BROKER, str(next(iter(brokers))))]
            ).values()
            assert described.result()["advertised.listeners"].value == (
                f"PLAINTEXT://127.0.0.1:{plain_port},SSL://localhost:{tls_port}"
            )
            producer = KafkaProducer({**config, "acks": "all"})
            producer.produce("two-ways", name.encode(), partition=0)
            assert producer.flush(30) == 0
        fetched = _curl(
            "--cacert", str(certs.ca_file), f"{server.url}/v1/topics/two-ways/partitions/0/messages?offset=0"
        )
        assert [m["value"] for m in json.loads(fetched.stdout)["messages"]] == ["PLAINTEXT", "SSL"]
        # Plaintext to the TLS listener is no Kafka answer.
        assert _answer_to(tls_port, b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test") == b""
    finally:
        server.stop()
