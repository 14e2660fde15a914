"""Sealed engines across a Ray cluster, one receipt per prompt (the ``ray`` extra:
``pip install 'pi-bridge[ray]'``; docs: guide/ray.md)::

    import ray
    from bridge.ray import RayPool

    ray.init(address="auto")
    with RayPool(scripted_profile("models.json"), engines=4) as pool:
        receipts = pool.run(["one", "two", "three"])  # in input order

A lost node or actor costs no receipt: a prompt whose run had started there is
``outcome-unknown``/``node-lost``, one handed to its actor with no run reported
``delivery-unknown``/``node-lost`` (each naming the node), one never handed to an actor goes to
another, and no prompt gets two receipts (:mod:`bridge.core.dispatch` has the rules).
"""

from __future__ import annotations

from bridge.ray.pool import RayPool

__all__ = ["RayPool"]
