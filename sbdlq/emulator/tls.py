"""The emulator's TLS identity: a local CA and a `localhost` server certificate, or the user's own.

`emulator serve --tls` needs a certificate clients can verify without turning verification
off. On first use this module makes a small CA and a server certificate it signs (SAN:
`localhost`, `127.0.0.1`, `::1`), kept in the user state dir (`.../sbdlq/tls/`, private keys
0600) and reused by later starts; an expired (or soon expiring) one is made again. The CA
can sign for nothing but `localhost` and loopback addresses (a critical NameConstraints). Clients
trust the CA file (`sbdlq emulator ca` prints its path). The crypto is the `cryptography`
package's; nothing here is home-made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from sbdlq.errors import BadInput

if TYPE_CHECKING:  # imported where used: serve without --tls never loads cryptography
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

#: how long the CA and the server certificate are valid; the server one stays under the
#: 825 days some clients (macOS, iOS) accept for a TLS server certificate
CA_DAYS = 3650
SERVER_DAYS = 397
#: a certificate expiring sooner than this is made again at start (a server runs for days)
RENEW_BEFORE = timedelta(days=7)
#: the names the server certificate is valid for
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1", "::1")
#: all the CA may ever sign for (a critical NameConstraints): a copy of its key, or a CA
#: trusted system-wide by mistake, vouches for no other host
CA_PERMITTED_NAMES = ("localhost",)
CA_PERMITTED_NETWORKS = ("127.0.0.0/8", "::1/128")

_CA_CERT, _CA_KEY = "ca.pem", "ca-key.pem"
_SERVER_CERT, _SERVER_KEY = "server.pem", "server-key.pem"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """What a TLS listener serves: its certificate chain and key, and the CA clients trust (None: the user's own).

    `context` is the server context loaded from the files when they were known to match (for
    the local CA's, under the lock: another server renewing them later cannot pair one's new
    key with the other's old certificate).
    """

    cert: Path
    key: Path
    ca: Path | None
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)


def tls_dir() -> Path:
    """Where the local CA and the server certificate live (the user state dir)."""
    from sbdlq.statedir import state_dir

    return state_dir("tls")


def ca_path(folder: Path | None = None) -> Path:
    """The local CA certificate's path (it may not exist yet: `serve --tls` makes it)."""
    return (folder or tls_dir()) / _CA_CERT


def local_files(folder: Path | None = None, *, now: datetime | None = None) -> TlsFiles:
    """The local CA and server certificate, made now if missing, unreadable or about to expire."""
    folder = folder or tls_dir()
    now = now or datetime.now(UTC)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Two servers starting at once must not each make a CA: the second would sign the first's
        # certificate out of the trusted file.
        with _locked(folder / ".lock"):
            ca = _load_pair(folder / _CA_CERT, folder / _CA_KEY, now)
            if ca is None or not _constrained(ca[0]):  # one made before the constraint: made again
                ca = _make_ca(now)
                _write_pair(folder / _CA_CERT, folder / _CA_KEY, *ca)
            server = _load_pair(folder / _SERVER_CERT, folder / _SERVER_KEY, now)
            if server is None or not _issued_by(server[0], ca[0]):
                _write_pair(folder / _SERVER_CERT, folder / _SERVER_KEY, *_make_server(ca, now))
            files = TlsFiles(cert=folder / _SERVER_CERT, key=folder / _SERVER_KEY, ca=folder / _CA_CERT)
            # Loaded before the lock is let go: until then no other start can replace the pair.
            return replace(files, context=_load_context(files))
    except OSError as exc:
        raise BadInput(
            f"cannot keep the emulator's TLS certificates in {folder}: {exc.strerror or exc}",
            hint="pass your own with --cert and --cert-key",
        ) from exc


def user_files(cert: str, key: str) -> TlsFiles:
    """The user's own certificate chain and key, checked now (BadInput when they do not load)."""
    files = TlsFiles(cert=Path(cert), key=Path(key), ca=None)
    return replace(files, context=_load_context(files))


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The server-side context of the files: the one loaded with them, else loaded now (BadInput
    when they cannot be read or do not match)."""
    return files.context if files.context is not None else _load_context(files)


def _load_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except (OSError, ssl.SSLError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(
            f"cannot use the certificate {files.cert} with the key {files.key}: {detail}",
            hint="give a PEM certificate (chain) and its unencrypted PEM private key",
        ) from exc
    return context


# ---------------------------------------------------------------------- making and keeping


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on path for the block (POSIX; elsewhere the block runs unlocked)."""
    try:
        import fcntl
    except ImportError:  # Windows: a simultaneous first start is the only race, and rare
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


Pair = tuple["x509.Certificate", "ec.EllipticCurvePrivateKey"]


def _load_pair(cert_path: Path, key_path: Path, now: datetime) -> Pair | None:
    """A certificate and its key from disk, if both load, match and are valid for a while yet."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    if not cert.not_valid_before_utc <= now or cert.not_valid_after_utc - RENEW_BEFORE <= now:
        return None
    return cert, key


def _constrained(ca: x509.Certificate) -> bool:
    """Whether the CA carries the critical NameConstraints that keep it to this machine."""
    from cryptography import x509

    try:
        extension = ca.extensions.get_extension_for_class(x509.NameConstraints)
    except x509.ExtensionNotFound:
        return False
    return extension.critical and extension.value == _name_constraints()


def _name_constraints() -> x509.NameConstraints:
    from cryptography import x509

    permitted: list[x509.GeneralName] = [x509.DNSName(n) for n in CA_PERMITTED_NAMES]
    permitted += [x509.IPAddress(ipaddress.ip_network(n)) for n in CA_PERMITTED_NETWORKS]
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None)


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except Exception:  # InvalidSignature, or a key of another type: not issued by it
        return False
    return True


def _write_pair(cert_path: Path, key_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """Write the key (0600) then the certificate, each to a temporary name and renamed into place."""
    from cryptography.hazmat.primitives import serialization

    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _replace(key_path, pem_key, mode=0o600)
    _replace(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)


def _replace(path: Path, data: bytes, *, mode: int) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    # Created with its final mode: a private key is never readable by others, not even for a moment.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(partial, mode)  # an existing partial file kept its old mode
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def _make_ca(now: datetime) -> Pair:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sbdlq"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"sbdlq emulator local CA ({now:%Y-%m-%d})"),
        ]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(_name_constraints(), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _make_server(ca: Pair, now: datetime) -> Pair:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
    not_after = min(now + timedelta(days=SERVER_DAYS), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key
