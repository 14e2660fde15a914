"""Wire forms: how the core's records become the JSON the bridge writes, declared once per class.

One cattrs :data:`converter` knows every record that goes on the wire -- receipts (SPEC §5),
signals and the tracker's outputs (SPEC §4, the journal's ``signal`` entries and ``bridge
serve``'s ``signal`` lines), progress notifications (SPEC §7). A class says what its JSON looks
like with :func:`form`, right under its definition; nothing builds these dicts by hand:

- ``rename``: a field's JSON key (the engine's protocol is camelCase: ``nativeError``);
- ``tag``: constant keys written first (``{"signal": "gap"}``);
- ``omit``: fields that stay on the Python side (a dialog's answer);
- ``omit_default``: fields written only when they differ from their default (a receipt's
  ``where``, set only by a pool across machines: every other receipt's JSON stays as it was);
- ``flatten``: a dict field whose keys are written inline, last (an overlap's seed ``detail``);
- ``computed``: keys derived from the record, each written right after a named field
  (``(key, after, function)``: a finding's ``slotWords`` after its ``slot``).

Keys come out in field order after the tag, as the journals and fixtures have always had them.
Records that mix in :class:`Wire` have ``to_json()``; :func:`bridge.core.receipts.Receipt.from_json`
structures a receipt back (``structure(unstructure(r)) == r``, tested).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

#: The one converter. Tuples are written as lists (JSON has no tuples).
converter: Final = cattrs.Converter(unstruct_collection_overrides={tuple: list})

T = TypeVar("T", bound=type)


class Wire:
    """Mixed into a record with a :func:`form`: ``record.to_json()`` is its JSON object."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = converter.unstructure(self)
        return out


def form(
    *,
    tag: Mapping[str, Any] | None = None,
    rename: Mapping[str, str] | None = None,
    omit: Sequence[str] = (),
    omit_default: Sequence[str] = (),
    flatten: str | None = None,
    computed: Sequence[tuple[str, str, Callable[[Any], Any]]] = (),
) -> Callable[[T], T]:
    """Declare a record's JSON form (a class decorator, placed above ``@attrs.frozen``)."""

    def register(cls: T) -> T:
        overrides = {name: override(rename=key) for name, key in (rename or {}).items()}
        overrides |= {name: override(omit=True) for name in omit}
        overrides |= {name: override(omit_if_default=True) for name in omit_default}
        # cattrs' stubs type **overrides loosely; these are AttributeOverrides.
        base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **overrides)  # type: ignore[arg-type]
        head = dict(tag or {})

        def unstructure(obj: Any) -> dict[str, Any]:
            body: dict[str, Any] = base(obj)
            if flatten is not None:
                body.update(body.pop(flatten))
            if computed:
                body = _with_computed(body, obj, computed)
            return {**head, **body} if head else body

        converter.register_unstructure_hook(cls, unstructure)
        return cls

    return register


def _with_computed(
    body: dict[str, Any], obj: Any, computed: Sequence[tuple[str, str, Callable[[Any], Any]]]
) -> dict[str, Any]:
    after = {field: (key, fn) for key, field, fn in computed}
    out: dict[str, Any] = {}
    for name, value in body.items():
        out[name] = value
        if name in after:
            key, fn = after[name]
            out[key] = fn(obj)
    return out
