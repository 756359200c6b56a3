"""The emulator's local CA and server certificate: made once, kept private, reused, renewed."""

from __future__ import annotations

import ssl
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from sbdlq.emulator import tls
from sbdlq.errors import BadInput


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str) -> ssl.SSLObject:
    """A TLS handshake pumped between the two in memory; the client side, once done."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    back_in, back_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname=hostname)
    s = server.wrap_bio(back_in, back_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        back_in.write(outgoing.read())
        incoming.write(back_out.read())
    c.do_handshake()
    return c


def test_first_use_makes_a_ca_and_a_localhost_certificate_a_client_verifies(tmp_path: Path) -> None:
    files = tls.local_files(tmp_path)
    assert files.ca == tmp_path / "ca.pem" == tls.ca_path(tmp_path)
    for private in (files.key, tmp_path / "ca-key.pem"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    san = _cert(files.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
    # A default client context (hostname checked, strict X.509) trusting only the CA accepts it.
    client = ssl.create_default_context(cafile=str(files.ca))
    assert _handshake(client, tls.server_context(files), "localhost").getpeercert() is not None


def test_later_starts_reuse_the_files(tmp_path: Path) -> None:
    first = tls.local_files(tmp_path)
    before = (first.ca.read_bytes(), first.cert.read_bytes(), first.key.read_bytes())
    second = tls.local_files(tmp_path)
    assert (second.ca.read_bytes(), second.cert.read_bytes(), second.key.read_bytes()) == before


def test_an_expiring_server_certificate_is_made_again_under_the_same_ca(tmp_path: Path) -> None:
    files = tls.local_files(tmp_path)
    ca_before, cert_before = files.ca.read_bytes(), _cert(files.cert)
    later = cert_before.not_valid_after_utc - tls.RENEW_BEFORE + timedelta(hours=1)
    tls.local_files(tmp_path, now=later)
    assert files.ca.read_bytes() == ca_before
    renewed = _cert(files.cert)
    assert renewed.not_valid_after_utc > cert_before.not_valid_after_utc
    renewed.verify_directly_issued_by(_cert(files.ca))


def test_an_expired_ca_is_made_again_with_a_new_server_certificate(tmp_path: Path) -> None:
    files = tls.local_files(tmp_path)
    ca_before = _cert(files.ca)
    tls.local_files(tmp_path, now=datetime.now(UTC) + timedelta(days=tls.CA_DAYS + 1))
    assert _cert(files.ca).serial_number != ca_before.serial_number
    _cert(files.cert).verify_directly_issued_by(_cert(files.ca))


def test_a_damaged_key_is_replaced(tmp_path: Path) -> None:
    files = tls.local_files(tmp_path)
    files.key.write_text("not a key")
    tls.local_files(tmp_path)
    tls.server_context(files)  # loads again


def test_the_users_own_files_are_checked_at_start(tmp_path: Path) -> None:
    local = tls.local_files(tmp_path / "ca")
    own = tls.user_files(str(local.cert), str(local.key))
    assert own.ca is None
    with pytest.raises(BadInput, match="cannot use the certificate"):
        tls.user_files(str(local.cert), str(tmp_path / "ca" / "ca-key.pem"))  # another key
    with pytest.raises(BadInput, match="cannot use the certificate"):
        tls.user_files(str(tmp_path / "missing.pem"), str(local.key))


def test_servers_starting_together_share_one_ca(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: tls.local_files(tmp_path), range(8)))
    assert len({files.ca for files in made}) == 1
    # Whatever each start loaded, the certificate on disk is signed by the CA on disk.
    _cert(tmp_path / "server.pem").verify_directly_issued_by(_cert(tmp_path / "ca.pem"))
    assert len(list(tmp_path.glob(".*.pem.*"))) == 0  # no temporary files left


def test_the_ca_can_vouch_for_localhost_and_loopback_only(tmp_path: Path) -> None:
    """A critical NameConstraints: a certificate the CA's key signs for any other host is refused."""
    import ipaddress

    from cryptography.hazmat.primitives import serialization

    files = tls.local_files(tmp_path)
    ca = _cert(files.ca)
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_network("127.0.0.0/8")),
        x509.IPAddress(ipaddress.ip_network("::1/128")),
    ]
    assert constraints.value.excluded_subtrees is None
    # Its own server certificate passes; one it signs for another name does not.
    client = ssl.create_default_context(cafile=str(files.ca))
    assert _handshake(client, tls.server_context(files), "localhost").getpeercert() is not None
    ca_key = serialization.load_pem_private_key((tmp_path / "ca-key.pem").read_bytes(), password=None)
    rogue = tmp_path / "rogue"
    rogue.mkdir()
    monkey = pytest.MonkeyPatch()
    monkey.setattr(tls, "SERVER_NAMES", ("login.example.com",))
    try:
        cert, key = tls._make_server((ca, ca_key), datetime.now(UTC))  # type: ignore[arg-type]
    finally:
        monkey.undo()
    tls._write_pair(rogue / "server.pem", rogue / "server-key.pem", cert, key)
    served = tls.server_context(tls.TlsFiles(rogue / "server.pem", rogue / "server-key.pem", None))
    with pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)name constraint|permitted"):
        _handshake(client, served, "login.example.com")


def test_a_ca_made_before_the_name_constraints_is_made_again(tmp_path: Path) -> None:
    files = tls.local_files(tmp_path)
    ca, ca_key = tls._load_pair(files.ca, tmp_path / "ca-key.pem", datetime.now(UTC))  # type: ignore[misc]
    # An unconstrained CA, as earlier releases made it, with its server certificate.
    from cryptography.hazmat.primitives import hashes

    builder = x509.CertificateBuilder().subject_name(ca.subject).issuer_name(ca.issuer).public_key(ca.public_key())
    builder = builder.serial_number(ca.serial_number).not_valid_before(ca.not_valid_before_utc)
    builder = builder.not_valid_after(ca.not_valid_after_utc)
    for ext in ca.extensions:
        if not isinstance(ext.value, x509.NameConstraints):
            builder = builder.add_extension(ext.value, ext.critical)
    tls._write_pair(files.ca, tmp_path / "ca-key.pem", builder.sign(ca_key, hashes.SHA256()), ca_key)
    again = tls.local_files(tmp_path)
    new_ca = _cert(again.ca)
    assert new_ca.extensions.get_extension_for_class(x509.NameConstraints).critical
    assert new_ca.serial_number != ca.serial_number
    _cert(again.cert).verify_directly_issued_by(new_ca)


def test_the_context_is_loaded_while_the_files_are_known_to_match(tmp_path: Path) -> None:
    """Another server renewing the pair after this one's start (its new key in place, its
    certificate not yet) does not reach the context this one serves with."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    files = tls.local_files(tmp_path)
    other_key = ec.generate_private_key(ec.SECP256R1())
    files.key.write_bytes(
        other_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    client = ssl.create_default_context(cafile=str(files.ca))
    assert _handshake(client, tls.server_context(files), "localhost").getpeercert() is not None
