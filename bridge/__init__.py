"""pi-bridge: supervise an agent engine over JSONL and settle one receipt per prompt."""

__version__ = "0.1.0"
