"""What an image given with a prompt must be, checked before the prompt is accepted.

Pi takes a prompt's images in its ``ImageContent`` shape (``docs/rpc-commands.md``):
``{"type": "image", "data": BASE64, "mimeType": "image/png"}``, and does not refuse what it
cannot read: without ``mimeType`` it fails the prompt in Node's words (``Cannot read
properties of undefined (reading 'split')``), and data that is not base64 it leaves out,
telling the model ``[Image omitted: …]`` while the receipt says ``finished`` -- the image lost
without a word to whoever sent it (found by a new-user trial). So ``serve``, the Python API
and ``bridge acp`` check each image first, and a bad one is the caller's error, named.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Final

#: The keys of Pi's ``ImageContent``.
IMAGE_KEYS: Final = ("type", "data", "mimeType")


def image_problem(images: Sequence[Any]) -> str | None:
    """What is wrong with the first image that is not Pi's ``ImageContent``, else None."""
    for n, image in enumerate(images):
        problem = problem_of(image, f"images[{n}]")
        if problem is not None:
            return problem
    return None


def problem_of(image: Any, where: str) -> str | None:
    """What is wrong with ``image`` (named ``where`` in the words), else None."""
    if not isinstance(image, dict):
        return f"{where} is not an object (an image is {{type, data, mimeType}})"
    extra = [k for k in image if k not in IMAGE_KEYS]
    if extra:
        return f"{where} has the key {extra[0]!r}, which an image does not take (type, data, mimeType)"
    if image.get("type") != "image":
        return f'{where}: "type" must be "image"'
    data = image.get("data")
    if not isinstance(data, str) or not data:
        return f'{where}: "data" must be the image\'s bytes in base64'
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        return f'{where}: "data" is not base64 ({e})'
    mime = image.get("mimeType")
    if not isinstance(mime, str) or not mime.startswith("image/") or mime == "image/":
        return f'{where}: "mimeType" must be an image type such as "image/png", not {mime!r}'
    return None
