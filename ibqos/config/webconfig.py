"""The web configuration file Prometheus exporters share (``--web.config.file``).

node_exporter and the other exporters built on prometheus/exporter-toolkit take one YAML
file for HTTPS and basic authentication; ``metrics.web_config_file`` takes the same file,
so an admin who secures node_exporter on the OpenSM host secures ibqos alike:

.. code-block:: yaml

    tls_server_config:
      cert_file: server.crt          # relative to this file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (the default)
      client_ca_file: clients-ca.crt
      min_version: TLS12
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

Supported: ``tls_server_config`` (``cert_file``, ``key_file``, ``client_ca_file``,
``client_auth_type`` NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert,
``min_version``, ``max_version``) and ``basic_auth_users``.  The rest of the format
(inline ``cert``/``key``, cipher and curve choices, allowed client SANs, HTTP headers,
rate limits) is refused by name rather than ignored: a setting that silently did nothing
could leave the endpoint less protected than its admin thinks.  The file is read when the
config is loaded (and at ``ibqos run``'s start), not at every request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ibqos.errors import ConfigError

__all__ = ["CLIENT_AUTH_TYPES", "TLS_VERSIONS", "WebConfig", "WebTls", "load_web_config"]

#: client_auth_type values ibqos serves: each asks for (or not) and verifies certificates
CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
#: the exporter-toolkit's names of TLS versions
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
#: a bcrypt hash as htpasswd and Go's bcrypt write it: $2a$, $2b$ or $2y$, cost 04-31
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
)
#: keys of the format ibqos does not implement, and what to do instead
_REFUSED = {
    "cert": "give the certificate as cert_file",
    "key": "give the key as key_file",
    "cipher_suites": "ibqos uses Python's default ciphers",
    "curve_preferences": "ibqos uses Python's default curves",
    "prefer_server_cipher_suites": "ibqos uses Python's default ciphers",
    "client_allowed_sans": "restrict clients by the CA in client_ca_file",
    "http_server_config": "ibqos serves HTTP/1.1 with no extra headers",
    "rate_limit": "ibqos serves every scrape",
}


@dataclass(frozen=True)
class WebTls:
    """``tls_server_config``: HTTPS, and which client certificates to ask for.

    Attributes:
        cert_file: the server's certificate chain (PEM).
        key_file: its private key (PEM).
        client_auth_type: one of :data:`CLIENT_AUTH_TYPES`.
        client_ca_file: the CA client certificates are verified against; None with
            NoClientCert.
        min_version, max_version: one of :data:`TLS_VERSIONS`; max None: the newest.
    """

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True)
class WebConfig:
    """One web configuration file.

    Attributes:
        path: where it was read from.
        tls: HTTPS; None: plain HTTP.
        users: user name -> bcrypt hash of the password; empty: no authentication.
    """

    path: Path
    tls: WebTls | None = None
    users: Mapping[str, str] = field(default_factory=dict, repr=False)


def load_web_config(path: Path) -> WebConfig:
    """Read and check the web configuration file at *path*.

    Raises:
        ConfigError: unreadable, not YAML, an unknown or unsupported key, a bad value,
            a file it names that cannot be read; the message names the file and key.
    """
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {err}") from err
    doc = {} if doc is None else doc
    where = f"{path}: "
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}expected a mapping of tls_server_config, basic_auth_users")
    _known(doc, ("tls_server_config", "basic_auth_users"), where)
    base = path.parent
    tls = None
    if doc.get("tls_server_config") is not None:
        tls = _tls(doc["tls_server_config"], base, f"{where}tls_server_config.")
    users = _users(doc.get("basic_auth_users"), f"{where}basic_auth_users")
    return WebConfig(path, tls, users)


def _known(doc: dict[Any, Any], keys: tuple[str, ...], where: str) -> None:
    for key in doc:
        if key in _REFUSED:
            raise ConfigError(f"{where}{key}: not supported by ibqos ({_REFUSED[key]})")
        if key not in keys:
            raise ConfigError(f"{where}{key}: unknown key (expected {', '.join(keys)})")


def _tls(doc: Any, base: Path, where: str) -> WebTls:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where.rstrip('.')}: expected a mapping")
    _known(doc, _TLS_KEYS, where)
    for key in ("cert_file", "key_file"):
        if not doc.get(key):
            raise ConfigError(f"{where}{key}: required for HTTPS")
    auth = doc.get("client_auth_type") or "NoClientCert"
    if auth not in CLIENT_AUTH_TYPES:
        raise ConfigError(
            f"{where}client_auth_type: expected one of {', '.join(CLIENT_AUTH_TYPES)},"
            f" got {auth!r} (ibqos verifies every client certificate it asks for)"
        )
    ca = _file(doc, "client_ca_file", base, where) if doc.get("client_ca_file") else None
    if auth != "NoClientCert" and ca is None:
        raise ConfigError(f"{where}client_ca_file: required with client_auth_type {auth}")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", None)):
        value = doc.get(key) or default
        if value is not None and value not in TLS_VERSIONS:
            raise ConfigError(
                f"{where}{key}: expected one of {', '.join(TLS_VERSIONS)}, got {value!r}"
            )
        versions[key] = value
    low, high = versions["min_version"], versions["max_version"]
    if high is not None and TLS_VERSIONS.index(high) < TLS_VERSIONS.index(low or "TLS12"):
        raise ConfigError(f"{where}max_version: {high} is below min_version {low}")
    return WebTls(
        _file(doc, "cert_file", base, where),
        _file(doc, "key_file", base, where),
        auth,
        ca,
        low or "TLS12",
        high,
    )


def _file(doc: dict[str, Any], key: str, base: Path, where: str) -> Path:
    """A file the config names, relative to the config's directory (as exporters read
    it), that can be opened now."""
    value = doc[key]
    if not isinstance(value, str):
        raise ConfigError(f"{where}{key}: expected a file name")
    file = base / Path(value).expanduser()
    try:
        with open(file, "rb"):
            pass
    except OSError as err:
        raise ConfigError(f"{where}{key}: cannot read {file}: {err.strerror}") from err
    return file


def _users(doc: Any, where: str) -> dict[str, str]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a mapping of user names to bcrypt hashes")
    users: dict[str, str] = {}
    for user, hashed in doc.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(f"{where}: {user!r}: a user name is text without ':'")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            # the hash is a secret too: never in a message
            raise ConfigError(
                f"{where}.{user}: not a bcrypt hash ($2y$10$ and 53 characters;"
                " htpasswd -nBC 10 \"\" | tr -d ':\\n' makes one)"
            )
        users[user] = hashed
    return users
