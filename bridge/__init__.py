"""pi-bridge: supervise an agent engine over JSONL and settle one receipt per prompt.

The Python API (see the README)::

    from bridge import open_bridge, PiProfile, CommandProfile, BridgeConfig
"""

__version__ = "0.1.0"

from bridge.pi import PiProfile, scripted_profile  # noqa: E402
from bridge.profile import CommandProfile, ProfileError  # noqa: E402
from bridge.receipts import Receipt  # noqa: E402
from bridge.supervisor import Bridge, BridgeConfig, PromptHandle, open_bridge  # noqa: E402

__all__ = [
    "Bridge",
    "BridgeConfig",
    "CommandProfile",
    "PiProfile",
    "ProfileError",
    "PromptHandle",
    "Receipt",
    "open_bridge",
    "scripted_profile",
]
