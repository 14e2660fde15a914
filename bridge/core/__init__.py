"""The sans-IO core: framing, the tracker, the session (evidence), the lifecycle (time and
place) and the receipt decision. Pure objects fed events and returning results: no trio, no clock,
no I/O (checked by tests/test_layers.py)."""
