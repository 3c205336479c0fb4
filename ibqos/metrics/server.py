"""The HTTP(S) endpoint Prometheus scrapes: ``/metrics`` of one agent.

The page is the text format (0.0.4): the agent's own registry rendered by
prometheus-client's ``generate_latest``, then the snapshot's text, rendered once per
snapshot (``ibqos.metrics.families``; ~10x faster than the generic path at 80k series),
gzipped when the scraper accepts it, as Prometheus does.  A scraper whose Accept header
asks for OpenMetrics (Prometheus does, first) gets it, chosen as prometheus-client's own
exposition chooses (``choose_encoder``); the snapshot's part is then rendered by
prometheus-client, once per snapshot and content type.

prometheus-client's ``start_http_server`` serves TLS (and client certificates) but has no
basic authentication, so the app is served by the standard library's WSGI server, the
pieces prometheus-client uses too, with a basic-auth check in front
(:mod:`ibqos.metrics.auth`).  HTTPS and users come from the web configuration file
exporters share (``metrics.web_config_file``), or from ``metrics.tls`` and
``metrics.basic_auth``.
"""

from __future__ import annotations

import gzip
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import (
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
)

from ibqos.config.models import MetricsConfig
from ibqos.config.webconfig import WebTls
from ibqos.errors import ExporterError
from ibqos.metrics.auth import App, Environ, StartResponse, basic_auth, bcrypt_auth
from ibqos.metrics.health import AgentMetrics

__all__ = [
    "Exporter",
    "metrics_app",
]

log = logging.getLogger(__name__)


#: seconds a client may take for its TLS handshake or its request
CLIENT_TIMEOUT_S = 10.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper never holds up the daemon's exit

    def finish_request(self, request: Any, client_address: Any) -> None:
        # In the connection's own thread: the TLS handshake (deferred from accept, where
        # one silent client would block every other scrape), with a time limit.
        request.settimeout(CLIENT_TIMEOUT_S)
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError) as err:
                log.debug("metrics: TLS handshake with %s failed: %s", client_address, err)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, not socketserver's traceback on stderr: a scraper that times out or
        hangs up is the client's trouble and must not flood the journal."""
        err = sys.exc_info()[1]
        if isinstance(err, OSError):  # timeouts, resets, broken pipes
            log.debug("metrics: client %s: %s", client_address, err)
        else:
            log.warning("metrics: client %s: %s: %s", client_address, type(err).__name__, err)


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """One access line per scrape would flood the journal."""


def metrics_app(metrics: AgentMetrics) -> App:
    """The WSGI app: ``/metrics`` (and ``/``) of *metrics*; 404 elsewhere."""

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"404 Not Found: try /metrics\n"]
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        if content_type.startswith("application/openmetrics-text"):
            own = encoder(metrics.own).removesuffix(b"# EOF\n")
            body = own + metrics.snapshot.encoded(encoder, content_type) + b"# EOF\n"
        else:  # the text format 0.0.4, whatever text version was asked: Prometheus reads it
            body = generate_latest(metrics.own) + metrics.snapshot.text()
            content_type = CONTENT_TYPE_PLAIN_0_0_4  # what generate_latest writes
        headers = [("Content-Type", content_type)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)  # level 1: 5x smaller at little CPU
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]

    return app


def _tls_of(cfg: MetricsConfig) -> WebTls | None:
    """HTTPS as configured: the web configuration file's, else ``metrics.tls``'s."""
    if cfg.web is not None:
        return cfg.web.tls
    if cfg.tls is None:
        return None
    auth = "NoClientCert" if cfg.tls.client_ca_file is None else "RequireAndVerifyClientCert"
    return WebTls(cfg.tls.cert_file, cfg.tls.key_file, auth, cfg.tls.client_ca_file)


def _context(tls: WebTls) -> ssl.SSLContext:
    """The server's TLS context (raises OSError or ssl.SSLError on a bad file)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = _VERSIONS[tls.min_version]
    if tls.max_version is not None:
        ctx.maximum_version = _VERSIONS[tls.max_version]
    ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    if tls.client_ca_file is not None and tls.client_auth_type != "NoClientCert":
        ctx.verify_mode = (
            ssl.CERT_REQUIRED
            if tls.client_auth_type == "RequireAndVerifyClientCert"
            else ssl.CERT_OPTIONAL  # VerifyClientCertIfGiven
        )
        ctx.load_verify_locations(cafile=str(tls.client_ca_file))
    return ctx


#: the web configuration file's TLS version names
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


class Exporter:
    """Serves *app* on ``cfg.listen`` in a background thread until :meth:`close`.

    Raises:
        ExporterError: the address cannot be bound or the TLS files do not load.
    """

    def __init__(self, app: App, cfg: MetricsConfig) -> None:
        if cfg.listen is None:
            raise ExporterError("metrics.listen: the exporter is turned off")
        host, port = cfg.listen
        if cfg.web is not None and cfg.web.users:
            app = bcrypt_auth(app, cfg.web.users)
        elif cfg.basic_auth is not None:
            app = basic_auth(app, cfg.basic_auth.username, cfg.basic_auth.password)
        tls = _tls_of(cfg)

        class Server(_Server):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            self.httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
        except OSError as err:
            raise ExporterError(f"metrics.listen: cannot listen on {host}:{port}: {err}") from err
        try:
            if tls is not None:
                ctx = _context(tls)
                self.httpd.socket = ctx.wrap_socket(
                    self.httpd.socket, server_side=True, do_handshake_on_connect=False
                )
        except (OSError, ssl.SSLError) as err:
            self.httpd.server_close()
            key = "metrics.web_config_file" if cfg.web is not None else "metrics.tls"
            raise ExporterError(f"{key}: cannot load the certificate or key: {err}") from err
        self.scheme = "https" if tls is not None else "http"
        self.host = host
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="ibqos-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on %s://%s:%d/metrics", self.scheme, host, self.port)

    @property
    def url(self) -> str:
        """Where ``/metrics`` is served."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
