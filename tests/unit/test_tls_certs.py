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
    server = tls.server_context(files)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    back_in, back_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname="localhost")
    s = server.wrap_bio(back_in, back_out, server_side=True)
    for _ in range(10):  # pump the handshake between the two in memory
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        back_in.write(outgoing.read())
        incoming.write(back_out.read())
    c.do_handshake()
    assert c.getpeercert() is not None


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
