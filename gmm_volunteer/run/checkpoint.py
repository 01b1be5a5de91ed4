"""Checkpoints of one run: the whole simulation written to disk every N steps, so that a
killed run continues from its last checkpoint and ends in the store an uninterrupted run
writes (docs/usage.md, "Checkpoints"; the format: docs/formats.md section 3).

What is saved is everything of a `Simulation` that a run changes (`checkpoint_state`:
state arrays, policies through their checkpoint hooks, control plane, script, seed
sequence, step counter, wall time), as plain data (format 3): JSON and NumPy ``.npy``
files read with ``allow_pickle=False`` (`checkpoint_values`). Reading one names no class
and calls nothing it names, so a checkpoint from anywhere can at worst fail to load. A
policy without checkpoint hooks (a plugin that does not define them) is refused before
its run starts (`check_checkpointable`). Arrays of at least `INLINE_BYTES` are written
one file each, one by one from the live state, never copied whole, so a checkpoint of a
large run needs no second copy of the state in memory; arrays the run has grown
(`state.grow_if_needed`) are saved at their grown size.

Layout, beside the result store ``OUT``:

    OUT.checkpoint/
        step-000000010000/      one complete checkpoint (only the newest is kept)
            checkpoint.json     written last: versions, config, bundle digest, step,
                                wall time, the size and SHA-256 of every other file,
                                and the SHA-256 of all that (``sha256``)
            objects.json        the simulation's state as checkpoint values
            state-<field>.npy   state arrays by field name; array-<k>.npy other arrays

A checkpoint is written into ``step-<t>.tmp-<pid>``, every file fsynced, then renamed to
``step-<t>`` (the rename is what makes it complete) and the older ones removed. A
checkpoint is refused (`CheckpointError`) when a file is missing or its content does
not match its digest, or when it was made by another checkpoint format (formats 1 and
2 were pickles: never read), another gmmv or trajectory version
(`gmm_volunteer.trajectory`), another config or another model bundle: resuming it would
not continue the same trajectory.

``checkpoint.json``'s ``sha256`` is the digest of the rest of it (config, steps, every
other file's digest): one digest covers config, state and objects, checked before
anything else is read, so an edited config (``steps``, ``users.count``, ``seed``, ...) is
refused rather than resumed into a store that claims the new values over the old
trajectory. It detects edits and damage, not a forgery (whoever can rewrite the folder
can recompute it); behind it every value is checked against what the config's run holds
(`checkpoint_state.restore_simulation`, `_check_sizes`).

While a run continues from (or writes) the checkpoints of a folder it holds an
exclusive lock on that folder (`Hold`): a second resume of the same checkpoint is
refused instead of writing the same store at the same time.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

# DERIVED and INLINE_BYTES are re-exported here (one definition each, where they are used).
from gmm_volunteer.run.checkpoint_state import (  # noqa: F401
    DERIVED, refusals, restore_simulation, simulation_state,
)
from gmm_volunteer.model.checkpoint_values import INLINE_BYTES, Unsupported, decode, encode  # noqa: F401

FORMAT = "gmmv-checkpoint"
# 2: checkpoint.json carries the digest of itself ("sha256"); 3: plain data, no pickle
FORMAT_VERSION = 3
SUFFIX = ".checkpoint"
MANIFEST = "checkpoint.json"
OBJECTS = "objects.json"

_STEP = re.compile(r"^step-(?P<t>[0-9]{12})$")
_TMP = re.compile(r"^step-[0-9]{12}\.tmp-(?P<pid>[0-9]+)$")
# Files of checkpoints this program writes (objects.pkl: format 2, removed but never read).
_FILE = re.compile(r"^(checkpoint\.json|objects\.json|objects\.pkl|(state|array)-[A-Za-z0-9_]+\.npy)$")
_DATA = re.compile(r"^(objects\.json|(state|array)-[A-Za-z0-9_]+\.npy)$")  # what format 3 lists


class CheckpointError(ValueError):
    """A checkpoint cannot be resumed: damaged, incomplete, or made by another version,
    config or model bundle. The message names the checkpoint and the reason."""


def seal(man: dict) -> str:
    """The digest of a checkpoint manifest: SHA-256 of its canonical JSON without
    ``sha256`` (so it covers the config, the step counts and every file's digest)."""
    rest = {k: v for k, v in man.items() if k != "sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def checkpoint_dir(store) -> Path:
    """The checkpoint folder of the result store `store`: ``<store>.checkpoint``."""
    store = Path(store)
    return store.with_name(store.name + SUFFIX)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory
    finally:
        os.close(fd)


def _digest(arr: np.ndarray) -> str:
    """SHA-256 of the array's content in C order, without copying a C-contiguous array."""
    h = hashlib.sha256()
    if arr.flags.c_contiguous:
        if arr.size:
            h.update(memoryview(arr).cast("B"))
    else:
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


# -- writing ------------------------------------------------------------------------------

class _Writer:
    """Writes the arrays `checkpoint_values.encode` hands over, one file each, into `folder`."""

    def __init__(self, folder: Path, names: dict[int, str]):
        self.folder = folder
        self.names = names  # id(array) -> preferred file stem (state fields)
        self.files: dict[str, dict] = {}
        self._done: dict[int, tuple[str, np.ndarray]] = {}  # keeps the arrays alive

    def array(self, arr: np.ndarray) -> str:
        seen = self._done.get(id(arr))
        if seen is not None:
            return seen[0]
        stem = self.names.get(id(arr)) or f"array-{len(self._done):04d}"
        name = f"{stem}.npy"
        with open(self.folder / name, "wb") as f:
            np.lib.format.write_array(f, arr, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        self.files[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "sha256": _digest(arr),
                            "bytes": size}
        self._done[id(arr)] = (name, arr)
        return name


def saved_attributes(sim) -> dict:
    """What a checkpoint of `sim` holds, as checkpoint values (`checkpoint_state`)."""
    return simulation_state(sim)


def write_checkpoint(sim, folder, every: int | None = None, digest: str | None = None) -> Path:
    """Write `sim` (a `Simulation` between steps) as checkpoint ``step-<t>`` in `folder`,
    atomically, then remove the older checkpoints there; return its path. `digest` is
    the model bundle's (computed when not given)."""
    from gmm_volunteer._version import __version__
    from gmm_volunteer.model.bundle import bundle_digest
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION

    folder = Path(folder)
    t = int(sim.t)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    if created:
        _fsync_dir(folder.parent)
    final = folder / f"step-{t:012d}"
    tmp = folder / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        names = {id(getattr(sim.arrays, f)): f"state-{f}" for f in sim.arrays._fields}
        writer = _Writer(tmp, names)
        try:
            tree = encode(simulation_state(sim), writer, "objects")
        except (Unsupported, ValueError) as exc:
            raise CheckpointError(f"{final}: cannot be written: {exc}") from None
        data = json.dumps(tree, separators=(",", ":")).encode("ascii")
        with open(tmp / OBJECTS, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        writer.files[OBJECTS] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "gmmv_version": __version__,
            "trajectory_version": TRAJECTORY_VERSION,
            "step": t,
            "steps": int(sim.steps),
            "every": None if every is None else int(every),
            "wall_time_s": float(getattr(sim, "wall_time_s", 0.0)),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "output": sim.cfg.output.path,
            "model_sha256": digest if digest is not None else bundle_digest(sim.bundle),
            "config": sim.cfg.to_yaml(),
            "files": writer.files,
        }
        manifest["sha256"] = seal(manifest)
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():  # the same step saved before (a run started over): replace it
            _remove_checkpoint(final)
        os.rename(tmp, final)
        _fsync_dir(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for entry in _entries(folder):
        if entry != final and _STEP.match(entry.name):
            _remove_checkpoint(entry)
    return final


class Checkpointer:
    """Passed to `Simulation.run(checkpoint=...)`: writes a checkpoint into `folder`
    whenever the step counter reaches a multiple of `every` (not at the last step)."""

    def __init__(self, folder, every: int):
        every = int(every)
        if every < 1:
            raise ValueError(f"checkpoint period must be >= 1 step (got {every})")
        self.folder = Path(folder)
        self.every = every
        self._digest: str | None = None
        self.last: Path | None = None

    def next_step(self, t: int) -> int:
        """The first step after `t` at which a checkpoint is due."""
        return (int(t) // self.every + 1) * self.every

    def due(self, sim) -> bool:
        return 0 < sim.t < sim.steps and sim.t % self.every == 0

    def save(self, sim) -> Path:
        from gmm_volunteer.model.bundle import bundle_digest

        if self._digest is None:
            self._digest = bundle_digest(sim.bundle)
        self.last = write_checkpoint(sim, self.folder, self.every, self._digest)
        return self.last


# -- the folder ---------------------------------------------------------------------------

def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _is_ours(path: Path) -> bool:
    """A checkpoint directory (complete or not) holding only files this module writes."""
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        return all(_FILE.match(e.name) and e.is_file(follow_symlinks=False) for e in os.scandir(path))
    except OSError:
        return False


def _remove_checkpoint(path: Path) -> None:
    if _is_ours(path):
        shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    from gmm_volunteer.io.storepath import _pid_alive as alive

    return alive(pid)


class Hold:
    """An exclusive lock on the checkpoint folder `folder` (created if missing, and
    removed again on release if it is then empty), taken at construction, for as long as
    a run writes or resumes its checkpoints: `CheckpointError` at once when another
    process holds it. The lock (flock on the folder itself) ends with the process, so a
    killed run leaves none. Use as ``with Hold(folder): ...``."""

    def __init__(self, folder):
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            raise CheckpointError(f"{self.folder}: cannot be used as a checkpoint folder "
                                  f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise CheckpointError(
                f"{self.folder}: another gmmv process is running from these checkpoints now (a "
                "resume or a run of the same store); wait for it to end") from None

    def __enter__(self) -> Path:
        return self.folder

    def __exit__(self, *exc) -> None:
        try:
            self.folder.rmdir()  # only when empty: a run ended before its first checkpoint
        except OSError:
            pass
        os.close(self.fd)


def checkpoints(folder) -> list[Path]:
    """The complete checkpoints (``step-<t>`` directories) in `folder`, oldest first."""
    return [e for e in _entries(Path(folder)) if _STEP.match(e.name) and e.is_dir()]


def foreign_entries(folder) -> list[Path]:
    """Entries of `folder` this program did not write (nothing is ever removed then)."""
    out = []
    for e in _entries(Path(folder)):
        if (_STEP.match(e.name) or _TMP.match(e.name)) and _is_ours(e):
            continue
        out.append(e)
    return out


def clear(folder, keep: bool = False) -> None:
    """Remove the checkpoints in `folder` (and unfinished ones whose writer is gone),
    then `folder` itself if nothing else is in it (not with `keep`: a folder `Hold`
    locks stays). What this program did not write is left alone."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return
    for e in _entries(folder):
        m = _TMP.match(e.name)
        if _STEP.match(e.name) or (m and (int(m["pid"]) == os.getpid() or not _pid_alive(int(m["pid"])))):
            _remove_checkpoint(e)
    if keep:
        return
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty: something else is there


def remove_unfinished(folder) -> None:
    """Remove unfinished checkpoints (``step-<t>.tmp-<pid>``) whose writer is gone."""
    for e in _entries(Path(folder)):
        m = _TMP.match(e.name)
        if m and not _pid_alive(int(m["pid"])):
            _remove_checkpoint(e)


def find(path) -> Path:
    """The checkpoint `path` names: a ``step-<t>`` directory, or the newest one in a
    checkpoint folder. Raises `CheckpointError`."""
    path = Path(path)
    try:
        path.resolve()
        exists = path.exists()
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a loop of links
        raise CheckpointError(f"{path}: cannot be used ({exc})") from None
    if not exists:
        raise CheckpointError(f"{path}: no such checkpoint or checkpoint folder")
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint (a checkpoint is a directory)")
    if (path / MANIFEST).exists() or _STEP.match(path.name):
        return path
    found = checkpoints(path)
    if not found:
        unfinished = [e.name for e in _entries(path) if _TMP.match(e.name)]
        hint = f" (only unfinished ones: {', '.join(unfinished)})" if unfinished else ""
        if not unfinished and path.name and checkpoint_dir(path).is_dir():  # the store's path was given
            hint = f"; the checkpoints of the store {path.name} are in {checkpoint_dir(path)}"
        raise CheckpointError(f"{path}: holds no complete checkpoint{hint}")
    return found[-1]


# -- reading ------------------------------------------------------------------------------

def read_manifest(path) -> dict:
    """The checked ``checkpoint.json`` of checkpoint `path`: its format and versions must
    be this program's. Raises `CheckpointError`."""
    from gmm_volunteer._version import __version__
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION

    path = Path(path)
    try:
        man = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {MANIFEST}: not a checkpoint, or an incomplete one") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / MANIFEST}: unreadable ({exc}): the checkpoint is damaged") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise CheckpointError(f"{path / MANIFEST}: not a gmmv checkpoint")
    if man.get("format_version") != FORMAT_VERSION:
        old = type(man.get("format_version")) is int and man["format_version"] in (1, 2)
        raise CheckpointError(
            f"{path}: checkpoint format {man.get('format_version')!r}; this gmmv reads format {FORMAT_VERSION} "
            "only" + ((" (formats 1 and 2, gmmv 0.8.8 and earlier, are a pickle, which can run any code "
                       "when loaded; they are never read). Run the config again from the start")
                      if old else ""))
    try:
        sealed = isinstance(man.get("sha256"), str) and man["sha256"] == seal(man)
    except (TypeError, ValueError):  # values JSON cannot write back (NaN, huge numbers)
        sealed = False
    if not sealed:
        raise CheckpointError(
            f"{path / MANIFEST}: its content does not match its digest (sha256): it was edited or "
            "damaged. A checkpoint continues the run it was made from; to change the config "
            "(steps, users, capacity, seed, ...), run it from the start")
    made = (man.get("gmmv_version"), man.get("trajectory_version"))
    if made != (__version__, TRAJECTORY_VERSION):
        raise CheckpointError(
            f"{path}: made by gmmv {made[0]} (trajectory version {made[1]}); this is gmmv "
            f"{__version__} (trajectory version {TRAJECTORY_VERSION}): resuming it would not "
            "continue the same trajectory. Run the config again from the start")
    for key, kind in (("step", int), ("steps", int), ("config", str), ("model_sha256", str), ("files", dict)):
        if not isinstance(man.get(key), kind):
            raise CheckpointError(f"{path / MANIFEST}: {key}: missing or not a {kind.__name__}: the checkpoint is damaged")
    if OBJECTS not in man["files"]:
        raise CheckpointError(f"{path / MANIFEST}: files: lists no {OBJECTS}: the checkpoint is damaged")
    if not 0 < man["step"] < man["steps"]:
        raise CheckpointError(f"{path / MANIFEST}: step {man['step']} is not within the run's "
                              f"{man['steps']} steps: the checkpoint is damaged")
    for name, meta in man["files"].items():
        if not (isinstance(name, str) and _DATA.match(name) and isinstance(meta, dict)):
            raise CheckpointError(f"{path / MANIFEST}: files: {name!r} is not a file a checkpoint holds")
        try:
            size = (path / name).stat().st_size if (path / name).is_file() else None
        except OSError:
            size = None
        if size is None:
            raise CheckpointError(f"{path / name}: missing: the checkpoint is damaged")
        if size != meta.get("bytes"):  # e.g. bytes appended, which reading the array would skip
            raise CheckpointError(f"{path / name}: {size} bytes where {meta.get('bytes')!r} were written: "
                                  "the checkpoint is damaged")
    return man


def config_of(path, man: dict | None = None):
    """The run config a checkpoint was made from (its ``output.path`` included)."""
    import yaml

    from gmm_volunteer.run.config import ConfigError, config_from_dict

    path = Path(path)
    man = read_manifest(path) if man is None else man
    try:
        data = yaml.safe_load(man["config"])
        return config_from_dict(data, source=f"{path / MANIFEST} (config)")
    except (ConfigError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{path}: its config cannot be used: {exc}") from None


def config_differences(a, b) -> list[str]:
    """Dotted keys whose values differ between configs `a` and `b` ('key: a != b')."""
    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                out.update(flat(v, key + "."))
            else:
                out[key] = v
        return out

    fa, fb = flat(a.model_dump(mode="json")), flat(b.model_dump(mode="json"))
    return [f"{k}: {fa.get(k)!r} != {fb.get(k)!r}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def check_config(path, man: dict, cfg) -> None:
    """Refuse (`CheckpointError`) a checkpoint made from another config than `cfg`."""
    if man["config"] == cfg.to_yaml():
        return
    made = config_of(path, man)
    diff = config_differences(made, cfg) or ["(the configs' text differs)"]
    shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
    raise CheckpointError(f"{path}: made from another config (checkpoint vs. this run: {shown})")


class _Reader:
    def __init__(self, folder: Path, files: dict):
        self.folder, self.files = folder, files
        self._loaded: dict[str, np.ndarray] = {}

    def array(self, name) -> np.ndarray:
        if name in self._loaded:
            return self._loaded[name]
        meta = self.files.get(name) if isinstance(name, str) else None
        where = self.folder / str(name)
        if meta is None or not _DATA.match(str(name)) or name == OBJECTS:
            raise CheckpointError(f"{where}: named in {OBJECTS} but not listed in {MANIFEST}: the checkpoint is damaged")
        try:
            with open(where, "rb") as f:
                # The header first: the data is read only when the dtype and shape are the
                # manifest's and the file holds exactly their bytes (a header claiming a
                # huge shape would otherwise allocate it before failing).
                version = np.lib.format.read_magic(f)
                header = {(1, 0): np.lib.format.read_array_header_1_0,
                          (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if header is None:
                    raise ValueError(f"npy format version {version}, not one this program writes")
                shape, _, dtype = header(f)
                size = os.fstat(f.fileno()).st_size
                if (dtype.hasobject or dtype.str != meta.get("dtype") or list(shape) != meta.get("shape")
                        or size - f.tell() != int(np.prod(shape, dtype=object)) * dtype.itemsize):
                    raise CheckpointError(f"{where}: its content does not match {MANIFEST}: the checkpoint is "
                                          "damaged")
                f.seek(0)
                arr = np.lib.format.read_array(f, allow_pickle=False)
        except CheckpointError:
            raise
        except FileNotFoundError:
            raise CheckpointError(f"{where}: missing: the checkpoint is damaged") from None
        except (OSError, ValueError, EOFError, SyntaxError, TypeError) as exc:
            raise CheckpointError(f"{where}: unreadable ({exc}): the checkpoint is damaged") from None
        if (arr.dtype.str != meta.get("dtype") or list(arr.shape) != meta.get("shape")
                or _digest(arr) != meta.get("sha256")):
            raise CheckpointError(f"{where}: its content does not match {MANIFEST}: the checkpoint is damaged")
        self._loaded[name] = arr
        return arr


def load_attributes(path, man: dict) -> dict:
    """The simulation's state saved in checkpoint `path` (`objects.json` as checkpoint
    values, its arrays read from their files), every file checked against its digest.
    Nothing in it is imported or called: anything but the values of `checkpoint_values`
    is refused."""
    path = Path(path)
    where = path / OBJECTS
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{where}: missing: the checkpoint is damaged") from None
    except OSError as exc:
        raise CheckpointError(f"{where}: unreadable ({exc})") from None
    if hashlib.sha256(raw).hexdigest() != man["files"][OBJECTS].get("sha256"):
        raise CheckpointError(f"{where}: its content does not match {MANIFEST}: the checkpoint is damaged")
    try:
        tree = decode(json.loads(raw.decode("ascii")), _Reader(path, man["files"]), "objects")
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError(f"{where}: nested too deeply: not a checkpoint's state") from None
    except (ValueError, UnicodeError) as exc:
        raise CheckpointError(f"{where}: not a checkpoint's state ({exc})") from None
    if not isinstance(tree, dict) or tree.get("t") != man["step"]:
        raise CheckpointError(f"{where}: does not hold the simulation at step {man['step']}: the checkpoint is damaged")
    return tree


def _check_sizes(path: Path, attrs: dict, cfg) -> None:
    """The state must be sized for the config's users and steps: the kernels index it by
    them (a state of fewer steps than the config says corrupts memory). A second line
    behind the manifest's digest, for a manifest rewritten with a digest to match."""
    arrays = attrs.get("arrays") if isinstance(attrs.get("arrays"), dict) else {}
    n_srv = len(getattr(cfg, "servers", None) or [cfg.server])  # nodes 0..S-1 are the servers (D35)
    sizes = {"online": ("users.count", int(cfg.users.count) + n_srv),
             "ser_online": ("steps", int(cfg.steps))}
    for field, (key, n) in sizes.items():
        arr = arrays.get(field)
        if not isinstance(arr, np.ndarray) or arr.ndim < 1 or arr.shape[0] != n:
            got = "missing" if not isinstance(arr, np.ndarray) or arr.ndim < 1 else f"of length {arr.shape[0]}"
            raise CheckpointError(f"{path}: its state's {field} is {got}, not sized for the config's {key} "
                                  f"({n}): the checkpoint's config is not the one its state was made from")


def restore(path, cfg=None):
    """The `Simulation` saved in checkpoint `path` (a ``step-<t>`` directory or a folder
    holding some), ready to `run` on. With `cfg`, the checkpoint must have been made from
    it; without, its own config is used. The model bundle at the config's ``model`` path
    must be the one the run used. Raises `CheckpointError`."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import BundleError, accepted_digests

    path = find(path)
    man = read_manifest(path)
    if cfg is None:
        cfg = config_of(path, man)
    else:
        check_config(path, man, cfg)
    if int(cfg.steps) != man["steps"]:  # the state's arrays are sized for the run's steps
        raise CheckpointError(f"{path}: made for a run of {man['steps']} steps, its config says {cfg.steps}: "
                              "the checkpoint is damaged")
    try:
        bundle = load_bundle(cfg.model)
    except (BundleError, OSError) as exc:
        raise CheckpointError(f"{path}: its model bundle {cfg.model} cannot be loaded: {exc}") from None
    if man["model_sha256"] not in accepted_digests(bundle):  # a 0.8.0 checkpoint may hold the legacy one
        raise CheckpointError(f"{path}: made with another model bundle than the one now at {cfg.model} "
                              "(its content changed): resuming would mix two models")
    tree = load_attributes(path, man)
    _check_sizes(path, tree, cfg)
    try:
        return restore_simulation(cfg, bundle, tree)
    except ValueError as exc:
        raise CheckpointError(f"{path / OBJECTS}: cannot be resumed: {exc}") from None


def check_checkpointable(cfg) -> None:
    """Refuse (`CheckpointError`) to checkpoint runs of `cfg` when one of its policies has
    no checkpoint hooks (a plugin that does not define them): said before the run
    starts, not at its first checkpoint."""
    why = refusals(cfg)
    if why:
        raise CheckpointError("cannot checkpoint this run: " + "; ".join(why) + " (a policy from outside "
                              "the package must define checkpoint_state() and restore_checkpoint(); "
                              "docs/policies.md, \"Checkpoints\"); run it without checkpoints")


def simulate_resumable(cfg, store, every: int, progress: bool = False):
    """Run `cfg` with a checkpoint every `every` steps beside the result store `store`,
    continuing from the checkpoint there if one was made from this config and version;
    return (record, step resumed from or 0, note). A checkpoint that cannot be resumed
    (another config, version or bundle, or damaged) is replaced, and the note says why."""
    from gmm_volunteer.run.engine import Simulation

    check_checkpointable(cfg)
    folder = checkpoint_dir(store)
    remove_unfinished(folder)
    sim, note = None, ""
    if checkpoints(folder):
        try:
            sim = restore(folder, cfg)
        except CheckpointError as exc:
            note = f"checkpoint not used, started over: {exc}"
    if sim is None:
        clear(folder)
        sim = Simulation(cfg)
    resumed = int(sim.t)
    record = sim.run(progress=progress, checkpoint=Checkpointer(folder, every))
    return record, resumed, note
