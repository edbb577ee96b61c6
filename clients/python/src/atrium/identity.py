"""Who this client is, and which hosts it knows: the same files, in the same folder, as the
``atrium`` tool and the Swift client, so a device paired with one is paired with the other.

- ``$XDG_STATE_HOME/atrium`` (or ``~/.local/state/atrium``), mode 0700;
- ``client-key.pem``: a P-256 key (PKCS#8 PEM, mode 0600), made at first use;
- ``client-cert.pem``: a self-signed certificate for it;
- ``known-hosts.json``: address (``host:port``) or ``id:HOSTID`` → the identity the host
  proved when this client paired with it.

An identity is the SHA-256 of a certificate's SubjectPublicKeyInfo, in lowercase hex.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .errors import AtriumError


def default_state_folder() -> Path:
    """``$XDG_STATE_HOME/atrium`` when that is an absolute path, else ``~/.local/state/atrium``."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if state.startswith("/"):
        return Path(state) / "atrium"
    return Path.home() / ".local" / "state" / "atrium"


def fingerprint_of_certificate(der: bytes) -> str:
    """The identity a DER certificate carries: SHA-256 of its SubjectPublicKeyInfo, hex."""
    certificate = x509.load_der_x509_certificate(der)
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest()


def _prepare_folder(folder: Path) -> None:
    try:
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        status = os.lstat(folder)
    except OSError as error:
        raise AtriumError("identity", f"cannot make the folder {folder}: {error.strerror}") from error
    if not stat.S_ISDIR(status.st_mode):
        raise AtriumError("identity", f"{folder} is not a folder (a link or a file is not used for an identity)")
    if status.st_uid not in (os.geteuid(), 0):
        raise AtriumError(
            "identity",
            f"{folder} belongs to uid {status.st_uid}, not to this user (uid {os.geteuid()}): "
            "another user could change the identity in it")
    if status.st_mode & 0o022:
        raise AtriumError(
            "identity",
            f"{folder} may be written by other users (mode {status.st_mode & 0o777:o}): run chmod 700 on it")


def _read_private(path: Path, must_be_private: bool = True) -> bytes:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise AtriumError("identity", f"cannot read {path}: {error.strerror}") from error
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise AtriumError("identity", f"{path} is not a regular file")
        if status.st_uid != os.geteuid():
            raise AtriumError(
                "identity",
                f"{path} belongs to uid {status.st_uid}, not to this user (uid {os.geteuid()}): "
                "remove it to make a new identity")
        if must_be_private and status.st_mode & 0o077:
            raise AtriumError(
                "identity",
                f"{path} may be read by other users (mode {status.st_mode & 0o777:o}): run chmod 600 on it, "
                "or remove it to make a new identity")
        if status.st_size > 64 << 10:
            raise AtriumError("identity", f"{path} is too large for a key or certificate")
        return os.read(descriptor, status.st_size)
    finally:
        os.close(descriptor)


def _write_new(path: Path, data: bytes) -> None:
    """Writes `data` to a new file of mode 0600 through a temporary name, synced, then
    renamed over `path`."""
    temporary = Path(f"{path}.new-{os.getpid()}")
    try:
        temporary.unlink()
    except FileNotFoundError:
        pass
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(descriptor, data)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.rename(temporary, path)
    except OSError as error:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise AtriumError("identity", f"cannot write {path}: {error.strerror}") from error


@dataclass(frozen=True)
class ClientIdentity:
    """This client's key and certificate, and where they are kept."""

    key_file: Path
    certificate_file: Path
    #: The identity: SHA-256 of the certificate's SubjectPublicKeyInfo, lowercase hex.
    fingerprint: str

    @property
    def folder(self) -> Path:
        return self.key_file.parent

    @classmethod
    def load_or_create(cls, folder: Optional[Path] = None, name: str = "client") -> "ClientIdentity":
        """The identity kept in `folder` (the default state folder without it) as
        ``NAME-key.pem`` and ``NAME-cert.pem``, made there at first use. A certificate that is
        missing or not the key's is made again from the key: the identity is the key's."""
        folder = Path(folder) if folder is not None else default_state_folder()
        _prepare_folder(folder)
        key_file = folder / f"{name}-key.pem"
        certificate_file = folder / f"{name}-cert.pem"
        if not key_file.exists():
            cls._create_key(key_file)
        text = _read_private(key_file)
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as error:
            raise AtriumError("identity", f"{key_file} is not an unencrypted private key in PEM ({error}): "
                              "remove it to make a new identity") from error
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise AtriumError("identity", f"{key_file} is not a P-256 private key")
        spki = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        fingerprint = hashlib.sha256(spki).hexdigest()
        try:
            existing = x509.load_pem_x509_certificate(_read_private(certificate_file, must_be_private=False))
            if fingerprint_of_certificate(existing.public_bytes(serialization.Encoding.DER)) == fingerprint:
                return cls(key_file, certificate_file, fingerprint)
        except (AtriumError, ValueError):
            pass
        _write_new(certificate_file, cls._certificate(key, f"atrium client on {socket.gethostname()}"))
        return cls(key_file, certificate_file, fingerprint)

    @staticmethod
    def _create_key(path: Path) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        temporary = Path(f"{path}.new-{os.getpid()}")
        _write_new(temporary, pem)
        try:
            # link() never replaces: of two processes starting at once, the first key stays.
            os.link(temporary, path)
        except FileExistsError:
            pass
        except OSError as error:
            raise AtriumError("identity", f"cannot write {path}: {error.strerror}") from error
        finally:
            temporary.unlink()

    @staticmethod
    def _certificate(key: ec.EllipticCurvePrivateKey, common_name: str) -> bytes:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            # RFC 5280 4.1.2.5: a certificate with no well-defined expiry.
            .not_valid_after(datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                    encipher_only=False, decipher_only=False),
                critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .sign(key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM)


def canonical_host(host: str) -> str:
    """An IP address in its one canonical spelling (as ``inet_ntop`` writes it), a name in
    lower case."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, host))
        except (OSError, ValueError):
            continue
    return host.lower()


def address_key(host: str, port: int) -> str:
    """How an address is kept in ``known-hosts.json``: ``host:port``, ``[v6]:port``."""
    host = canonical_host(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class KnownHosts:
    """``known-hosts.json`` in a client's state folder (mode 0600): the identity each host
    proved when this client paired with it, by address and by host id."""

    def __init__(self, folder: Optional[Path] = None) -> None:
        self.file = (Path(folder) if folder is not None else default_state_folder()) / "known-hosts.json"

    def all(self) -> Dict[str, str]:
        try:
            text = self.file.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise AtriumError("identity", f"cannot read {self.file}: {error.strerror}") from error
        try:
            hosts = json.loads(text)
        except ValueError as error:
            raise AtriumError("identity", f"{self.file} is not a list of known hosts ({error}): fix it or remove it")
        if not isinstance(hosts, dict) or not all(isinstance(v, str) for v in hosts.values()):
            raise AtriumError("identity", f"{self.file} is not a list of known hosts: fix it or remove it")
        return hosts

    def identity_of(self, host: str, port: int) -> Optional[str]:
        """The identity the host at this address proved when this client paired with it."""
        return self.all().get(address_key(host, port))

    def identity_of_host_id(self, host_id: str) -> Optional[str]:
        """The identity the host with this id (``welcome.hostId``) proved at pairing; an id
        that is a UUID matches in any case."""
        hosts = self.all()
        found = hosts.get("id:" + host_id)
        if found is None:
            canonical = host_id.strip().lower()
            found = next((value for key, value in hosts.items() if key.lower() == "id:" + canonical), None)
        return found

    def is_paired(self, identity: str) -> bool:
        """Whether this client paired with a host of `identity`, at any address."""
        return any(not key.startswith("refused:") and value == identity for key, value in self.all().items())

    def remember(self, identity: str, host: str, port: int, host_id: Optional[str] = None) -> None:
        """Remembers `identity` for an address and a host id (after a pairing)."""
        hosts = self.all()
        hosts[address_key(host, port)] = identity
        if host_id is not None:
            hosts["id:" + host_id] = identity
        hosts.pop("refused:" + identity, None)
        self._save(hosts)

    def forget(self, host: str, port: int) -> bool:
        """Forgets an address (before pairing again with a host that made a new key on
        purpose); whether it was known."""
        hosts = self.all()
        if hosts.pop(address_key(host, port), None) is None:
            return False
        self._save(hosts)
        return True

    def _save(self, hosts: Dict[str, str]) -> None:
        _prepare_folder(self.file.parent)
        _write_new(self.file, (json.dumps(hosts, indent=2, sort_keys=True) + "\n").encode("utf-8"))
