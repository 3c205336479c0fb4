"""The exporter's endpoint: plain, basic auth, TLS with and without client certificates,
and the metrics config section's errors."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

from ibqos.config.load import parse_config
from ibqos.errors import ConfigError, ExporterError
from ibqos.metrics.auth import bcrypt_checker
from ibqos.metrics.server import Exporter


def registry():
    """A WSGI app serving one gauge (the endpoint's transport does not care which app)."""
    reg = CollectorRegistry()
    Gauge("ibqos_test_value", "A value for the endpoint tests.", registry=reg).set(42)
    return make_wsgi_app(reg)


def metrics_cfg(tmp_path: Path, **section: object):
    return parse_config({"metrics": {"listen": "127.0.0.1:0", **section}}, "c.yaml").metrics


def get(url: str, headers: dict[str, str] | None = None, context=None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def test_plain_http_serves_the_registry(tmp_path: Path) -> None:
    exp = Exporter(registry(), metrics_cfg(tmp_path))
    try:
        status, body = get(exp.url)
        assert status == 200 and "ibqos_test_value 42.0" in body
        assert exp.url == f"http://127.0.0.1:{exp.port}/metrics" and exp.port > 0
    finally:
        exp.close()
    with pytest.raises(urllib.error.URLError):  # the port is released
        urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=2)


def test_basic_auth(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\nignored second line\n")
    exp = Exporter(
        registry(), metrics_cfg(tmp_path, basic_auth={"username": "prom", "password_file": str(pw)})
    )

    def auth(user: str, password: str) -> dict[str, str]:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    try:
        assert get(exp.url)[0] == 401
        assert get(exp.url, auth("prom", "wrong"))[0] == 401
        assert get(exp.url, auth("other", "s3cret"))[0] == 401
        assert get(exp.url, {"Authorization": "Basic !!notbase64"})[0] == 401
        status, body = get(exp.url, auth("prom", "s3cret"))
        assert status == 200 and "ibqos_test_value" in body
    finally:
        exp.close()


def _cert(tmp_path: Path, name: str, ca: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    """A self-signed (or CA-signed) certificate for 127.0.0.1 and its key, by openssl."""
    crt, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    base = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
    args = [*base, "-keyout", str(key), "-out", str(crt), "-subj", f"/CN={name}"]
    args += ["-addext", "subjectAltName=IP:127.0.0.1"]
    if ca is not None:
        args += ["-CA", str(ca[0]), "-CAkey", str(ca[1])]
    subprocess.run(args, check=True, capture_output=True)
    return crt, key


def test_tls_and_client_certificates(tmp_path: Path) -> None:
    ca = _cert(tmp_path, "ca")
    server = _cert(tmp_path, "server", ca)
    client = _cert(tmp_path, "client", ca)
    tls = {"cert_file": str(server[0]), "key_file": str(server[1])}
    exp = Exporter(registry(), metrics_cfg(tmp_path, tls=tls))
    trust = ssl.create_default_context(cafile=str(ca[0]))
    try:
        assert exp.url.startswith("https://")
        with socket.create_connection(("127.0.0.1", exp.port)):  # silent: no handshake
            assert get(exp.url, context=trust)[0] == 200  # it does not hold others up
        assert get(exp.url, context=trust)[0] == 200
        with pytest.raises(urllib.error.URLError):  # an untrusting client refuses it
            get(exp.url, context=ssl.create_default_context())
    finally:
        exp.close()
    mutual = Exporter(registry(), metrics_cfg(tmp_path, tls=tls | {"client_ca_file": str(ca[0])}))
    try:
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            get(mutual.url, context=trust)  # no client certificate: refused
        trust.load_cert_chain(str(client[0]), str(client[1]))
        assert get(mutual.url, context=trust)[0] == 200
    finally:
        mutual.close()


def test_a_taken_port_and_a_bad_key_are_clear_errors(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = parse_config({"metrics": {"listen": f"127.0.0.1:{port}"}}, "c.yaml").metrics
        with pytest.raises(
            ExporterError, match=f"metrics.listen: cannot listen on 127.0.0.1:{port}"
        ):
            Exporter(registry(), cfg)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cfg = metrics_cfg(tmp_path, tls={"cert_file": str(junk), "key_file": str(junk)})
    with pytest.raises(ExporterError, match=r"metrics\.tls: cannot load the certificate or key"):
        Exporter(registry(), cfg)


def test_the_section_s_defaults_and_values(tmp_path: Path) -> None:
    cfg = parse_config({}, "c.yaml").metrics
    assert cfg.listen == ("127.0.0.1", 9683)  # loopback only unless told
    assert (cfg.fabric, cfg.per_port, cfg.tls, cfg.basic_auth) == ("default", False, None, None)
    assert parse_config({"metrics": {"listen": ""}}, "c.yaml").metrics.listen is None
    six = parse_config({"metrics": {"listen": "[::1]:9100", "fabric": "f1"}}, "c.yaml").metrics
    assert six.listen == ("::1", 9100) and six.fabric == "f1"
    pw = tmp_path / "pw"
    pw.write_text("Zq7-hush\n")
    auth = metrics_cfg(tmp_path, basic_auth={"username": "u", "password_file": str(pw)})
    assert auth.basic_auth is not None and auth.basic_auth.password == "Zq7-hush"
    assert "Zq7-hush" not in repr(auth)  # never in a log line


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"listen": "9683"}, "metrics.listen: expected host:port"),
        ({"listen": "localhost:http"}, "metrics.listen: expected host:port"),
        ({"listen": "127.0.0.1:70000"}, "metrics.listen: expected host:port"),
        ({"per_port": "yes"}, "metrics.per_port: expected true or false"),
        ({"port": 1}, "metrics.port: unknown key"),
        ({"tls": {"cert_file": "/nonexistent.crt", "key_file": "/k"}}, "metrics.tls.cert_file"),
        ({"tls": {"cert": "/x"}}, "metrics.tls.cert: unknown key"),
        ({"basic_auth": {"username": "u"}}, "metrics.basic_auth.password_file: expected"),
        (
            {"basic_auth": {"username": "u", "password_file": "/nonexistent"}},
            "metrics.basic_auth.password_file: cannot read /nonexistent",
        ),
    ],
)
def test_bad_values_name_their_key(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_config({"metrics": section}, "c.yaml")


def test_an_empty_password_file_is_refused(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("\n")
    with pytest.raises(ConfigError, match="has no password on its first line"):
        metrics_cfg(tmp_path, basic_auth={"username": "u", "password_file": str(pw)})


# bcrypt of "scrape-me" (cost 5), as htpasswd -nBC 5 writes it ($2y$)
SCRAPER_HASH = "$2y$05$ibqosTestSaltForBcrypudrPOsr9em872azV7Ipseqd1rjiB7vVe"


def _auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_the_exporters_web_config_file_tls_and_bcrypt_users(tmp_path: Path) -> None:
    ca = _cert(tmp_path, "ca")
    _cert(tmp_path, "server", ca)
    client = _cert(tmp_path, "client", ca)
    web = tmp_path / "web.yml"
    # node_exporter's format; file names relative to the file's own directory
    web.write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  client_ca_file: ca.crt\n"
        "  min_version: TLS12\n"
        "basic_auth_users:\n"
        f"  prometheus: {SCRAPER_HASH}\n"
    )
    cfg = metrics_cfg(tmp_path, web_config_file=str(web))
    assert cfg.web is not None and cfg.web.tls is not None
    assert SCRAPER_HASH not in repr(cfg)  # never in a log line
    exp = Exporter(registry(), cfg)
    trust = ssl.create_default_context(cafile=str(ca[0]))
    try:
        assert exp.url.startswith("https://")
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            get(exp.url, _auth("prometheus", "scrape-me"), context=trust)  # no client cert
        trust.load_cert_chain(str(client[0]), str(client[1]))
        assert get(exp.url, context=trust)[0] == 401
        assert get(exp.url, _auth("prometheus", "wrong"), context=trust)[0] == 401
        assert get(exp.url, _auth("nobody", "scrape-me"), context=trust)[0] == 401
        for _ in range(2):  # the second time from the remembered check
            status, body = get(exp.url, _auth("prometheus", "scrape-me"), context=trust)
            assert status == 200 and "ibqos_test_value" in body
    finally:
        exp.close()


def test_users_without_tls_and_a_known_bcrypt_vector(tmp_path: Path) -> None:
    # the OpenBSD/John the Ripper test vector: "U*U" under $2a$05$CCC...
    vector = "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"
    check = bcrypt_checker()
    assert check(b"U*U", vector.encode()) and not check(b"U*V", vector.encode())
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  a: {vector}\n  b: '{SCRAPER_HASH}'\n")
    exp = Exporter(registry(), metrics_cfg(tmp_path, web_config_file=str(web)))
    try:
        assert exp.url.startswith("http://")
        assert get(exp.url)[0] == 401
        assert get(exp.url, _auth("a", "U*U"))[0] == 200
        assert get(exp.url, _auth("b", "scrape-me"))[0] == 200
        assert get(exp.url, _auth("a", "scrape-me"))[0] == 401
    finally:
        exp.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("basic_auth_users:\n  u: plain\n", "basic_auth_users.u: not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: x.crt\n", "tls_server_config.key_file: required"),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            "tls_server_config.cert_file: cannot read",
        ),
        ("rate_limit:\n  burst: 20\n", "rate_limit: not supported by ibqos"),
        ("http_server_config:\n  http2: false\n", "http_server_config: not supported"),
        ("tls_config:\n  cert_file: x\n", "tls_config: unknown key"),
        ("- a\n", "expected a mapping"),
        ("a: [\n", "not YAML"),
    ],
)
def test_a_bad_web_config_file_names_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(text)
    with pytest.raises(ConfigError) as err:
        metrics_cfg(tmp_path, web_config_file=str(web))
    assert f"c.yaml: metrics.web_config_file: {web}: " in str(err.value)
    assert message in str(err.value)
    assert "plain" not in str(err.value)  # a secret, even a wrong one, is not echoed


def test_client_auth_types_and_tls_versions(tmp_path: Path) -> None:
    ca = _cert(tmp_path, "ca")
    _cert(tmp_path, "server", ca)
    web = tmp_path / "web.yml"
    base = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    for extra, message in (
        ("  client_auth_type: RequireAnyClientCert\n", "client_auth_type: expected one of"),
        ("  client_auth_type: RequireAndVerifyClientCert\n", "client_ca_file: required"),
        ("  min_version: TLS9\n", "min_version: expected one of TLS10"),
        ("  min_version: TLS13\n  max_version: TLS12\n", "max_version: TLS12 is below"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "cipher_suites: not supported"),
    ):
        web.write_text(base + extra)
        with pytest.raises(ConfigError, match=message):
            metrics_cfg(tmp_path, web_config_file=str(web))
    web.write_text(base + "  min_version: TLS13\n")
    exp = Exporter(registry(), metrics_cfg(tmp_path, web_config_file=str(web)))
    old = ssl.create_default_context(cafile=str(ca[0]))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        assert get(exp.url, context=ssl.create_default_context(cafile=str(ca[0])))[0] == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            get(exp.url, context=old)  # TLS 1.2 refused
    finally:
        exp.close()


def test_the_old_keys_still_work_but_not_beside_the_web_config_file(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: {SCRAPER_HASH}\n")
    old = {"basic_auth": {"username": "prom", "password_file": str(pw)}}
    assert metrics_cfg(tmp_path, **old).web is None
    with pytest.raises(
        ConfigError, match=r"metrics\.web_config_file: set HTTPS and users in the web"
    ):
        metrics_cfg(tmp_path, web_config_file=str(web), **old)
