"""The key endpoint's parts in memory (issue 41; ``bridge/profiles/keyhold.py``,
``bridge/core/model_calls.py``): what takes the key's place in the engine's config, where the
key goes back in, the gate, and the usage read from a provider's answer. The real-Pi half is
tests/test_hostile_key.py."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.core.model_calls import UsageReader, priced
from bridge.core.receipts import Usage
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.profiles.command import ProfileError
from bridge.profiles.keyhold import KeyEndpoint, plan
from bridge.profiles.pi import default_pi_dir

KEY = "sk-the-real-key-0123456789"


def test_openai_stream_usage_is_read_across_reads_and_cached_tokens_apart() -> None:
    body = (
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,'
        b'"prompt_tokens_details":{"cached_tokens":40}}}\n\ndata: [DONE]\n\n'
    )
    reader = UsageReader("text/event-stream; charset=utf-8")
    for i in range(0, len(body), 5):  # in small pieces, as a stream comes
        reader.feed(body[i : i + 5])
    assert reader.usage == Usage(input=60, output=7, cache_read=40, total_tokens=107)


def test_anthropic_stream_usage_merges_message_start_and_the_last_delta() -> None:
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 1}}},
        {"type": "content_block_delta", "delta": {"text": "x"}},
        {"type": "message_delta", "usage": {"output_tokens": 9}},
    ]  # fmt: skip
    reader = UsageReader("text/event-stream")
    reader.feed(b"".join(b"event: e\r\ndata: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events))
    assert reader.usage == Usage(input=20, output=9, cache_read=5, total_tokens=34)


def test_the_scrubber_finds_a_secret_split_across_reads_and_holds_back_only_a_possible_start() -> None:
    from bridge.profiles.keyhold import _Scrubber

    scrub = _Scrubber({"pib-t": "SECRET"})
    assert scrub.feed(b"abc SEC") == b"abc "  # "SEC" may begin the secret: held
    assert scrub.feed(b"RET def S") == b"pib-t def "
    assert scrub.feed(b"x") == b"Sx" and scrub.end() == b""
    assert scrub.text("a SECRET b") == "a pib-t b"


def test_openai_responses_and_google_usage() -> None:
    completed = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 10}}},
    }
    reader = UsageReader("text/event-stream")
    reader.feed(b'event: response.created\ndata: {"type":"response.created"}\n\n')
    reader.feed(b"event: response.completed\ndata: " + json.dumps(completed).encode() + b"\n\n")
    assert reader.usage == Usage(input=40, output=5, cache_read=10, total_tokens=55)
    google = UsageReader("text/event-stream")
    for n in (3, 8):  # each chunk's usage so far; the last is the call's
        meta = {
            "promptTokenCount": 30,
            "cachedContentTokenCount": 4,
            "candidatesTokenCount": n,
            "thoughtsTokenCount": 2,
        }
        google.feed(b"data: " + json.dumps({"candidates": [], "usageMetadata": meta}).encode() + b"\r\n\r\n")
    assert google.usage == Usage(input=26, output=10, cache_read=4, total_tokens=40)


def test_a_plain_answer_an_unknown_one_and_prices() -> None:
    reader = UsageReader("application/json")
    reader.feed(json.dumps({"usage": {"prompt_tokens": 1000, "completion_tokens": 50}}).encode())
    usage = reader.usage
    assert usage is not None and usage.total_tokens == 1050
    assert priced(usage, {"input": 10.0, "output": 30.0}).cost == pytest.approx(0.0115)
    unknown = UsageReader("application/json")
    unknown.feed(b'{"candidates": []}')
    assert unknown.usage is None  # a call all the same, with no usage (rule 3)


def test_the_plan_puts_tokens_where_the_secrets_were(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADER_SECRET", "hs-1")
    models = models_json("https://models.example.com/v1")
    models["providers"]["scripted"]["apiKey"] = "$$lit$!x"
    models["providers"]["scripted"]["headers"] = {"X-Team": "${HEADER_SECRET}", "X-Cmd": "!echo hi"}
    keys = plan(provider="scripted", model="scripted-model", key=KEY, models=models, pi_root="/nowhere")
    held = json.loads(keys.models_bytes("http://127.0.0.1:1"))["providers"]["scripted"]
    assert held["baseUrl"] == "http://127.0.0.1:1/p0"
    assert sorted(keys.secrets.values()) == sorted([KEY, "$lit!x", "hs-1"])
    assert keys.secrets[held["apiKey"]] == "$lit!x" and keys.secrets[held["headers"]["X-Team"]] == "hs-1"
    assert held["headers"]["X-Cmd"] == "!echo hi"  # a command is Pi's to run (inside)
    assert keys.auth is not None and keys.secrets[keys.auth] == KEY
    assert KEY not in json.dumps(keys.header) and keys.unknown is None
    [route] = keys.routes
    assert route.upstream == "https://models.example.com/v1"
    with pytest.raises(ProfileError, match=r"\$NOPE"):
        models["providers"]["scripted"]["apiKey"] = "$NOPE"
        plan(provider="scripted", model="scripted-model", key=None, models=models, pi_root="/nowhere")


def test_a_built_in_provider_is_routed_to_pis_own_base_url() -> None:
    root = default_pi_dir()
    if root is None or not (root / "node_modules").is_dir():
        pytest.skip("no pinned Pi in tools/pi")
    keys = plan(provider="anthropic", model=None, key=KEY, models=None, pi_root=str(root))
    assert [(r.provider, r.upstream) for r in keys.routes] == [("anthropic", "https://api.anthropic.com")]
    assert keys.models == {"providers": {"anthropic": {}}}  # its baseUrl alone is set
    odd = plan(provider="no-such-provider", model="m", key=KEY, models=None, pi_root=str(root))
    assert odd.unknown is not None and "--key-inside" in odd.unknown


def call(port: int, path: str, headers: dict[str, str], body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = json.dumps(body or {"model": "scripted-model", "messages": [], "stream": False}).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **headers})
    answer = conn.getresponse()
    out = answer.status, answer.read()
    conn.close()
    return out


def test_the_endpoint_swaps_the_token_wherever_it_is_and_obeys_its_gate() -> None:
    server = start_server(
        [], default={"text": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}, require_key=KEY
    )
    keys = plan(provider="scripted", model="scripted-model", key=KEY, models=models_json(server.base_url), pi_root="/")
    endpoint = KeyEndpoint.on_loopback(keys)
    reports: list[tuple[str | None, Usage | None]] = []
    endpoint.report = lambda request, usage: reports.append((request, usage))
    assert endpoint.port is not None and keys.auth is not None
    token, port = keys.auth, endpoint.port
    try:
        # The gate is closed until the bridge opens it: refused, nothing forwarded.
        status, body = call(port, "/p0/chat/completions", {"Authorization": f"Bearer {token}"})
        assert status == 403 and b"no prompt is held" in body and server.requests == []
        endpoint.gate = "p1"
        assert call(port, "/p0/chat/completions", {"Authorization": "Bearer sk-guess"})[0] == 401
        for headers, path in [
            ({"Authorization": f"Bearer {token}"}, "/p0/chat/completions"),
            ({"x-api-key": token}, "/p0/chat/completions"),
            ({}, f"/p0/chat/completions?key={token}"),
        ]:
            status, body = call(port, path, headers)
            assert status == 200, body
        assert [r["key"] for r in server.requests] == [KEY, KEY, KEY]
        # The endpoint reports a call once it has relayed the answer's end, from its own
        # thread: the client may read that end first (seen under load). Bounded wait.
        deadline = time.monotonic() + 10
        while len(reports) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(r, u.total_tokens if u else None) for r, u in reports] == [("p1", 12)] * 3
        # A provider that echoes the request (a 404 naming the URL) echoes the token, not the key.
        status, body = call(port, f"/p0/no-such-route?key={token}", {})
        assert status == 404 and KEY.encode() not in body and token.encode() in body, body
        endpoint.gate = None
        assert call(port, "/p0/chat/completions", {"x-api-key": token})[0] == 403
        assert len([r for r in server.requests if "/chat/completions" in r["path"]]) == 3
    finally:
        endpoint.close()
        server.close()


def test_what_the_endpoint_cannot_serve_is_refused_in_one_line(pinned_pi: object, tmp_path: Path) -> None:
    """Fail closed: a provider whose address the bridge cannot know, with a key to hold, is a
    refusal naming the fixes (never the key handed to the engine unasked); ``--key-inside``
    does not go with ``--no-network``."""
    from bridge.profiles.pi import PiProfile
    from bridge.profiles.sandbox import Sandbox

    with pytest.raises(ProfileError, match="does not know where provider 'no-such-provider' is"):
        PiProfile(provider="no-such-provider", model="m", api_key=KEY).prepare()
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json("http://127.0.0.1:9/v1")))
    profile = PiProfile(
        models_json=str(models), provider="scripted", model="scripted-model", key_inside=True,
        sandbox=Sandbox(network=False),
    )  # fmt: skip
    with pytest.raises(ProfileError, match="--key-inside and --no-network do not go together"):
        profile.prepare()


def test_the_bridge_verifies_the_providers_certificate(tmp_path: Path) -> None:
    """https upstream: the TLS is the bridge's, verified (a self-signed certificate is refused,
    502 naming why), never relaxed for the engine."""
    import shutil
    import ssl
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    seen: list[str] = []

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"https://127.0.0.1:{httpd.server_address[1]}/v1"
    keys = plan(provider="scripted", model="scripted-model", key=KEY, models=models_json(base), pi_root="/")
    endpoint = KeyEndpoint.on_loopback(keys)
    endpoint.gate = "p1"
    try:
        assert endpoint.port is not None and keys.auth is not None
        status, body = call(endpoint.port, "/p0/chat/completions", {"Authorization": f"Bearer {keys.auth}"})
        assert status == 502 and b"CERTIFICATE_VERIFY_FAILED" in body, body
        assert seen == []  # nothing (no key) was sent to a server that could not prove its name
    finally:
        endpoint.close()
        httpd.shutdown()
        httpd.server_close()
