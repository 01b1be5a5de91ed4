"""`gmmv schema`: the run config's JSON Schema, for editors that complete and check YAML
(docs/usage.md, "Editing configs with a schema").

pydantic exports the schema of `RunConfig`; two forms the loader accepts are not in the
models' own fields, so they are added here: a section written as a bare name
(``allocation: fitted`` for ``{base: fitted}``) and the `testbed:` section, which the
loader checks apart from the run's keys (docs/testbed.md). Policy names are offered as
examples, not as the only values: a config may name its own class (``package.module:Class``).
Added to the `gmmv` parser by `gmm_volunteer.cli.commands`.
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated, Any, Literal, get_args, get_origin

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _shorthands(model) -> dict[tuple[str, str], list[str]]:
    """(model title, field) -> the bare names a section field accepts in place of its
    mapping (its type's ``from_shorthand``), for every model reachable from `model`."""
    from pydantic import BaseModel

    out: dict[tuple[str, str], list[str]] = {}
    seen: set[type] = set()

    def walk(tp: Any) -> None:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        if get_origin(tp) is not None:  # a union, a list, a dict: their members
            for arg in get_args(tp):
                walk(arg)
            return
        if not (isinstance(tp, type) and issubclass(tp, BaseModel)) or tp in seen:
            return
        seen.add(tp)
        for name, field in tp.model_fields.items():
            inner = field.annotation
            if get_origin(inner) is Annotated:
                inner = get_args(inner)[0]
            expand = getattr(inner, "from_shorthand", None)
            if expand is not None:
                (key,) = expand("?")  # the one field a bare name fills, e.g. base
                choices = get_args(inner.model_fields[key].annotation)
                if choices and get_origin(inner.model_fields[key].annotation) is Literal:
                    out[(tp.model_json_schema()["title"], field.alias or name)] = list(choices)
            walk(field.annotation)

    walk(model)
    return out


def config_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a run config file."""
    import gmm_volunteer.policies  # noqa: F401  (registers the built-in policies)
    from gmm_volunteer.run.config import RunConfig
    from gmm_volunteer.policies.registry import names
    from gmm_volunteer.run.config.testbed import SECTION, Testbed

    schema = RunConfig.model_json_schema()
    defs = schema.setdefault("$defs", {})
    for (title, key), choices in _shorthands(RunConfig).items():
        holder = schema if schema.get("title") == title else defs[title]
        prop = holder["properties"][key]
        holder["properties"][key] = {"anyOf": [{k: v for k, v in prop.items() if k != "default"},
                                               {"enum": choices}],
                                     **({"default": prop["default"]} if "default" in prop else {})}
    testbed = Testbed.model_json_schema()
    defs.update(testbed.pop("$defs", {}))
    defs[testbed["title"]] = testbed
    schema["properties"][SECTION] = {"$ref": f"#/$defs/{testbed['title']}"}
    for kind in ("scheduler", "executor", "autoscaler"):
        schema["properties"][kind]["examples"] = names(kind)
    _servers(schema)
    return {"$schema": SCHEMA_DIALECT, **schema}


def _servers(schema: dict) -> None:
    """`server:` or `servers:`, one of the two and neither null, and a server's `rtt` as
    a bare number of seconds (docs/model.md D35): forms the loader's validators accept
    that the fields' own types do not say."""
    from gmm_volunteer.run.config.laws import MAX_RTT
    from gmm_volunteer.run.config.schema import MAX_SERVERS

    server = {"$ref": "#/$defs/Server"}
    props = schema["properties"]
    props["server"] = server
    props["servers"] = {"type": "array", "items": server, "minItems": 1, "maxItems": MAX_SERVERS}
    schema["required"] = [k for k in schema["required"] if k != "server"]
    schema["oneOf"] = [{"required": ["server"]}, {"required": ["servers"]}]
    rtt = schema["$defs"]["Server"]["properties"]["rtt"]
    rtt["anyOf"].insert(0, {"type": "number", "minimum": 0, "maximum": MAX_RTT})


def _cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(config_schema(), indent=2 if args.indent else None, sort_keys=False))
    return 0


def add_subcommands(subparsers) -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    p = subparsers.add_parser(
        "schema",
        help="print the run config's JSON Schema (for editors that check YAML)",
        description="Print the JSON Schema (draft 2020-12) of a run config on stdout: save it and "
                    "point an editor's YAML support at it to complete keys and mark invalid values "
                    "as you type (docs/usage.md, \"Editing configs with a schema\").",
    )
    p.add_argument("--compact", dest="indent", action="store_false", help="one line instead of indented JSON")
    add_output_flags(p)
    p.set_defaults(func=_cmd_schema)
