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

__all__ = ["prompt_door"]

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
