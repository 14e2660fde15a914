"""What every door that takes a prompt's options does first: refuse a keyword it does not take.

A door is ``submit(message, *, request=None, **options: Unpack[PromptOptions])`` (the options
are declared once: :mod:`bridge.core.prompts`), so Python no longer refuses a misspelt keyword
itself; :func:`prompt_door` does, in Python's words and naming the call made
(``AsyncioBridge.submit() got an unexpected keyword argument 'timout'``), before the door's body
runs: nothing is accepted. It is checked at each door and not only where the prompt is accepted
because a door passes ``**options`` on, and the error would otherwise name the call it passed
them to (under asyncio, the trio bridge's ``submit_nowait``), not the one the caller made.
The options' values are :func:`~bridge.core.prompts.check_prompt`'s to check, once, where the
prompt is accepted.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from bridge.core.framing import prompt_bytes, prompt_room

__all__ = ["check_size", "prompt_door"]

F = TypeVar("F", bound=Callable[..., Any])


def prompt_door(options: Any) -> Callable[[F], F]:
    """Make the decorated call refuse, as Python would, a keyword that is neither one of its own
    parameters nor a key of ``options`` (the ``TypedDict`` its ``**options`` unpacks). Its
    signature, type and docstring are the call's own (``functools.wraps``)."""
    keys: frozenset[str] = options.__optional_keys__ | options.__required_keys__

    def decorate(fn: F) -> F:
        own = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD}
        takes = keys | own

        def refuse(given: Mapping[str, Any]) -> None:
            for key in given:
                if key not in takes:
                    raise TypeError(f"{fn.__qualname__}() got an unexpected keyword argument {key!r}")

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def door(*args: Any, **kw: Any) -> Any:
                """The call, once its keywords are known. Ends when the call ends."""
                refuse(kw)
                return await fn(*args, **kw)

            return door  # type: ignore[return-value]  # (wraps keeps fn's signature)

        @functools.wraps(fn)
        def sync_door(*args: Any, **kw: Any) -> Any:
            refuse(kw)
            return fn(*args, **kw)

        return sync_door  # type: ignore[return-value]

    return decorate


def check_size(message: str, images: list[Any] | None, max_line: int) -> None:
    """Raise ``ValueError`` for a prompt too big for the engine's lines (issue 42): Pi writes it
    back whole on a line of its own, so one past :func:`~bridge.core.framing.prompt_room` (half
    the line limit) would come back oversize and end ``outcome-unknown``/``gap`` after its run.
    Refused here, before it is accepted, as any argument that cannot work is: a property of the
    prompt, not of the bridge's state (a full queue, a closing bridge are receipts)."""
    room = prompt_room(max_line)
    size = len(message) if len(message) > room else prompt_bytes(message, images)  # (a long one is not counted)
    if size > room:
        raise ValueError(
            f"the prompt is at least {size:,} bytes on the wire (text JSON-escaped, images' data), more than half the "
            f"engine's line limit ({room:,} of {max_line:,}): Pi echoes a prompt whole on its own lines, and its "
            "echo would be cut as oversize"
        )
