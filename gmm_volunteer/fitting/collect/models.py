"""The measured subtask types: model files, inputs, pre- and post-processing.

Five computer-vision subtask types, light to heavy:

  ppocr_det     PP-OCRv6 text detection (small), TRAINED weights shipped in the rapidocr wheel
  ppocr_cls     PP-OCR text-line orientation classifier (mobile v2.0), TRAINED (rapidocr)
  ppocr_rec     PP-OCRv6 text recognition (small), TRAINED (rapidocr)
  mobilenet_v2  MobileNetV2 image classifier, architecture with RANDOM weights
  resnet50      ResNet-50 image classifier, architecture with RANDOM weights

Random-weight models measure cost (time, memory, sizes), not accuracy.

A subtask's input is one JPEG image (synthetic, deterministic from a seed: a text page
for detection, a text line for cls/rec, a smooth colour scene for the classifiers); its
result is what a node would send back (boxes / label / character indices as JSON,
logits as float32). Execution = decode + preprocess + ONNX Runtime inference of the whole
batch in one call + postprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RANDOM_NOTE = "architecture with random weights: measures cost, not accuracy"


@dataclass(frozen=True)
class SubtaskSpec:
    name: str
    description: str
    weights: str
    model_file: str  # file name inside the rapidocr package or the model dir


SPECS: dict[str, SubtaskSpec] = {
    s.name: s
    for s in [
        SubtaskSpec("ppocr_det", "PP-OCRv6 text detection (small), 736x736 page image; ONNX model "
                    "shipped by rapidocr", "trained (rapidocr)", "PP-OCRv6_det_small.onnx"),
        SubtaskSpec("ppocr_cls", "PP-OCR text-line orientation classifier (mobile v2.0), 48x192 "
                    "line image; ONNX model shipped by rapidocr", "trained (rapidocr)",
                    "ch_ppocr_mobile_v2.0_cls_mobile.onnx"),
        SubtaskSpec("ppocr_rec", "PP-OCRv6 text recognition (small), 48x320 line image, CTC greedy "
                    "decoding; ONNX model shipped by rapidocr", "trained (rapidocr)",
                    "PP-OCRv6_rec_small.onnx"),
        SubtaskSpec("mobilenet_v2", f"MobileNetV2 (width 1.0) classifier, 224x224 image, 1000 "
                    f"classes; {RANDOM_NOTE}", "random", "mobilenet_v2.onnx"),
        SubtaskSpec("resnet50", f"ResNet-50 classifier, 224x224 image, 1000 classes; {RANDOM_NOTE}",
                    "random", "resnet50.onnx"),
    ]
}
ALL_TYPES = list(SPECS)  # the default catalogue

# The paper-scale catalogue (paper 3.1): the five above and heavier architectures
# (`archs_paper.py`), all random weights.
_PAPER = {
    "vit_b16": "Vision Transformer B/16 classifier, 224x224 image, 1000 classes",
    "vit_l16": "Vision Transformer L/16 classifier, 224x224 image, 1000 classes",
    "convnext_b": "ConvNeXt-B classifier, 224x224 image, 1000 classes",
    "convnext_l": "ConvNeXt-L classifier, 224x224 image, 1000 classes",
    "swin_b": "Swin Transformer B (window 7) classifier, 224x224 image, 1000 classes",
    "resnet101": "ResNet-101 classifier, 224x224 image, 1000 classes",
    "resnet152": "ResNet-152 classifier, 224x224 image, 1000 classes",
    "resnext101_32x32d": "ResNeXt-101 32x32d classifier, 224x224 image, 1000 classes",
    "deeplabv3_r101": "DeepLabV3 semantic segmentation, dilated ResNet-101 (output stride 8) with ASPP, "
                      "520x520 image, 21 classes, class map returned as PNG",
}
SPECS.update({n: SubtaskSpec(n, f"{d}; {RANDOM_NOTE}", "random", f"{n}.onnx") for n, d in _PAPER.items()})
PAPER_TYPES = list(SPECS)  # candidates; the catalogue shipped is named in traces/paper-scale


def default_model_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gmmv" / "models"


def rapidocr_model_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("rapidocr")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("rapidocr is not installed (pip install 'gmm-volunteer[collect]')")
    return Path(list(spec.submodule_search_locations)[0]) / "models"


def model_path(name: str, model_dir: str | os.PathLike | None = None) -> Path:
    """Path of the ONNX file of subtask type `name`; builds random-weight models if missing.

    The build runs in a separate process so that neither the builder's memory nor torch
    (the paper-scale architectures) is ever in a measured worker. MobileNetV2 and
    ResNet-50 are written as ONNX graphs (`archs.py`, the `collect` extra); the
    paper-scale ones need torch (`archs_paper.py`, the `paper-models` extra).
    """
    spec = SPECS[name]
    if spec.weights.startswith("trained"):
        p = rapidocr_model_dir() / spec.model_file
        if not p.exists():
            raise FileNotFoundError(f"{p} not found in the rapidocr package")
        return p
    mdir = Path(model_dir) if model_dir else default_model_dir()
    p = mdir / spec.model_file
    if not p.exists():
        module = "archs" if name in ("resnet50", "mobilenet_v2") else "archs_paper"
        needs = "onnx" if module == "archs" else "torch"
        import importlib.util

        if importlib.util.find_spec(needs) is None:
            extra = "collect" if module == "archs" else "paper-models"
            raise RuntimeError(f"building the random-weight model {name} needs {needs}, which is not "
                               f"installed (pip install 'gmm-volunteer[{extra}]'; docs/fitting.md)")
        code = (f"import sys; from gmm_volunteer.fitting.collect.{module} import build_onnx; "
                "build_onnx(sys.argv[1], sys.argv[2], seed=0)")
        root = str(Path(__file__).resolve().parents[3])  # the folder holding gmm_volunteer/
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        subprocess.run([sys.executable, "-c", code, name, str(p)], check=True, env=env)
    return p


# ----------------------------------------------------------------------------- inputs
_WORDS = ("volunteer inference node batch subtask model queue latency server request "
          "upload download memory storage bandwidth schedule affinity uniform").split()


def _text(rng, n_words):
    return " ".join(rng.choice(_WORDS, size=n_words))


def image_size(name: str) -> int:
    """Side of the square scene image of an image classifier or segmenter."""
    return 520 if name == "deeplabv3_r101" else 224


def make_input(name: str, rng: np.random.Generator) -> bytes:
    """One synthetic JPEG input for subtask type `name`."""
    import cv2

    if name == "ppocr_det":
        img = np.full((736, 736, 3), 255, np.uint8)
        y = 40
        while y < 720:
            cv2.putText(img, _text(rng, int(rng.integers(2, 6))), (int(rng.integers(10, 60)), y),
                        cv2.FONT_HERSHEY_SIMPLEX, float(rng.uniform(0.6, 1.1)), (0, 0, 0), 2)
            y += int(rng.integers(30, 60))
        img = np.clip(img.astype(np.int16) + rng.integers(-12, 12, img.shape), 0, 255).astype(np.uint8)
    elif name in ("ppocr_cls", "ppocr_rec"):
        w = 192 if name == "ppocr_cls" else 320
        img = np.full((48, w, 3), 255, np.uint8)
        cv2.putText(img, _text(rng, 3 if name == "ppocr_rec" else 2), (4, 34),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 2)
        if name == "ppocr_cls" and rng.random() < 0.5:
            img = cv2.rotate(img, cv2.ROTATE_180)
        img = np.clip(img.astype(np.int16) + rng.integers(-12, 12, img.shape), 0, 255).astype(np.uint8)
    else:
        size = image_size(name)
        small = rng.integers(0, 256, (14, 14, 3)).astype(np.uint8)
        img = cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)
        img = cv2.GaussianBlur(img, (5, 5), 0)
        img = np.clip(img.astype(np.int16) + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


# ----------------------------------------------------------------------------- execution
_IMNET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_IMNET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def preprocess(name: str, blobs: list[bytes]) -> np.ndarray:
    import cv2

    imgs = [cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR) for b in blobs]
    if name == "ppocr_det":
        arr = np.stack([cv2.resize(im, (736, 736)) for im in imgs]).astype(np.float32)
        arr = (arr / 255.0 - 0.5) / 0.5
    elif name == "ppocr_cls":
        arr = np.stack([cv2.resize(im, (192, 48)) for im in imgs]).astype(np.float32)
        arr = (arr / 255.0 - 0.5) / 0.5
    elif name == "ppocr_rec":
        arr = np.stack([cv2.resize(im, (320, 48)) for im in imgs]).astype(np.float32)
        arr = (arr / 255.0 - 0.5) / 0.5
    else:
        size = image_size(name)
        rgb = [cv2.cvtColor(cv2.resize(im, (size, size)), cv2.COLOR_BGR2RGB) for im in imgs]
        arr = (np.stack(rgb).astype(np.float32) / 255.0 - _IMNET_MEAN) / _IMNET_STD
    return np.ascontiguousarray(arr.transpose(0, 3, 1, 2))


def postprocess(name: str, out: np.ndarray) -> list[bytes]:
    """Per-subtask result payloads (what a node uploads)."""
    import cv2

    res = []
    if name == "ppocr_det":
        for prob in out[:, 0]:
            mask = (prob > 0.3).astype(np.uint8)
            contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
            boxes = []
            for c in contours:
                x, y, w, h = cv2.boundingRect(c)
                if w * h >= 16:
                    score = float(prob[y:y + h, x:x + w].mean())
                    if score >= 0.5:
                        boxes.append([x, y, x + w, y + h, round(score, 3)])
            res.append(json.dumps({"boxes": boxes}).encode())
    elif name == "ppocr_cls":
        for p in out:
            k = int(np.argmax(p))
            res.append(json.dumps({"label": ["0", "180"][k], "score": round(float(p[k]), 4)}).encode())
    elif name == "ppocr_rec":
        for seq in out:
            idx = np.argmax(seq, axis=-1)
            prob = np.max(seq, axis=-1)
            keep = np.concatenate([[True], idx[1:] != idx[:-1]]) & (idx != 0)
            res.append(json.dumps({"chars": idx[keep].tolist(),
                                   "score": round(float(prob[keep].mean()) if keep.any() else 0.0, 4)}).encode())
    elif name == "deeplabv3_r101":
        for logits in out:  # (classes, H, W) -> class map, sent as a PNG
            ok, buf = cv2.imencode(".png", np.argmax(logits, axis=0).astype(np.uint8))
            res.append(buf.tobytes())
    else:
        for logits in out:
            res.append(np.asarray(logits, np.float32).tobytes())
    return res


# What a volunteer's runtime would use (paper 3.1: the base profile offers 200 % CPU, i.e.
# 2 cores): 2 intra-op threads, 1 inter-op thread, sequential execution of the graph.
# Spinning is off: an idle thread of a non-intrusive runtime should not burn a core while
# it waits, and with spinning the CPU time measured would count that waiting as work.
INTRA_OP_THREADS = 2
INTER_OP_THREADS = 1
SESSION_SETTINGS = {"intra_op_num_threads": INTRA_OP_THREADS, "inter_op_num_threads": INTER_OP_THREADS,
                    "execution_mode": "sequential", "intra_op_allow_spinning": False,
                    "enable_cpu_mem_arena": False}


def make_session(path: str | os.PathLike, threads: int = INTRA_OP_THREADS, inter_threads: int = INTER_OP_THREADS):
    """ONNX Runtime session on the CPU with the stated thread settings (0 = runtime default)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads > 0:
        so.intra_op_num_threads = threads
    if inter_threads > 0:
        so.inter_op_num_threads = inter_threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    # no memory arena: buffers are returned after each run, so the RSS of a run reflects
    # that run's batch size rather than the largest batch seen before
    so.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc), so that the next run's memory starts
    clean: the collector trims between runs, so the bundle's memory estimates are of a
    trimmed heap (docs/fitting.md), and the testbed's volunteers trim after each batch."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)


def fix_mmap_threshold(kb: int) -> bool:
    """Make glibc map every buffer of at least `kb` KB on its own and return it whole
    when freed, with the threshold fixed (`mallopt(M_MMAP_THRESHOLD)` turns glibc's
    dynamic threshold off). With the dynamic one, once a tensor of a batch is freed the
    threshold rises to its size (up to 32 MB), the next ones come from the heap, and the
    batch peaks above what it holds live (docs/testbed.md, "Memory"). `kb` 0 leaves
    glibc's default; False when this is not glibc or it refused."""
    if kb <= 0:
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, int(kb) * 1024))
    except (OSError, AttributeError):
        return False


def run_batch(name: str, session, blobs: list[bytes]) -> list[bytes]:
    x = preprocess(name, blobs)
    out = session.run(None, {session.get_inputs()[0].name: x})[0]
    return postprocess(name, out)
