"""Reading YAML input (run configs, overrides, grid files, model bundles) strictly.

`load_yaml` differs from `yaml.safe_load` in three ways, so that a file means what it
looks like it means:

* a key written twice in one mapping is an error (PyYAML silently keeps the last one);
* numbers in exponent notation are numbers whatever their spelling: ``1e3``, ``1.0e3``,
  ``1.0E-3`` and ``1.0e+3`` all read as the real number they denote (PyYAML, following
  YAML 1.1, reads the first three as text). They are real numbers, never integers;
* input nested deeper than `MAX_DEPTH` is refused instead of exhausting the stack, and
  input larger than `MAX_NODES` values once its aliases are expanded (a "billion laughs"
  of a few hundred bytes) is refused before it is expanded.

Problems raise `YAMLInputError` whose message starts with ``<source>:`` and names the
line (and the key, for a duplicate).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["YAMLInputError", "load_yaml", "MAX_DEPTH", "MAX_NODES"]

# Far more than any config, grid or bundle needs (a bundle nests about 8 deep).
MAX_DEPTH = 50
# Values of a document with its aliases expanded: a bundle has a few thousand.
MAX_NODES = 1_000_000

# Plain words for the problems PyYAML reports when a hand-written file's indentation
# slips (the usual cause), keyed on the start of PyYAML's own problem text.
_HINTS = (
    ("mapping values are not allowed here",
     "a 'key:' where a value was expected: the keys of one section start in the same column, "
     "only a line ending in ':' opens a section, and a value holding ': ' needs quotes"),
    ("expected <block end>",
     "this line is indented differently from the lines before it: the keys (or '- ' items) "
     "of one section start in the same column"),
    ("found character '\\t'", "indent with spaces: YAML does not allow tabs"),
    ("could not find expected ':'",
     "a line that is not 'key: value' (a ':' missing, or a line indented as if it went on "
     "from the one above)"),
)

# YAML 1.2 core-schema floats: an exponent needs no sign and no decimal point.
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class YAMLInputError(ValueError):
    """YAML text that cannot be read as intended; the message names source and line."""


class _StrictLoader(yaml.SafeLoader):
    pass


# Replace the float resolver (first characters as in PyYAML's own registration).
_StrictLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value, not a list or a mapping",
                key_node.start_mark) from None
        if key in seen:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first written at line {first})",
                key_node.start_mark)
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _expanded_size(node: yaml.Node, limit: int) -> int:
    """Nodes of the document with every alias expanded, counting each shared node once
    per use, without expanding anything (memoised over the node graph; linear in its
    size). Stops past `limit`; a node that contains itself counts as past it."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(node, False)]
    while stack:
        n, children_done = stack.pop()
        key = id(n)
        kids = ([c for kv in n.value for c in kv] if isinstance(n, yaml.MappingNode)
                else list(n.value) if isinstance(n, yaml.SequenceNode) else [])
        if children_done:
            on_path.discard(key)
            size[key] = min(limit + 1, 1 + sum(size[id(c)] for c in kids))
            continue
        if key in size:
            continue
        if key in on_path:
            return limit + 1  # a recursive alias: infinitely large when expanded
        on_path.add(key)
        stack.append((n, True))
        for c in kids:
            if id(c) in on_path:
                return limit + 1
            if id(c) not in size:
                stack.append((c, False))
    return size[id(node)]


def _depth(node: yaml.Node) -> int:
    """Nesting depth of a composed node tree, without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        if isinstance(n, yaml.SequenceNode):
            stack.extend((c, d + 1) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.append((k, d + 1))
                stack.append((v, d + 1))
    return deepest


def load_yaml(text: str | bytes, source: str) -> Any:
    """Parse one YAML document strictly (see the module docstring)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YAMLInputError(f"{source}: not text (not UTF-8 at byte {exc.start}); is this a binary file?") from None
    if "\x00" in text:
        raise YAMLInputError(f"{source}: not text (it contains a NUL byte); is this a binary file?")
    loader = None
    try:
        loader = _StrictLoader(text)  # reads the stream: refuses control characters
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLInputError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels)") from None
        if node is None:
            return None
        # Aliases can make a few hundred bytes stand for billions of nodes ("billion
        # laughs"): count the expanded document before anything walks or builds it.
        if _expanded_size(node, MAX_NODES) > MAX_NODES:
            raise YAMLInputError(f"{source}: too large once its aliases (*name) are expanded "
                                 f"(more than {MAX_NODES:,} values)")
        if _depth(node) > MAX_DEPTH:
            line = node.start_mark.line + 1
            raise YAMLInputError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels, "
                                 f"from line {line})")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        hint = next((f" ({h})" for start, h in _HINTS if problem.startswith(start)), "")
        raise YAMLInputError(f"{source}: {kind}{where}: {problem}{hint}") from None
    finally:
        if loader is not None:
            loader.dispose()
