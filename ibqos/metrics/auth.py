"""HTTP basic authentication for the endpoint: a plaintext password, or bcrypt hashes.

``metrics.basic_auth`` holds one user and a password read from a file; the web
configuration file (``metrics.web_config_file``, :mod:`ibqos.config.webconfig`) holds
users and bcrypt hashes, as node_exporter's does.  bcrypt is checked by the Python
package ``bcrypt`` when it is installed, else by the C library's ``crypt(3)``
(libxcrypt, which every current Linux distribution ships, knows ``$2b$``/``$2y$``).

A bcrypt check costs tens of milliseconds by design; a scraper sends the same
credentials every few seconds, so a good pair is remembered (as a SHA-256 of user,
password and hash, never the password itself) and checked once.  A user that does not
exist costs a bcrypt check too, so that timings do not tell which users exist.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import ctypes.util
import hashlib
import hmac
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ibqos.errors import ExporterError

__all__ = ["basic_auth", "bcrypt_auth", "bcrypt_checker"]

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]
Checker = Callable[[bytes, bytes], bool]

#: a known pair: the password "ibqos" at cost 4, to test a checker and to spend the time
#: of a check on a user that does not exist
_PROBE = (b"ibqos", b"$2b$04$ibqosProbeSaltForBcrye/LWENejNaxdp7CyBDZrScvRj.nffxLW")
#: remembered good credentials, at most (a few scrapers use one or two)
_REMEMBERED = 64


def bcrypt_checker() -> Checker:
    """``check(password, hash)`` by the bcrypt package, else by the system's crypt(3).

    Raises:
        ExporterError: neither is there, or neither knows bcrypt.
    """
    for make in (_package, _libcrypt):
        check = make()
        if check is not None and check(*_PROBE) and not check(b"other", _PROBE[1]):
            return check
    raise ExporterError(
        "metrics.web_config_file: basic_auth_users needs bcrypt: install the Python package"
        " bcrypt (this system's crypt(3) does not know $2b$ hashes)"
    )


def _package() -> Checker | None:
    try:
        bcrypt: Any = importlib.import_module("bcrypt")
    except ImportError:
        return None

    def check(password: bytes, hashed: bytes) -> bool:
        try:
            return bool(bcrypt.checkpw(password, hashed))
        except ValueError:  # a malformed hash
            return False

    return check


def _libcrypt() -> Checker | None:
    name = ctypes.util.find_library("crypt")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    crypt = lib.crypt
    crypt.restype = ctypes.c_char_p
    crypt.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
    lock = threading.Lock()  # crypt(3) returns a static buffer

    def check(password: bytes, hashed: bytes) -> bool:
        if b"\0" in password:
            return False  # C would see a shorter password
        with lock:
            out: bytes | None = crypt(password, hashed)
        return out is not None and hmac.compare_digest(out, hashed)

    return check


def _credentials(environ: Environ) -> tuple[bytes, bytes] | None:
    """(user, password) of a Basic Authorization header; None without a valid one."""
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        given = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = given.partition(b":")
    return (user, password) if colon else None


def _refuse(start_response: StartResponse) -> list[bytes]:
    start_response(
        "401 Unauthorized",
        [("WWW-Authenticate", 'Basic realm="ibqos"'), ("Content-Type", "text/plain")],
    )
    return [b"401 Unauthorized\n"]


def basic_auth(app: App, username: str, password: str) -> App:
    """*app* behind HTTP basic authentication with one plaintext password."""
    expected = f"{username}:{password}".encode()

    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        given = _credentials(environ)
        # constant time, so the password cannot be guessed byte by byte from timings
        if given is not None and hmac.compare_digest(b":".join(given), expected):
            return app(environ, start_response)
        return _refuse(start_response)

    return guarded


def bcrypt_auth(app: App, users: Mapping[str, str], check: Checker | None = None) -> App:
    """*app* behind HTTP basic authentication: user names and bcrypt hashes.

    Args:
        app: the app to guard.
        users: user name -> bcrypt hash.
        check: ``check(password, hash)``; None: :func:`bcrypt_checker`.

    Raises:
        ExporterError: no bcrypt implementation here.
    """
    checker = check if check is not None else bcrypt_checker()
    hashes = {user.encode(): hashed.encode() for user, hashed in users.items()}
    good: dict[bytes, None] = {}  # digests of good credentials, oldest first
    lock = threading.Lock()

    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        given = _credentials(environ)
        if given is None:
            return _refuse(start_response)
        user, password = given
        hashed = hashes.get(user)
        digest = hashlib.sha256(b"\0".join((user, password, hashed or b""))).digest()
        with lock:
            known = digest in good
        if not known:
            # a missing user costs a check too: the timing does not tell who exists
            ok = checker(password, hashed if hashed is not None else _PROBE[1])
            if not ok or hashed is None:
                return _refuse(start_response)
            with lock:
                good[digest] = None
                while len(good) > _REMEMBERED:
                    del good[next(iter(good))]
        return app(environ, start_response)

    return guarded
