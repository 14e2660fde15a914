"""``bridge acp``: the sealed Pi as an Agent Client Protocol agent, with receipts.

:mod:`bridge.controller.acp.protocol` is the protocol, sans-IO (messages in, ACP objects out);
:mod:`bridge.controller.acp.agent` is the trio loop that carries it between stdin/stdout and
one live bridge per session.
"""
