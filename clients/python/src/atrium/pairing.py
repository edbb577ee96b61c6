"""The verification code a pairing shows on both sides (CONTRACT section 7, SECURITY.md):
six digits from the two identities and, in a committed pairing, the two nonces."""
from __future__ import annotations

import hashlib
import secrets
from typing import Iterable


def _digits(parts: Iterable[str]) -> str:
    digest = hashlib.sha256(b"\x00".join(part.lower().encode("utf-8") for part in parts)).digest()
    return f"{int.from_bytes(digest[:4], 'big') % 1_000_000:06d}"


def code(host: str, client: str, client_nonce: str, host_nonce: str) -> str:
    """The code of a committed pairing: SHA-256 over ``atrium-pairing-v2``, the host's
    identity, the client's, the client's nonce and the host's, each after a NUL; its first
    four bytes, big-endian, modulo one million, as six digits."""
    return _digits(["atrium-pairing-v2", host, client, client_nonce, host_nonce])


def code_without_commitment(host: str, client: str) -> str:
    """The code of a pairing without a commitment (weaker; see SECURITY.md)."""
    return _digits(["atrium-pairing-v1", host, client])


def commitment(nonce: str) -> str:
    """What a client sends in ``pair`` for its `nonce`: SHA-256 of
    ``atrium-pairing-commit-v1``, a NUL and the nonce, in lowercase hex."""
    return hashlib.sha256(b"atrium-pairing-commit-v1\x00" + nonce.lower().encode("ascii")).hexdigest()


def make_nonce() -> str:
    """32 random bytes in lowercase hex."""
    return secrets.token_hex(32)


def is_well_formed(text: str) -> bool:
    """Whether `text` is a nonce or commitment as sent: 64 lowercase hex digits."""
    return len(text) == 64 and all(character in "0123456789abcdef" for character in text)
