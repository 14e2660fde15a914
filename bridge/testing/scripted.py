"""The scripted model server for the length of a block: what a user's tests run Pi against,
offline (``docs/pages/guide/testing.md`` shows it; the step format is
:mod:`bridge.demo.model_server.script`'s, typed here as :class:`Step`).

:class:`ScriptedModel` starts :func:`bridge.demo.model_server.start_server` -- a stdlib HTTP
server in a daemon thread of this process, on 127.0.0.1 and a free port -- writes the Pi
``models.json`` naming it into a temporary folder of its own, and at the block's end stops the
server (its threads joined) and removes that folder. In a thread, not a subprocess: nothing to
find on ``PATH``, no port to read back, and what the server saw is this process's memory
(:attr:`ScriptedModel.requests`). The same object is a ``with`` and an ``async with`` block, so it
serves trio, asyncio and plain tests alike; ``bridge.testing.pytest_plugin`` makes it a fixture.

It imports neither trio nor the bridge until asked (:meth:`ScriptedModel.profile` loads the Pi
profile): ``import bridge.testing`` stays cheap.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import attrs

from bridge.demo.model_server.script import validate_step
from bridge.demo.model_server.server import (
    DEFAULT_MODEL_ID,
    DEFAULT_PROVIDER,
    ServerHandle,
    start_server,
    write_models,
)

if TYPE_CHECKING:
    from typing import Unpack

    from bridge.profiles.pi import PiOptions, PiProfile

__all__ = ["ScriptedModel", "SeenRequest", "Step", "ToolCall", "Usage"]


class ToolCall(TypedDict, total=False):
    """One function call in a step's ``tool_call`` (or ``tool_calls``)."""

    #: The tool's name: one of Pi's (``bash``, ``read``, ``write``, ``edit``, ...). Required.
    name: str
    #: Its arguments: an object (sent as its JSON) or a string sent as it is (``{}`` if left out).
    arguments: dict[str, Any] | str
    #: The call's id (default ``call_scripted_N_J``).
    id: str


class Usage(TypedDict, total=False):
    """A step's ``usage``: the token counts the reply reports (default: about four characters a token)."""

    prompt_tokens: int
    completion_tokens: int
    #: Sent as ``prompt_tokens_details.cached_tokens`` (Pi's cache reads).
    cached_tokens: int


class Step(TypedDict, total=False):
    """One scripted reply: what the server answers to one chat-completions request.

    Keys combine where it makes sense (text then a tool call; a slow stream of many words);
    any key not here is refused when the :class:`ScriptedModel` is made.
    """

    #: The assistant's text.
    text: str
    #: Instead of ``text``: a deterministic text of N words (the same N, the same text).
    words: int
    #: Thinking text, streamed before the reply (``reasoning_content``: Pi's thinking block).
    reasoning: str
    #: One function call (the finish reason becomes ``tool_calls``); may follow ``text``.
    tool_call: ToolCall
    #: Several calls (after ``tool_call``, if both are given).
    tool_calls: list[ToolCall]
    #: Characters per streamed delta (default 8); tool-call arguments stream in pieces this size.
    chunk: int
    #: Seconds between streamed chunks (default 0).
    delay: float
    #: Seconds before anything is sent (the headers included).
    latency: float
    #: The final finish reason (e.g. ``length``) instead of ``stop`` / ``tool_calls``.
    finish_reason: str
    #: The token counts to report.
    usage: Usage
    #: Send the usage so far in every chunk, not only the last (a stream stopped midway has
    #: usage to report, as vLLM's continuous usage stats do).
    running_usage: bool
    #: Answer with this HTTP status (300 or more) and an OpenAI-style error body, no content.
    status: int
    #: The error's body: an object (sent as JSON) or a string (sent as it is).
    body: str | dict[str, Any]
    #: Extra response headers (e.g. ``{"retry-after": "0"}``).
    headers: dict[str, str]
    #: Read the request, then never answer (until the client goes or the server stops).
    hang: Literal[True]
    #: Stream this many chunks (the role chunk included), then stall without finishing.
    hang_after: int
    #: Stream this many chunks, then drop the connection (a network error).
    cut_after: int
    #: Ignored: a note for whoever reads the script.
    comment: str


@attrs.frozen
class SeenRequest:
    """One request the server saw, in the order it came.

    Attributes:
        method: ``POST`` or ``GET``.
        path: ``/v1/chat/completions``, ``/v1/models``, ...
        body: The parsed JSON body (None for none, or a body that is not JSON).
        step: The index of the script step that answered it (None: the default step, or no step).
        time: When it came (``time.time()``).
        key: The API key it carried (``Authorization: Bearer``, ``x-api-key`` or ``?key=``), or None.
    """

    method: str
    path: str
    body: Any
    step: int | None
    time: float
    key: str | None = None

    @property
    def is_completion(self) -> bool:
        """A chat-completions request (the kind that takes a step)."""
        return self.method == "POST" and self.path.rstrip("/").endswith("/chat/completions")

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation the request carried (``body["messages"]``: system, user,
        assistant and tool messages), ``[]`` if none."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return list(messages) if isinstance(messages, list) else []

    @property
    def user_text(self) -> str | None:
        """The text of the conversation's last user message (the prompt, for the first request
        of a run), or None if it has none."""
        for message in reversed(self.messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
        return None


def _text_of(content: Any) -> str:
    """A message's text: a string, or the ``text`` parts of a list of parts, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class ScriptedModel:
    """The scripted OpenAI-compatible model server, for the length of a block.

    ``with ScriptedModel(steps) as model:`` (or ``async with``) starts it on 127.0.0.1 with
    the script ``steps``, one per chat-completions request in order, then ``default`` for every
    request after them; the block gets the started object, and its end stops the server and
    removes the temporary folder holding ``models.json``, however the block ends.

    Args:
        steps: The script: each a :class:`Step`.
        default: The step that answers once the script is used up (default ``{"text": "ok"}``).
        model_id: The model's id, in ``models.json`` and ``/v1/models``.
        provider: The provider's name in ``models.json``.
        cost: The model's prices per million tokens (``input``, ``output``, ``cacheRead``,
            ``cacheWrite``; default 0), from which Pi computes a reply's cost.
        require_key: The API key a chat-completions request must carry (else it is answered
            401 and takes no step); give the same to the profile (``api_key``). What each
            request carried is :attr:`SeenRequest.key`.

    Attributes:
        model_id: The model's id.
        provider: The provider's name.

    Raises:
        ValueError: A step is not a JSON object of the keys a :class:`Step` has (at once,
            before anything starts).
    """

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        default: Step | None = None,
        model_id: str = DEFAULT_MODEL_ID,
        provider: str = DEFAULT_PROVIDER,
        cost: dict[str, float] | None = None,
        require_key: str | None = None,
    ) -> None:
        self._steps = [validate_step(dict(s)) for s in steps]
        self.require_key = require_key
        self._default = validate_step(dict(default)) if default is not None else None
        self.model_id = model_id
        self.provider = provider
        self._cost = cost
        self._server: ServerHandle | None = None
        self._folder: str | None = None
        self._models_json: str | None = None
        #: What the server saw, kept when it stops.
        self._seen: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        where = self._server.base_url if self._server is not None else "not running"
        return f"ScriptedModel({len(self._steps)} steps, {where})"

    # -- the block ---------------------------------------------------------------------

    def start(self) -> ScriptedModel:
        """Start the server and write ``models.json`` (what entering the block does); returns
        self. For a fixture of one's own: :meth:`close` undoes it."""
        if self._server is not None:
            raise RuntimeError("this ScriptedModel is running already")
        folder = tempfile.mkdtemp(prefix="pi-bridge-scripted-")
        try:
            server = start_server(self._steps, self._default, model_id=self.model_id, require_key=self.require_key)
            try:
                path = write_models(folder, server.base_url, self.provider, self.model_id, self._cost)
            except BaseException:
                server.close()
                raise
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._server, self._folder, self._models_json = server, folder, path
        return self

    def close(self) -> None:
        """Stop the server (its threads joined, at most about 5 s) and remove ``models.json``'s
        folder. A second call changes nothing; :attr:`requests` stays readable."""
        server, folder = self._server, self._folder
        if server is None:
            return
        self._seen = server.requests
        self._server = None
        try:
            server.close()
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> ScriptedModel:
        """Start the server, as ``with`` does: it listens before this returns at once."""
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the server and remove its folder; ends when the server's thread has ended (waited
        for in a worker thread, off the event loop's, under trio or asyncio)."""
        import sniffio

        library = sniffio.current_async_library()
        if library == "trio":
            import trio

            await trio.to_thread.run_sync(self.close)
        else:
            import asyncio

            await asyncio.to_thread(self.close)

    # -- what the block gets -----------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's base URL, ``http://127.0.0.1:PORT/v1`` (what ``models.json`` names)."""
        return self._running().base_url

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._running().port

    @property
    def models_json(self) -> str:
        """The path of the Pi ``models.json`` that points Pi at this server (removed at the block's end)."""
        self._running()
        assert self._models_json is not None
        return self._models_json

    def profile(self, **options: Unpack[PiOptions]) -> PiProfile:
        """The sealed, pinned Pi against this server, to pass to ``open_bridge`` or ``query``:
        :func:`bridge.profiles.pi.scripted_profile` on :attr:`models_json`, its provider and
        model this server's.

        Args:
            **options: Any of ``PiProfile``'s other fields, e.g. ``pi_dir``, ``cwd`` or
                ``settings`` (which replaces the fast retries ``scripted_profile`` sets).
        """
        from bridge.profiles.pi import scripted_profile

        chosen: dict[str, Any] = {"provider": self.provider, "model": self.model_id, **options}
        return scripted_profile(self.models_json, **chosen)

    @property
    def requests(self) -> list[SeenRequest]:
        """Every request the server has seen so far (after the block: all it saw), in order."""
        seen = self._server.requests if self._server is not None else self._seen
        return [
            SeenRequest(r["method"], r["path"], r.get("body"), r.get("step"), float(r.get("time", 0.0)), r.get("key"))
            for r in seen
        ]

    @property
    def completions(self) -> list[SeenRequest]:
        """The chat-completions requests among :attr:`requests`: one per model call (a tool call's
        result comes back as the next one)."""
        return [r for r in self.requests if r.is_completion]

    @property
    def remaining(self) -> int:
        """Script steps not used yet."""
        return self._running().remaining

    def _running(self) -> ServerHandle:
        if self._server is None:
            raise RuntimeError("the scripted model server is not running: use it inside its with/async with block")
        return self._server
