"""``--no-network``: the confined engine reaches its provider and nothing else.

How (rule 7 of :mod:`bridge.profiles.sandbox`):

- The sandbox gets its own network namespace (``bwrap --unshare-net``): only a loopback
  interface, nothing routed out. Every other address, local ports of this machine included,
  is unreachable from the engine and its tools.
- The provider's address is the ``baseUrl`` of the provider in the given ``models.json``
  (Pi's ``docs/models.md``), and must be on this machine's loopback (``127.0.0.1``, ``::1``,
  ``localhost``: a vLLM, Ollama or llama.cpp server, the scripted model server). A provider
  on another host is refused: its TLS name would have to be kept (Pi cannot be pointed at a
  relay without breaking the certificate check, and Node only honours a proxy from the
  environment on request), and that is not built (docs: guide/confinement.md says so).
- Inside the namespace, :data:`RELAY_JS` (run by Pi's own Node, a child of the sandbox's
  init) listens on the provider's host and port and joins each connection to a unix socket
  in the engine's private config folder. Outside, :class:`ProviderLink` (a thread of the
  bridge) accepts on that socket and joins each connection to the provider's host and port —
  that one address, nothing else. Pi keeps its ``baseUrl`` unchanged.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import socket
import threading
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bridge.profiles.command import ProfileError

__all__ = ["RELAY_JS", "ProviderLink", "provider_address", "relay_lines"]

#: Inside the sandbox: ``node -e RELAY_JS SOCKET READY PORT HOST…``. Listens on each HOST:PORT,
#: joins every connection to SOCKET, and creates READY once every listener is up (or failed).
RELAY_JS: Final = r"""
const net = require("net"), fs = require("fs");
const [sock, ready, port, ...hosts] = process.argv.slice(1);
let settled = 0;
const done = () => { if (++settled === hosts.length) fs.writeFileSync(ready, ""); };
for (const host of hosts) {
  net.createServer((c) => {
    const u = net.connect(sock);
    c.on("error", () => u.destroy());
    u.on("error", () => c.destroy());
    c.pipe(u);
    u.pipe(c);
  }).once("error", done).listen(Number(port), host, done);
}
"""

_LOOPBACK_NAMES = {"localhost": ["127.0.0.1", "::1"]}
#: How long the sandbox's init waits for the relay before it starts Pi anyway (then Pi's
#: requests fail and say so): 500 × 10 ms.
_READY_TRIES = 500


def provider_address(provider: str | None, models_json: bytes | None) -> tuple[str, int, list[str]]:
    """The provider's loopback host, port, and the addresses to listen on inside the sandbox.
    Raises :class:`ProfileError` when ``--no-network`` cannot keep the provider reachable."""
    refuse = (
        "--no-network keeps only a provider on this machine reachable: give --models-json with a provider "
        "whose baseUrl is on 127.0.0.1, ::1 or localhost (docs: guide/confinement.md)"
    )
    if models_json is None or provider is None:
        raise ProfileError(f"{refuse}; no --models-json and --provider were given")
    try:
        entry: Any = json.loads(models_json)["providers"][provider]
        url = urlsplit(str(entry["baseUrl"]))
        port = url.port or (443 if url.scheme == "https" else 80)
    except (KeyError, TypeError, ValueError) as e:
        raise ProfileError(f"{refuse}; models.json gives provider {provider!r} no usable baseUrl ({e})") from None
    host = url.hostname or ""
    if host in _LOOPBACK_NAMES:
        return host, port, _LOOPBACK_NAMES[host]
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host, port, [host]
    except ValueError:
        pass
    raise ProfileError(f"{refuse}; provider {provider!r} is at {host}")


def relay_lines(node: str, sock: str, ready: str, port: int, hosts: list[str]) -> str:
    """The ``sh`` lines that start the relay in the sandbox and wait until it listens."""
    q = shlex.quote
    argv = " ".join(q(a) for a in [node, "-e", RELAY_JS, sock, ready, str(port), *hosts])
    return (
        f"{argv} </dev/null >/dev/null 2>&1 &\n"
        f"i=0; while [ ! -e {q(ready)} ] && [ $i -lt {_READY_TRIES} ]; do sleep 0.01; i=$((i+1)); done\n"
    )


class ProviderLink:
    """The bridge's end of the relay: accepts on a unix socket (0600, in the engine's private
    config folder) and joins each connection to ``host:port``. Threads, so it needs no event
    loop; :meth:`close` ends them (the launch's cleanup calls it)."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = str(path), host, port
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        os.chmod(self.path, 0o600)
        self._server.listen(16)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="pi-bridge-provider-link", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._join, args=(conn,), daemon=True).start()

    def _join(self, inside: socket.socket) -> None:
        try:
            outside = socket.create_connection((self.host, self.port), timeout=10)
            outside.settimeout(None)
        except OSError:
            inside.close()
            return
        with self._lock:
            if self._closed:
                inside.close()
                outside.close()
                return
            self._open.update((inside, outside))
        back = threading.Thread(target=_pump, args=(outside, inside), daemon=True)
        back.start()
        _pump(inside, outside)
        back.join()
        with self._lock:
            self._open.difference_update((inside, outside))
        inside.close()
        outside.close()

    def close(self) -> None:
        """Stop accepting and cut every joined connection."""
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
            c.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until EOF or an error, then half-close ``dst``."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
