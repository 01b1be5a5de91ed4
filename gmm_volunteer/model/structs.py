"""Numba struct types for the state and the parameters.

Kernels receive the state S and the parameters P as numba StructRefs: one pointer per
argument, so a call between kernels costs nothing and each kernel compiles quickly (a
tuple of ~100 arrays is passed field by field, which makes compilation very slow). On
the Python side the same arrays live in plain namedtuples (`state.State`,
`params.Params`); `pack_state` / `pack_params` wrap them without copying.
"""

from __future__ import annotations

import numpy as np
from numba import types, typeof
from numba.experimental import structref


@structref.register
class StateStruct(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


@structref.register
class ParamsStruct(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class StateRef(structref.StructRefProxy):
    """Python handle of a packed state (opaque; read arrays from the namedtuple)."""


class ParamsRef(structref.StructRefProxy):
    """Python handle of packed parameters."""


structref.define_boxing(StateStruct, StateRef)
structref.define_boxing(ParamsStruct, ParamsRef)


def struct_fields(example) -> list[tuple[str, types.Type]]:
    """(name, numba type) of every field of a namedtuple of arrays and scalars."""
    out = []
    for name, value in zip(example._fields, example):
        if isinstance(value, np.ndarray):
            if not value.flags.c_contiguous:
                raise TypeError(f"{name}: arrays in kernel structs must be C-contiguous")
            out.append((name, typeof(value)))
        elif isinstance(value, (bool, np.bool_)):
            out.append((name, types.boolean))
        elif isinstance(value, (int, np.integer)):
            out.append((name, types.int64))
        elif isinstance(value, (float, np.floating)):
            out.append((name, types.float64))
        else:
            raise TypeError(f"{name}: unsupported field type {type(value).__name__}")
    return out
