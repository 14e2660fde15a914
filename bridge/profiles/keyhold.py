"""The key held outside: the confined engine talks to the provider through the bridge, which adds the key.

Why: whatever the engine holds, its tools hold too (they run as its children, read its
environment through ``/proc/1/environ``, its config folder through the file system). So the
engine holds a **token**, and the key stays with the bridge. The rules:

1. **One endpoint per engine** (:class:`KeyEndpoint`), plain HTTP/1.1, served by the bridge: on
   ``127.0.0.1`` and a free port when the engine has the host's network; on the unix socket
   ``provider.sock`` in its private config folder under ``--no-network``, where the in-sandbox
   relay (:mod:`bridge.profiles.netjail`) listens on :data:`RELAY_PORT` of the sandbox's own
   loopback and joins each connection to it. Either way Pi's provider ``baseUrl`` is
   ``http://127.0.0.1:PORT/pN`` (one route ``pN`` per provider), written to the private
   ``models.json`` (Pi's docs/models.md: "to route a built-in provider through a proxy, set only
   its ``baseUrl``"); the provider's real base URL stays with the bridge (:class:`Route`).
2. **Tokens, not keys** (:func:`plan`): every secret the engine would hold -- the profile's key
   (``api_key``, or ``api_key_env``'s value) and each ``apiKey`` and header value of the given
   ``models.json`` (literals, and ``$NAME`` / ``${NAME}`` resolved here, as Pi would: docs/
   models.md; ``$$`` and ``$!`` are a literal ``$`` and ``!``) -- is replaced by its own random
   token (``pib-`` and 32 hex digits: 128 bits). ``auth.json``, ``models.json`` and the engine's
   environment hold only those. A ``!command`` value is left as it is (Pi runs it, inside).
3. **The key goes back in at the endpoint**: a request must carry one of the engine's tokens
   in its head (else ``401``); each token, wherever it appears in the request line or a header
   value (``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key``, ``?key=``), is replaced
   by its secret, and the request is forwarded to the route's real base URL (http or https;
   TLS verified by the bridge with the system's certificates: :func:`ssl.create_default_context`).
   Hop-by-hop headers are dropped (RFC 9110 §7.6.1), ``Host`` is the provider's, and
   ``Accept-Encoding: identity`` is asked for so the usage can be read.
4. **Streamed through, scrubbed**: the answer goes back as it comes (``read1``: whatever one
   read of the provider gives, Server-Sent Events unbuffered), re-framed chunked when the
   provider gave no length. A provider may echo the request (a 404 naming the URL, with
   ``?key=`` in it): each secret in the answer's headers and body goes back as its token
   (:class:`_Scrubber`; only the bytes that could begin a secret are held back, until the
   next read tells); a length is then the scrubbed body's. A secret an echo would escape (JSON's
   ``\\u``, URL encoding) is matched only as written (most keys are letters, digits, ``-``, ``_``).
5. **Counted and gated** (:mod:`bridge.core.model_calls`, :mod:`bridge.core.budget` rule 5):
   each forwarded call is reported, with the usage read from its answer, to the bridge
   (:attr:`KeyEndpoint.report`), for the prompt the gate named when the call came. The gate
   (:attr:`KeyEndpoint.gate`) is set by the I/O layer from the supervision's
   ``model_gate()``: while it names no prompt (between prompts, after a receipt, once a prompt is
   stopped) a call is answered ``403`` with a JSON body saying why, and nothing is forwarded.
   The decision is the core's; the endpoint reports and obeys.

Stdlib only (``http.server`` parses the requests, ``http.client`` speaks to the provider): the
project's dependency list (docs: guide/developing.md) needs nothing new for it. Threads, like
the old relay's bridge end: no event loop of its own, :meth:`KeyEndpoint.close` ends them.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from bridge.core.model_calls import UsageReader, priced
from bridge.core.receipts import Usage
from bridge.profiles.command import ProfileError

__all__ = ["RELAY_PORT", "KeyEndpoint", "KeyPlan", "Route", "builtin_model", "hold", "plan"]

#: The port the in-sandbox relay listens on under ``--no-network`` (the sandbox's own loopback:
#: nothing else listens there).
RELAY_PORT: Final = 7707
#: How long the bridge waits to connect to the provider, and for a byte of its answer.
_CONNECT_TIMEOUT = 30.0
_READ_TIMEOUT = 600.0
#: RFC 9110 §7.6.1's hop-by-hop headers, and what the endpoint sets itself.
_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "expect",
    }
)
_TOKEN_RE = re.compile(r"pib-[0-9a-f]{32}")
_VAR_RE = re.compile(r"\$(\$|!|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _token() -> str:
    return "pib-" + secrets.token_hex(16)


@attrs.frozen
class Route:
    """One provider behind the endpoint: ``/NAME/...`` goes to ``upstream`` + ``...``."""

    name: str
    provider: str
    upstream: str
    #: Prices per million tokens by model id (for :func:`~bridge.core.model_calls.priced`).
    costs: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    #: The price when the request names no model the table has (the profile's model's).
    cost: Mapping[str, Any] | None = None


@attrs.frozen
class KeyPlan:
    """What the engine gets instead of its secrets (rule 2)."""

    routes: tuple[Route, ...]
    #: token -> the secret it stands for.
    secrets: Mapping[str, str]
    #: ``models.json`` as the engine sees it, its baseUrls ``{endpoint}/NAME`` to fill in.
    models: dict[str, Any]
    #: The value for ``auth.json`` (the profile key's token), or None: no profile key.
    auth: str | None
    #: What the journal header says (no secret, no token).
    header: dict[str, Any]
    #: Why the profile's provider has no route (its real address is not known), or None.
    unknown: str | None = None

    def models_bytes(self, base: str) -> bytes:
        """The engine's ``models.json`` with the routes at ``base`` (``http://127.0.0.1:PORT``)."""
        models = json.loads(json.dumps(self.models))
        for route in self.routes:
            models["providers"][route.provider]["baseUrl"] = f"{base}/{route.name}"
        return json.dumps(models, indent=2).encode()


def _resolve(value: str, where: str) -> str | None:
    """A models.json value as Pi resolves it (None: a ``!command``, left to Pi)."""
    if value.startswith("!"):
        return None

    def one(m: re.Match[str]) -> str:
        if m[1] in ("$", "!"):
            return m[1]
        name = m[2] or m[3]
        got = os.environ.get(name)
        if got is None:
            raise ProfileError(f"{where} names ${name}, which is not set: set it, or write the value")
        return got

    return _VAR_RE.sub(one, value)


def builtin_model(pi_root: str, provider: str, model: str | None) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """A built-in provider's base URL (the model's, else the first model's) and its prices by
    model id, from Pi's own catalogue (``pi-ai/dist/providers/data/PROVIDER.json``)."""
    path = Path(pi_root) / "node_modules" / "@earendil-works" / "pi-ai" / "dist" / "providers" / "data"
    try:
        data = json.loads((path / f"{provider}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, {}
    entries = [
        entry
        for models in (data.values() if isinstance(data, dict) else ())
        if isinstance(models, dict)
        for entry in models.values()
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    ]
    costs = {e["id"]: e["cost"] for e in entries if isinstance(e.get("cost"), dict)}
    urls = [e["baseUrl"] for e in entries if e["id"] == model and isinstance(e.get("baseUrl"), str) and e["baseUrl"]]
    urls += [e["baseUrl"] for e in entries if isinstance(e.get("baseUrl"), str) and e["baseUrl"]]
    base = urls[0] if urls else None
    return base, costs


def plan(
    *,
    provider: str | None,
    model: str | None,
    key: str | None,
    models: Mapping[str, Any] | None,
    pi_root: str,
) -> KeyPlan:
    """Rules 1 and 2: the routes, the tokens, and what the engine's config holds instead
    (:attr:`KeyPlan.unknown` says so when the provider's real address cannot be known). Raises
    :class:`ProfileError` for a ``$NAME`` that is not set or a base URL that is not http(s)."""
    out: dict[str, Any] = json.loads(json.dumps(models)) if models is not None else {"providers": {}}
    providers: dict[str, Any] = out.setdefault("providers", {})
    tokens: dict[str, str] = {}
    taken: list[str] = []

    def hold(secret: str) -> str:
        for t, s in tokens.items():
            if s == secret:
                return t
        t = _token()
        tokens[t] = secret
        return t

    routes: list[Route] = []
    for name, entry in providers.items():
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("apiKey"), str):
            value = _resolve(entry["apiKey"], f"models.json provider {name!r} apiKey")
            if value is not None:
                entry["apiKey"] = hold(value)
                taken.append(f"{name}.apiKey")
        headers = entry.get("headers")
        if isinstance(headers, dict):
            for h, v in headers.items():
                if isinstance(v, str):
                    value = _resolve(v, f"models.json provider {name!r} header {h}")
                    if value is not None:
                        headers[h] = hold(value)
                        taken.append(f"{name}.headers.{h}")
        base = entry.get("baseUrl")
        if isinstance(base, str) and base:
            costs = {
                m["id"]: m["cost"]
                for m in entry.get("models") or []
                if isinstance(m, dict) and isinstance(m.get("id"), str) and isinstance(m.get("cost"), dict)
            }
            routes.append(Route(f"p{len(routes)}", name, _checked_url(base, name), costs, costs.get(model or "")))
    auth = hold(key) if key is not None else None
    unknown = None
    if provider is not None and not any(r.provider == provider for r in routes):
        base, costs = builtin_model(pi_root, provider, model)
        if base is None or "{" in base:
            unknown = (
                f"the key endpoint does not know where provider {provider!r} is (Pi's catalogue gives no base "
                "URL for it): give its baseUrl in --models-json (docs: guide/own-server.md), or pass "
                "--key-inside to hand the engine the key itself (docs: guide/confinement.md)"
            )
        else:
            if not isinstance(providers.get(provider), dict):
                providers[provider] = {}
            route = Route(f"p{len(routes)}", provider, _checked_url(base, provider), costs, costs.get(model or ""))
            routes.append(route)
    header = {
        "held": "outside",
        "routes": {r.name: f"{r.provider} -> {r.upstream}" for r in routes},
        "taken_out": (["auth.json key"] if key is not None else []) + taken,
    }
    return KeyPlan(tuple(routes), tokens, out, auth, header, unknown)


def hold(
    provider: str | None,
    model: str | None,
    key: str | None,
    models_bytes: bytes | None,
    pi_root: str,
    config: Path,
    *,
    no_network: bool,
) -> tuple[KeyEndpoint, str] | None:
    """One engine's key endpoint, listening (rule 1), and the base URL the engine reaches it at;
    None with the host's network and no secret to hold. Under ``--no-network`` it is always
    there: it is how the engine reaches its provider. Raises :class:`ProfileError` for a
    provider it cannot serve (:attr:`KeyPlan.unknown`)."""
    models = json.loads(models_bytes) if models_bytes is not None else None
    keys = plan(provider=provider, model=model, key=key, models=models, pi_root=pi_root)
    if not keys.secrets and not no_network:
        return None
    if keys.unknown is not None:
        raise ProfileError(keys.unknown)
    if no_network:
        return KeyEndpoint.on_unix(config / "provider.sock", keys), f"http://127.0.0.1:{RELAY_PORT}"
    endpoint = KeyEndpoint.on_loopback(keys)
    return endpoint, f"http://127.0.0.1:{endpoint.port}"


def _checked_url(url: str, provider: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProfileError(f"provider {provider!r} has baseUrl {url!r}: the key endpoint forwards to http(s) URLs only")
    return url.rstrip("/")


# --------------------------------------------------------------------------- the endpoint


class _Scrubber:
    """Rule 4's scrub: each secret in a stream of bytes replaced by its token, across reads."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._pairs = sorted(((s.encode(), t.encode()) for t, s in secrets.items() if s), key=lambda p: -len(p[0]))
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (after what was held) can go out now."""
        data = self._held + data
        for secret, token in self._pairs:
            data = data.replace(secret, token)
        keep = 0
        for secret, _ in self._pairs:  # the longest end of data that begins a secret is held
            for n in range(min(len(secret) - 1, len(data)), keep, -1):
                if data.endswith(secret[:n]):
                    keep = n
                    break
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep] if keep else data

    def end(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def text(self, value: str) -> str:
        for secret, token in self._pairs:
            value = value.replace(secret.decode(), token.decode())
        return value


_tls_context: list[ssl.SSLContext] = []
_tls_lock = threading.Lock()


def _tls() -> ssl.SSLContext:
    """The bridge's TLS context (the system's certificates, names checked): made at the first
    https call, shared after (loading the certificates took ~85 ms: not at every engine start)."""
    with _tls_lock:
        if not _tls_context:
            _tls_context.append(ssl.create_default_context())
        return _tls_context[0]


#: ``report(request, usage)``: a call was forwarded while ``request`` held the gate.
Report = Callable[[str | None, Usage | None], None]


class KeyEndpoint:
    """The bridge's key endpoint (rules 3-5), listening on ``sock`` (a bound, listening socket)."""

    def __init__(self, sock: socket.socket, plan: KeyPlan) -> None:
        self._server = sock
        self.plan = plan
        self._routes = {r.name: r for r in plan.routes}
        self._head_tokens = sorted(plan.secrets, key=len, reverse=True)
        #: The prompt calls are forwarded for (set by the I/O layer; None: refused).
        self.gate: str | None = None
        #: Where forwarded calls are reported (set by the I/O layer when its engine starts).
        self.report: Report | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="pi-bridge-key-endpoint", daemon=True).start()

    @classmethod
    def on_loopback(cls, plan: KeyPlan) -> KeyEndpoint:
        """Listening on 127.0.0.1 and a free port (the engine has the host's network)."""
        sock = socket.create_server(("127.0.0.1", 0))
        return cls(sock, plan)

    @classmethod
    def on_unix(cls, path: Path, plan: KeyPlan) -> KeyEndpoint:
        """Listening on the unix socket ``path`` (0600; ``--no-network``'s relay joins it)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        os.chmod(path, 0o600)
        sock.listen(16)
        return cls(sock, plan)

    @property
    def port(self) -> int | None:
        name = self._server.getsockname()
        return int(name[1]) if isinstance(name, tuple) else None

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            if conn.family != socket.AF_UNIX:
                # Small writes (a chunk's size line, an event) must not wait for the last one's
                # ACK (Nagle's algorithm: +35 ms a call before this, tools/bench/bench_keyhold).
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            _Handler(conn, ("engine", 0), self)
        except Exception:  # a broken connection ends that connection only
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def swap(self, head: str) -> tuple[str, bool]:
        """Rule 3: ``head`` with each token replaced by its secret, and whether one was there."""
        found = False
        for t in self._head_tokens:
            if t in head:
                head, found = head.replace(t, self.plan.secrets[t]), True
        return head, found

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        with self._lock:
            self._closed = True
            conns, self._open = list(self._open), set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        except OSError:
            pass
        self._server.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """One engine connection (keep-alive: several requests), forwarded to the routes' providers."""

    protocol_version = "HTTP/1.1"
    server_version = "pi-bridge-key-endpoint"
    server: Any

    def __init__(self, conn: socket.socket, address: Any, endpoint: KeyEndpoint) -> None:
        self.endpoint = endpoint
        self._upstream: dict[str, http.client.HTTPConnection] = {}
        try:
            super().__init__(conn, address, None)  # type: ignore[arg-type]  # no socketserver
        finally:
            for c in self._upstream.values():
                c.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def address_string(self) -> str:
        return "engine"

    def handle_expect_100(self) -> bool:
        return True  # the body is read whole before anything is forwarded

    def do_GET(self) -> None:
        self._forward()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _refuse(self, status: int, why: str) -> None:
        body = json.dumps({"error": {"message": f"pi-bridge key endpoint: {why}", "type": "pi_bridge_refused"}})
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _forward(self) -> None:
        ep = self.endpoint
        body = self._body()
        head = "\n".join([self.path, *(f"{k}: {v}" for k, v in self.headers.items())])
        _, carried = ep.swap(head)
        if not carried:
            self._refuse(401, "the request carries no token of this engine")
            return
        request = ep.gate
        if request is None:
            self._refuse(403, "no prompt is held: model calls are refused between prompts and after a stop")
            return
        route_name, _, rest = self.path.lstrip("/").partition("/")
        route = ep._routes.get(route_name)
        if route is None:
            self._refuse(404, f"no provider route {route_name!r} (routes: {', '.join(ep._routes)})")
            return
        target = urlsplit(route.upstream)
        path = (target.path.rstrip("/") + "/" + rest) if rest else (target.path or "/")
        path = ep.swap(path)[0]
        headers = [(k, ep.swap(v)[0]) for k, v in self.headers.items() if k.lower() not in _HOP]
        answer = None
        for attempt in (1, 2):
            reused = route.name in self._upstream
            try:
                conn = self._connection(route, target.scheme, target.hostname or "", target.port)
                conn.putrequest(self.command, path, skip_host=True, skip_accept_encoding=True)
                conn.putheader("Host", target.netloc.rpartition("@")[2])
                for k, v in headers:
                    conn.putheader(k, v)
                conn.putheader("Accept-Encoding", "identity")
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                answer = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as e:
                dropped = self._upstream.pop(route.name, None)
                if dropped is not None:
                    dropped.close()
                if not reused or attempt == 2:
                    # A kept-alive connection the provider closed meanwhile is tried again once.
                    self._refuse(502, f"the provider at {route.upstream} could not be reached ({e})")
                    return
        assert answer is not None
        reader = UsageReader(answer.getheader("Content-Type") or "")
        try:
            self._relay(answer, reader)
        finally:
            if answer.will_close:
                self._upstream.pop(route.name, None)
            self._report(route, body, request, reader)

    def _connection(self, route: Route, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        conn = self._upstream.get(route.name)
        if conn is None:
            if scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=_CONNECT_TIMEOUT, context=_tls())
            else:
                conn = http.client.HTTPConnection(host, port, timeout=_CONNECT_TIMEOUT)
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(_READ_TIMEOUT)  # a model may think for minutes between events
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._upstream[route.name] = conn
        return conn

    def _relay(self, answer: http.client.HTTPResponse, reader: UsageReader) -> None:
        """Rule 4: the provider's answer back to the engine as it comes."""
        scrub = _Scrubber(self.endpoint.plan.secrets)
        length = answer.getheader("Content-Length")
        bodiless = self.command == "HEAD" or answer.status in (204, 304) or 100 <= answer.status < 200
        self.send_response_only(answer.status, scrub.text(answer.reason))
        for k, v in answer.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, scrub.text(v))
        body = b""
        if not bodiless and length is not None:
            # A length is the scrubbed body's: read whole (a plain answer, not a stream).
            raw = answer.read()
            reader.feed(raw)
            body = scrub.feed(raw) + scrub.end()
            self.send_header("Content-Length", str(len(body)))
        elif not bodiless:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if bodiless or length is not None:
            self.wfile.write(body)
            self.wfile.flush()
            return
        self.wfile.flush()
        while data := answer.read1(65536):
            reader.feed(data)
            out = scrub.feed(data)
            if out:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(out), out))
                self.wfile.flush()
        tail = scrub.end()
        self.wfile.write((b"%x\r\n%s\r\n" % (len(tail), tail) if tail else b"") + b"0\r\n\r\n")
        self.wfile.flush()

    def _report(self, route: Route, body: bytes, request: str, reader: UsageReader) -> None:
        report = self.endpoint.report
        if report is None:
            return
        usage = reader.usage
        if usage is not None:
            model = None
            try:
                parsed = json.loads(body) if body else None
                model = parsed.get("model") if isinstance(parsed, dict) else None
            except ValueError:
                pass
            cost = route.costs.get(model) if isinstance(model, str) else None
            usage = priced(usage, cost if cost is not None else route.cost)
        report(request, usage)
