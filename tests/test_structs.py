"""The hand-written struct packers (state._pack, params._pack) against their field specs.

numba cannot loop over struct fields, so each packer assigns every field by name; a
field added to STATE_FIELDS or PARAM_FIELDS but not to its packer would be left
uninitialised in the kernels' view, silently. The field spec is the one definition: the
namedtuple, the numba struct type and the packer must all follow it."""

from __future__ import annotations

import inspect
import re

import pytest

from gmm_volunteer.model import params, state

ASSIGN = re.compile(r"^\s*s\.(\w+) = T\.(\w+)\s*$")
CASES = [(state, "STATE_FIELDS", "State", "STATE_TYPE"), (params, "PARAM_FIELDS", "Params", "PARAMS_TYPE")]


def packer_problems(source: str, fields) -> list[str]:
    """What is wrong with a packer's source against the field spec (empty when nothing)."""
    pairs = [m.groups() for m in map(ASSIGN.match, source.splitlines()) if m]
    problems = [f"s.{a} = T.{b}" for a, b in pairs if a != b]
    assigned = [a for a, _ in pairs]
    problems += [f"assigned twice: {a}" for a in sorted({a for a in assigned if assigned.count(a) > 1})]
    problems += [f"not packed: {f}" for f in fields if f not in assigned]
    problems += [f"not in the spec: {a}" for a in sorted(set(assigned) - set(fields))]
    return problems


@pytest.mark.parametrize("module, spec, _tuple, _type", CASES)
def test_packer_assigns_every_field_once_from_itself(module, spec, _tuple, _type):
    source = inspect.getsource(module._pack.py_func)
    assert packer_problems(source, getattr(module, spec)) == []


@pytest.mark.parametrize("module, spec, tuple_name, type_name", CASES)
def test_namedtuple_and_struct_type_follow_the_spec(module, spec, tuple_name, type_name):
    fields = tuple(getattr(module, spec))
    assert getattr(module, tuple_name)._fields == fields
    assert tuple(getattr(module, type_name).field_dict) == fields


@pytest.mark.parametrize("module, spec, _tuple, _type", CASES)
def test_a_field_left_out_of_a_packer_is_reported(module, spec, _tuple, _type):
    fields = list(getattr(module, spec))
    lines = inspect.getsource(module._pack.py_func).splitlines()
    dropped = next(i for i, line in enumerate(lines) if ASSIGN.match(line))
    name = ASSIGN.match(lines[dropped]).group(1)
    assert packer_problems("\n".join(lines[:dropped] + lines[dropped + 1:]), fields) == [f"not packed: {name}"]
    assert packer_problems("\n".join(lines), fields + ["added_field"]) == ["not packed: added_field"]
