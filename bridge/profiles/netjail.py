"""``--no-network``: the confined engine reaches the bridge's key endpoint and nothing else.

How (rule 7 of :mod:`bridge.profiles.sandbox`):

- The sandbox gets its own network namespace (``bwrap --unshare-net``): only a loopback
  interface, nothing routed out. Every other address, local ports of this machine included,
  is unreachable from the engine and its tools.
- Inside the namespace, :data:`RELAY_JS` (run by Pi's own Node, a child of the sandbox's
  init) listens on ``127.0.0.1`` and :data:`~bridge.profiles.keyhold.RELAY_PORT` and joins each
  connection to a unix socket in the engine's private config folder. Outside, the bridge's
  key endpoint (:class:`~bridge.profiles.keyhold.KeyEndpoint`) serves that socket: it puts the
  key in and forwards each call to the provider's real base URL (any host, http or https:
  the relay carries plain HTTP to the bridge, and TLS is the bridge's). Pi's provider
  ``baseUrl`` names the relay. Until the key endpoint, the bridge joined the relay to the
  provider's TCP port as it was, so only a provider on this machine's loopback could be used
  (its TLS name could not be kept): that limit is gone.
"""

from __future__ import annotations

import shlex
from typing import Final

__all__ = ["RELAY_JS", "relay_lines"]

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

#: How long the sandbox's init waits for the relay before it starts Pi anyway (then Pi's
#: requests fail and say so): 500 × 10 ms.
_READY_TRIES = 500


def relay_lines(node: str, sock: str, ready: str, port: int, hosts: list[str]) -> str:
    """The ``sh`` lines that start the relay in the sandbox and wait until it listens."""
    q = shlex.quote
    argv = " ".join(q(a) for a in [node, "-e", RELAY_JS, sock, ready, str(port), *hosts])
    return (
        f"{argv} </dev/null >/dev/null 2>&1 &\n"
        f"i=0; while [ ! -e {q(ready)} ] && [ $i -lt {_READY_TRIES} ]; do sleep 0.01; i=$((i+1)); done\n"
    )
