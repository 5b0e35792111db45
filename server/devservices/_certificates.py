"""Certificates for a local cluster (``talos cluster up --tls``): a CA of its own and one server certificate for the
loopback names, written as PEM files. The CA's key is not kept: nothing else can be signed by it.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsFiles", "make_local_certificates"]

_VALID_FOR = datetime.timedelta(days=365)


@dataclass(frozen=True)
class TlsFiles:
    """A server's TLS files (``cert_file``: its key and certificate chain) and the CA that signed them; with
    ``client_auth``, what the servers ask of clients (``server.tls``)."""

    cert_file: Path
    ca_file: Path
    client_auth: str = "none"

    def server_args(self) -> list[str]:
        """The flags of ``talos server`` / ``talos standalone`` that serve them."""
        return ["--tls-cert", str(self.cert_file), "--tls-ca", str(self.ca_file), "--tls-client-auth", self.client_auth]

    def client_context(self) -> ssl.SSLContext:
        """A client trusting the CA, presenting the server's certificate (a member of the cluster may ask)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert_file))
        return context


def make_local_certificates(directory: Path, *, client_auth: str = "none") -> TlsFiles:
    """``ca.pem`` and ``server.pem`` (key and chain, for 127.0.0.1 and localhost) in ``directory``, made once and
    kept: a cluster started again keeps the CA its clients already trust."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "server.pem", directory / "ca.pem", client_auth)
    if files.cert_file.exists() and files.ca_file.exists():
        return files
    # Imported here: only a cluster started with --tls needs it.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Talos local cluster CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "talos-server")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        # Both: a server forwarding to another presents it as a client.
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    files.cert_file.write_bytes(key_pem + leaf.public_bytes(pem) + ca.public_bytes(pem))
    files.cert_file.chmod(0o600)
    files.ca_file.write_bytes(ca.public_bytes(pem))
    return files
