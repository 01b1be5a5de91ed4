"""What a live testbed test needs of this machine (docs/testbed.md): root, cgroups,
network namespaces, iproute2 and, to run subtasks, the `testbed` extra. Each live test
asks `unavailable(...)` and skips with the reason it returns."""

from __future__ import annotations

import os
import shutil
import subprocess


def unavailable(runtime: bool = True) -> str | None:
    """Why a live testbed (with `runtime`: running subtasks over HTTP) cannot run here,
    or None."""
    if runtime:
        for module in ("aiohttp", "onnxruntime", "onnx", "cv2", "rapidocr"):
            try:
                __import__(module)
            except ImportError:
                return f"{module} is not installed (pip install 'gmm-volunteer[testbed]')"
    from gmm_volunteer.testbed.isolation import IsolationError, cgroup_version

    try:
        cgroup_version()
    except IsolationError as exc:
        return str(exc)
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"gmmvtbprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "cannot create a network namespace"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None
