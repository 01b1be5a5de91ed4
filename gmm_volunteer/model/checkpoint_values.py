"""The values a checkpoint holds, as plain data (docs/formats.md, "Checkpoints").

A checkpoint (format 3, `run.checkpoint`) is JSON and NumPy ``.npy`` files, never a
pickle: reading one names no class and calls nothing it names, so a checkpoint from
anywhere can at worst fail to load. What it can hold is this closed set of types
(`VALUE_TYPES`), the types a policy's ``checkpoint_state`` may return (policies.base):

    None, bool, int, float, str
    numpy arrays and numpy scalars of bool, integer, unsigned, float or complex dtype
    numpy.random.Generator (of PCG64, PCG64DXSM, Philox, SFC64 or MT19937)
    list, tuple and dict with str keys of these

Each value becomes a JSON value: scalars as themselves (floats exact, NaN and infinities
as JSON's extensions ``NaN``/``Infinity``), everything else an object with exactly one
of the keys ``list``, ``tuple``, ``dict``, ``array``, ``scalar``, ``generator``. Arrays
of at least `INLINE_BYTES` go to files of their own (``{"array": {"file": NAME}}``,
written by the writer's `array` method, checked by the reader's); smaller ones are
inline (dtype, shape, base64 of their bytes in C order).

`decode` checks every node against this form and raises `ValueError` naming where in
the tree it failed; it never builds an object dtype, a structured dtype or a class the
data names.
"""

from __future__ import annotations

import base64
import binascii
import math

import numpy as np

INLINE_BYTES = 1 << 12  # smaller arrays stay inside the JSON
_KINDS = "biufc"  # bool, signed, unsigned, float, complex
# The bit generators a Generator may be restored on, by name (never imported by name).
BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox,
                                                np.random.SFC64, np.random.MT19937)}
VALUE_TYPES = ("None", "bool", "int", "float", "str", "numpy array or scalar of bool/int/uint/float/complex",
               "numpy.random.Generator", "list", "tuple", "dict with str keys")


class Unsupported(TypeError):
    """A value of a type a checkpoint cannot hold."""


def _plain_dtype(dt: np.dtype) -> bool:
    return dt.kind in _KINDS and dt.names is None and dt.subdtype is None and dt.itemsize > 0


def _raw(arr: np.ndarray) -> dict:
    return {"dtype": arr.dtype.str, "shape": list(arr.shape),
            "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")}


def encode(value, sink, where: str = "state"):
    """`value` as JSON-ready data; `sink.array(arr) -> file name` writes a large array.
    Raises `Unsupported` naming `where` (the path in the tree) for any other type."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value
    if isinstance(value, np.ndarray):
        if type(value) is not np.ndarray or not _plain_dtype(value.dtype):
            raise Unsupported(f"{where}: an array of dtype {value.dtype} ({type(value).__name__})")
        if value.nbytes >= INLINE_BYTES:
            return {"array": {"file": sink.array(value)}}
        return {"array": _raw(value)}
    if isinstance(value, np.generic):
        if not _plain_dtype(value.dtype):
            raise Unsupported(f"{where}: a numpy scalar of dtype {value.dtype}")
        return {"scalar": _raw(np.asarray(value))}
    if type(value) is np.random.Generator:
        bg = value.bit_generator
        if type(bg) not in BIT_GENERATORS.values():
            raise Unsupported(f"{where}: a Generator of {type(bg).__name__}")
        return {"generator": {"bit_generator": type(bg).__name__,
                              "state": encode(bg.state, sink, f"{where}.state")}}
    if type(value) in (list, tuple):
        tag = type(value).__name__
        return {tag: [encode(v, sink, f"{where}[{i}]") for i, v in enumerate(value)]}
    if type(value) is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise Unsupported(f"{where}: a dict key {k!r} that is not a str")
            out[k] = encode(v, sink, f"{where}.{k}")
        return {"dict": out}
    raise Unsupported(f"{where}: a {type(value).__module__}.{type(value).__qualname__}, not one of "
                      f"the types a checkpoint holds ({', '.join(VALUE_TYPES)})")


def check(value, where: str = "state") -> None:
    """Raise `Unsupported` if `value` holds a type a checkpoint cannot hold (nothing is
    written: arrays are only looked at)."""
    encode(value, _Looker(), where)


class _Looker:
    def array(self, arr) -> str:
        return "-"


def _array(raw, where: str) -> np.ndarray:
    if not (type(raw) is dict and set(raw) == {"dtype", "shape", "data"} and type(raw["dtype"]) is str
            and type(raw["shape"]) is list and type(raw["data"]) is str):
        raise ValueError(f"{where}: not an array (dtype, shape, data)")
    try:
        dt = np.dtype(raw["dtype"])
    except (TypeError, ValueError):
        raise ValueError(f"{where}: dtype {raw['dtype']!r} is not one") from None
    if not _plain_dtype(dt):
        raise ValueError(f"{where}: dtype {raw['dtype']!r} is not a number or bool dtype")
    shape = raw["shape"]
    if not all(type(n) is int and 0 <= n < 1 << 40 for n in shape) or len(shape) > 32:
        raise ValueError(f"{where}: shape {shape!r} is not one")
    try:
        data = base64.b64decode(raw["data"].encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeError):
        raise ValueError(f"{where}: its data is not base64") from None
    if len(data) != math.prod(shape) * dt.itemsize:
        raise ValueError(f"{where}: {len(data)} bytes of data for shape {shape} of {dt}")
    return np.frombuffer(data, dtype=dt).reshape(shape).copy()


def decode(node, source, where: str = "state"):
    """The value `node` (from `encode`) stands for; `source.array(name) -> ndarray`
    reads an array file. Raises `ValueError` naming `where` for anything else."""
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is not dict or len(node) != 1:
        raise ValueError(f"{where}: {type(node).__name__} is not a checkpoint value")
    [(tag, body)] = node.items()
    if tag in ("list", "tuple"):
        if type(body) is not list:
            raise ValueError(f"{where}: {tag} is not a JSON list")
        items = [decode(v, source, f"{where}[{i}]") for i, v in enumerate(body)]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        if type(body) is not dict:
            raise ValueError(f"{where}: dict is not a JSON object")
        return {k: decode(v, source, f"{where}.{k}") for k, v in body.items()}
    if tag == "array":
        if type(body) is dict and set(body) == {"file"} and type(body["file"]) is str:
            arr = source.array(body["file"])
            if not _plain_dtype(arr.dtype):
                raise ValueError(f"{where}: {body['file']} holds dtype {arr.dtype}")
            return arr
        return _array(body, where)
    if tag == "scalar":
        arr = _array(body, where)
        if arr.shape != ():
            raise ValueError(f"{where}: a scalar of shape {arr.shape}")
        return arr[()]
    if tag == "generator":
        if not (type(body) is dict and set(body) == {"bit_generator", "state"}):
            raise ValueError(f"{where}: not a generator (bit_generator, state)")
        cls = BIT_GENERATORS.get(body["bit_generator"]) if type(body["bit_generator"]) is str else None
        if cls is None:
            raise ValueError(f"{where}: bit generator {body['bit_generator']!r} is not one of "
                             f"{', '.join(BIT_GENERATORS)}")
        state = decode(body["state"], source, f"{where}.state")
        bg = cls(0)
        try:
            bg.state = state
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            raise ValueError(f"{where}: not a state of {cls.__name__} ({exc})") from None
        return np.random.Generator(bg)
    raise ValueError(f"{where}: {tag!r} is not a checkpoint value's type")


def seed_sequence_state(ss: np.random.SeedSequence) -> dict:
    """The root SeedSequence of a run as plain data (entropy, spawn key, pool size,
    children spawned so far)."""
    entropy = ss.entropy
    if isinstance(entropy, (list, tuple, np.ndarray)):
        entropy = [int(e) for e in entropy]
    return {"entropy": int(entropy) if isinstance(entropy, (int, np.integer)) else entropy,
            "spawn_key": [int(k) for k in ss.spawn_key], "pool_size": int(ss.pool_size),
            "n_children_spawned": int(ss.n_children_spawned)}


def seed_sequence(state, where: str = "seed_seq") -> np.random.SeedSequence:
    """The SeedSequence `seed_sequence_state` describes; `ValueError` for anything else."""
    def whole(x, lo=0):
        return type(x) is int and lo <= x < 1 << 4096

    ok = (type(state) is dict and set(state) == {"entropy", "spawn_key", "pool_size", "n_children_spawned"}
          and (whole(state["entropy"]) or (type(state["entropy"]) is list and len(state["entropy"]) <= 1024
                                           and all(whole(e) for e in state["entropy"])))
          and type(state["spawn_key"]) is list and len(state["spawn_key"]) <= 1024
          and all(whole(k) for k in state["spawn_key"])
          and whole(state["pool_size"], 4) and state["pool_size"] <= 1 << 16
          and whole(state["n_children_spawned"]) and state["n_children_spawned"] < 1 << 62)
    if not ok:
        raise ValueError(f"{where}: not a seed sequence (entropy, spawn_key, pool_size, n_children_spawned)")
    return np.random.SeedSequence(state["entropy"], spawn_key=tuple(state["spawn_key"]),
                                  pool_size=state["pool_size"], n_children_spawned=state["n_children_spawned"])
