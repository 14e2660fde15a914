"""A griffe extension for the docs site (docs/mkdocs.yml loads it): the package's docstrings
cross-reference with Sphinx roles (``:class:`~bridge.core.receipts.Receipt```, ``:meth:`submit```),
which the code's readers and editors know; mkdocstrings reads Markdown. Each role becomes an
*optional* cross-reference: a link where the target is rendered on the site, its name in code
where it is not (a private module, say), so the site never shows a raw role and a reference to
something left out of the reference is no broken link. An rST ``::`` before a literal block
becomes ``:``. Nothing else in a docstring is changed.

The package documents fields with ``#:`` comments above them (as Sphinx's autodoc reads them);
griffe reads only a string under an attribute, so an attribute with no docstring gets its
``#:`` comment as one here.
"""

from __future__ import annotations

import html
import re
import sys
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def _lookup(obj: griffe.Object | griffe.Alias, dotted: str) -> str | None:
    """The canonical path of ``dotted`` as seen from ``obj``: its own member, a member of a
    parent (the class, the module), or a name the module imports; None when nothing fits."""
    scope: griffe.Object | griffe.Alias | None = obj
    while scope is not None:
        head, _, rest = dotted.partition(".")
        member = scope.members.get(head) if hasattr(scope, "members") else None
        if member is not None:
            base = member.target_path if isinstance(member, griffe.Alias) else member.path
            return f"{base}.{rest}" if rest else base
        scope = scope.parent
    return None


def _resolve(obj: griffe.Object | griffe.Alias, target: str) -> str:
    if target.startswith("bridge.") or target == "bridge":
        return target
    return _lookup(obj, target) or target


def _rewrite(obj: griffe.Object | griffe.Alias, text: str) -> str:
    def role(match: re.Match[str]) -> str:
        body = match["body"].strip()
        titled = _TITLED.match(body)
        if titled:
            title, target = titled["title"], titled["target"].lstrip("~")
        else:
            target = body.lstrip("~").lstrip(".")
            title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
        ident = _resolve(obj, target)
        return f'<autoref identifier="{html.escape(ident)}" optional><code>{html.escape(title)}</code></autoref>'

    text = _ROLE.sub(role, text)
    # rST's "::" before a literal block: the block is Markdown's indented code already.
    text = re.sub(r"(?m)^(\s*)::\s*$", "", text)
    return re.sub(r"(?m)(\S)::\s*$", r"\1:", text)


def _comment_docstring(obj: griffe.Object) -> griffe.Docstring | None:
    """The ``#:`` comment lines right above attribute ``obj``, as its docstring (None: none)."""
    if not isinstance(obj, griffe.Attribute) or obj.lineno is None:
        return None
    try:
        lines = obj.module.lines
    except (AttributeError, ValueError):
        return None
    found: list[str] = []
    at = obj.lineno - 2
    while at >= 0 and lines[at].strip().startswith("#:"):
        found.insert(0, lines[at].strip()[2:].strip())
        at -= 1
    return griffe.Docstring("\n".join(found), lineno=at + 2, parent=obj) if found else None


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is None:
                obj.docstring = _comment_docstring(obj)
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj, obj.docstring.value)
            for member in obj.members.values():
                if not isinstance(member, griffe.Alias):
                    stack.append(member)


# MkDocs loads this file as a hook under the name "griffe_roles.py"; griffe imports its extension
# by module name, so the module is also known as "griffe_roles".
sys.modules.setdefault("griffe_roles", sys.modules[__name__])
