"""The hand-written struct packers (state._pack, params._pack) against their field specs.

numba cannot loop over struct fields, so each packer assigns every field by name; a
field added to STATE_FIELDS or PARAM_FIELDS but not to its packer would be left
uninitialised in the kernels' view, silently."""

from __future__ import annotations

import inspect
import re

import pytest

from gmm_volunteer.model import params, state

ASSIGN = re.compile(r"^\s*s\.(\w+) = T\.(\w+)\s*$")


@pytest.mark.parametrize("module, spec", [(state, "STATE_FIELDS"), (params, "PARAM_FIELDS")])
def test_packer_assigns_every_field_once_from_itself(module, spec):
    fields = list(getattr(module, spec))
    lines = inspect.getsource(module._pack.py_func).splitlines()
    pairs = [m.groups() for m in map(ASSIGN.match, lines) if m]
    assert all(a == b for a, b in pairs), [p for p in pairs if p[0] != p[1]]
    assigned = [a for a, _ in pairs]
    assert len(assigned) == len(set(assigned)), "a field is assigned twice"
    assert sorted(assigned) == sorted(fields), (
        f"missing: {sorted(set(fields) - set(assigned))}, extra: {sorted(set(assigned) - set(fields))}"
    )
