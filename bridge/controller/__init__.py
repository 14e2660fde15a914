"""The controller's side: `bridge serve`, the JSONL protocol on stdin/stdout."""
