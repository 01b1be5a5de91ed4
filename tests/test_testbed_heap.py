"""glibc's heap in a testbed node (docs/testbed.md, "Memory"): with `testbed.mmap_threshold_kb`
a node's process maps every large buffer on its own and returns it whole when freed;
with glibc's dynamic threshold (0, the runs before 0.8.8) a large buffer freed raises the
threshold and the next one of its size comes from the heap. Each case runs in a fresh
process, since the setting is per process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gmm_volunteer.fitting.collect.models import fix_mmap_threshold
from gmm_volunteer.run.config import testbed as section

# Allocates and frees a 24 MB buffer twice and prints, for each, whether glibc mapped it
# on its own (`mallinfo2`: the bytes in mapped blocks while it is held), which does not
# depend on what the process's heap held before. With the dynamic threshold, freeing the
# first raises the threshold to its size, so the second comes from the heap.
HELD = """
import sys
from gmm_volunteer.fitting.collect.models import fix_mmap_threshold
ok = fix_mmap_threshold(int(sys.argv[1]))
import ctypes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(k, ctypes.c_size_t) for k in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
n = 24 * 1024 * 1024
mapped = []
for _ in range(2):
    before = libc.mallinfo2().hblkhd
    p = libc.malloc(n)
    ctypes.memset(p, 1, n)
    mapped.append(libc.mallinfo2().hblkhd - before >= n)
    libc.free(p)
print(ok, *mapped)
"""


def _mapped(kb: int) -> list[str]:
    out = subprocess.run([sys.executable, "-c", HELD, str(kb)], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")
def test_a_fixed_threshold_maps_every_large_buffer():
    """The fixed setting maps both buffers. What glibc's dynamic threshold does with the
    second is its own affair and not asserted: alone, in a fresh process, it came from
    the heap here; inside the full suite on a clean clone it was mapped (2026-12-06), for
    a reason not found. docs/results/testbed-heap.md measures what it does to a batch."""
    ok, first, second = _mapped(section.Testbed().mmap_threshold_kb)
    assert (ok, first, second) == ("True", "True", "True")  # each 24 MB buffer mapped, returned whole
    assert _mapped(0)[0] == "False"  # 0 leaves glibc as it is


def test_zero_leaves_glibc_alone():
    assert fix_mmap_threshold(0) is False


def test_the_node_spec_carries_the_setting(tmp_path):
    import numpy as np

    from gmm_volunteer.testbed.config import load_testbed
    from gmm_volunteer.testbed.run import _spec

    cfg, tb = load_testbed("configs/testbed/overload-uniform.yaml", ["testbed.mmap_threshold_kb=128"])
    assert _spec(cfg, tb, 0, np.full(5, 200.0), np.full(5, 100.0))["mmap_threshold_kb"] == 128
    cfg, tb = load_testbed("configs/testbed/overload-uniform.yaml", [])
    assert _spec(cfg, tb, 0, np.full(5, 200.0), np.full(5, 100.0))["mmap_threshold_kb"] == 4096


@pytest.mark.parametrize("value", ["-1", "40000", "1.5"])
def test_a_bad_threshold_exits_2_naming_the_override(value, capsys):
    from gmm_volunteer.cli.commands import main

    assert main(["validate", "configs/testbed/overload-uniform.yaml", "--set",
                 f"testbed.mmap_threshold_kb={value}"]) == 2
    assert f"--set testbed.mmap_threshold_kb={value} on" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--mmap-threshold-kb", "-5"], "must be 0 to 32768"),
    (["--mmap-threshold-kb", "64", "--testbed", "configs/testbed/overload-uniform.yaml"], "set testbed.mmap_threshold_kb"),
])
def test_calibrate_refuses_a_bad_threshold(tmp_path, capsys, argv, needle):
    from gmm_volunteer.testbed.calibrate import main

    assert main(["gmm_volunteer/bundles/default", str(tmp_path / "out"), *argv]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# Two batches through `timed_batch`, each writing 30 MB while it runs, in a fresh process
# with a fixed threshold, so that the buffer is new memory (not freed heap reused).
PEAK = """
import json
from gmm_volunteer.fitting.collect.models import fix_mmap_threshold
from gmm_volunteer.testbed.device import resident_mb, timed_batch
fix_mmap_threshold(4096)
grown = []
def run_batch(name, session, blobs):
    grown.append(b"\\x01" * 30_000_000)
    grown.clear()
    return [b"r"] * len(blobs)
log = []
timed_batch(run_batch, "x", None, [b"a", b"b"], False, log, peak=True)
timed_batch(run_batch, "x", None, [b"a"], False, log, peak=False)
print(json.dumps([log, resident_mb()]))
"""


def test_a_batch_run_alone_logs_its_peak_and_one_beside_others_does_not():
    pytest.importorskip("aiohttp", reason="the testbed extra (aiohttp) is not installed")
    out = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, check=True)
    log, now = json.loads(out.stdout)
    assert [len(r) for r in log] == [7, 7]
    assert log[1][6] is None
    assert log[0][6] >= now + 25.0, (log[0][6], now)  # the 30 MB buffer is in the batch's peak
