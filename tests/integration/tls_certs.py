"""Certificates made inside the test run: a CA, a server certificate for 127.0.0.1 and client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    """A certificate and its key, written to ``cert`` / ``key``."""

    cert: Path
    key: Path

    def cert_bytes(self) -> bytes:
        return self.cert.read_bytes()

    def key_bytes(self) -> bytes:
        return self.key.read_bytes()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    pem = Pem(directory / f"{stem}.crt", directory / f"{stem}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return pem


class CertificateAuthority:
    """A throw-away CA that signs server and client certificates."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(name)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _write(directory, name, self.cert, self.key)

    def issue(self, stem: str, common_name: str, *, server: bool) -> Pem:
        """A leaf certificate: for the server (SAN IP 127.0.0.1 and localhost) or for a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        return _write(self.directory, stem, builder.sign(self.key, hashes.SHA256()), key)


@dataclass(frozen=True)
class Pki:
    """Everything a TLS test needs: the trusted CA, the server's pair, a good and a rogue client."""

    ca: Pem
    server: Pem
    client: Pem
    rogue_client: Pem  # signed by a CA the server does not trust


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory, "ferry-test-ca")
    rogue = CertificateAuthority(directory, "rogue-ca")
    return Pki(
        ca=ca.pem,
        server=ca.issue("server", "ferry-test-server", server=True),
        client=ca.issue("client", "ferry-test-client", server=False),
        rogue_client=rogue.issue("rogue-client", "rogue-client", server=False),
    )
