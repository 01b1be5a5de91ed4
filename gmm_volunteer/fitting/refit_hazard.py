"""Refit a bundle's hazard block alone, the rest of the bundle kept as it is (docs/model.md
D32; docs/fitting.md, "Refitting the hazards alone").

    python -m gmm_volunteer.fitting.refit_hazard BUNDLE_DIR TRACES_DIR

The hazards are read by nothing but `execution.progress: paper` (D27), so a refit of them
alone leaves the work law's trajectories as they were, where a whole refit would also
move the ARMA blocks (docs/fitting.md). Writes BUNDLE_DIR/bundle.yaml in place (the
hazard block, and the provenance line told so) and BUNDLE_DIR/report/hazard.md (the
degree selection and the checks); exit status 1 when the checks fail.
"""

from __future__ import annotations

import sys
from pathlib import Path


def refit_hazard(bundle_dir, traces_dir) -> tuple[str, bool]:
    import yaml

    from gmm_volunteer._version import __version__
    from gmm_volunteer.fitting.determinism import single_threaded
    from gmm_volunteer.fitting.hazard_select import checks_of_fit, fit_hazard
    from gmm_volunteer.fitting.traces import load_traces
    from gmm_volunteer.io.bundle import FILENAME, validate_bundle

    path = Path(bundle_dir) / FILENAME
    data = yaml.safe_load(path.read_text())
    validate_bundle(data, str(path))  # a bad bundle is refused before anything is written
    traces = load_traces(traces_dir)
    with single_threaded():
        block, diag = fit_hazard(traces)
        data["hazard"] = block
        note = f"; hazard block refitted alone by gmm-volunteer {__version__} (refit_hazard {traces_dir})"
        data["provenance"] = data.get("provenance", "").split("; hazard block refitted alone")[0] + note
        model = validate_bundle(data, str(path))
        text, passed = checks_of_fit(model, traces, diag)
    heldout = "\n".join(f"- {ph}: " + ", ".join(f"degree {q}: {v:.2f}" for q, v in h.items())
                        for ph, h in diag["heldout"].items() if h)
    report = Path(bundle_dir) / "report"
    report.mkdir(exist_ok=True)
    (report / "hazard.md").write_text(
        f"# Hazards refitted alone (docs/model.md D32)\n\n`python -m gmm_volunteer.fitting.refit_hazard "
        f"{bundle_dir} {traces_dir}` (gmm-volunteer {__version__}); execution form {diag['form']}, link "
        f"{diag['link']}. The hazard sections of report.md describe the previous fit.\n\n"
        f"Log-likelihood of each batch size left out in turn, summed, per degree:\n\n{heldout}\n\n"
        f"Checks:\n\n```\n{text}\n```\n")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False, width=100))
    tmp.replace(path)
    return text, passed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    from gmm_volunteer.fitting.traces import TraceError
    from gmm_volunteer.io.bundle import BundleError

    try:
        text, passed = refit_hazard(*argv)
    except (TraceError, BundleError, FileNotFoundError) as exc:
        print(f"refit_hazard: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
