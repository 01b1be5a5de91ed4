"""Refit a bundle's hazard block alone, the rest of the bundle kept as it is (docs/model.md
D32; docs/fitting.md, "Refitting the hazards alone").

    python -m gmm_volunteer.fitting.refit_hazard BUNDLE_DIR TRACES_DIR [--form F] [--link L] [--no-write]

The hazards are read by nothing but `execution.progress: paper` (D27), so a refit of them
alone leaves the work law's trajectories as they were, where a whole refit would also
move the ARMA blocks (docs/fitting.md). Writes BUNDLE_DIR/bundle.yaml in place (the
hazard block, and the provenance line told so) and BUNDLE_DIR/report/hazard.md (the
degree selection and the checks); exit status 3 when the checks fail (as `gmmv hazards`). `--form` and
`--link` fit another form or link than `gmmv fit`'s defaults; `--no-write` prints the
held-out likelihoods and the checks and writes nothing (to compare forms).
"""

from __future__ import annotations

import sys
from pathlib import Path


def refit_hazard(bundle_dir, traces_dir, form: str | None = None, link: str | None = None,
                 write: bool = True) -> tuple[str, bool]:
    import yaml

    from gmm_volunteer._version import __version__
    from gmm_volunteer.fitting.determinism import single_threaded
    from gmm_volunteer.fitting.fit import quota_provenance
    from gmm_volunteer.fitting.hazard import HAZARD_FORM, HAZARD_LINK
    from gmm_volunteer.fitting.hazard_check import quota_table
    from gmm_volunteer.fitting.hazard_select import checks_of_fit, fit_hazard
    from gmm_volunteer.fitting.traces import load_traces
    from gmm_volunteer.io.bundlefiles import FILENAME
    from gmm_volunteer.model.bundle import validate_bundle

    path = Path(bundle_dir) / FILENAME
    data = yaml.safe_load(path.read_text())
    validate_bundle(data, str(path))  # a bad bundle is refused before anything is written
    traces = load_traces(traces_dir)
    with single_threaded():
        block, diag = fit_hazard(traces, form=form or HAZARD_FORM, link=link or HAZARD_LINK)
        data["hazard"] = block
        note = (f"; hazard block refitted alone by gmm-volunteer {__version__} (refit_hazard {traces_dir}"
                f"{quota_provenance(traces)})")
        data["provenance"] = data.get("provenance", "").split("; hazard block refitted alone")[0] + note
        model = validate_bundle(data, str(path))
        text, passed = checks_of_fit(model, traces, diag)
        quota = quota_table(model, traces)
    if not write:
        lines = [f"execution form {diag['form']}, link {diag['link']}; held-out log-likelihood per degree:"]
        lines += [f"  {ph}: " + ", ".join(f"{q}: {v:.2f}" for q, v in h.items()) for ph, h in diag["heldout"].items() if h]
        return "\n".join(lines) + "\n" + (quota + "\n" if quota else "") + text, passed
    heldout = "\n".join(f"- {ph}: " + ", ".join(f"degree {q}: {v:.2f}" for q, v in h.items())
                        for ph, h in diag["heldout"].items() if h)
    report = Path(bundle_dir) / "report"
    report.mkdir(exist_ok=True)
    (report / "hazard.md").write_text(
        f"# Hazards refitted alone (docs/model.md D32)\n\n`python -m gmm_volunteer.fitting.refit_hazard "
        f"{bundle_dir} {traces_dir}` (gmm-volunteer {__version__}); execution form {diag['form']}, link "
        f"{diag['link']}. The hazard sections of report.md describe the previous fit.\n\n"
        f"Log-likelihood of each batch size left out in turn, summed, per degree:\n\n{heldout}\n\n"
        + (f"{quota}\n" if quota else "") + f"Checks:\n\n```\n{text}\n```\n")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False, width=100))
    tmp.replace(path)
    return text, passed


def main(argv=None) -> int:
    import argparse

    from gmm_volunteer.fitting.hazard import FORMS, LINKS

    parser = argparse.ArgumentParser(prog="python -m gmm_volunteer.fitting.refit_hazard",
                                     description="refit a bundle's hazard block alone (docs/model.md D32)")
    parser.add_argument("bundle", metavar="BUNDLE_DIR")
    parser.add_argument("traces", metavar="TRACES_DIR")
    parser.add_argument("--form", choices=FORMS)
    parser.add_argument("--link", choices=LINKS)
    parser.add_argument("--no-write", action="store_true", help="print the likelihoods and checks, write nothing")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)  # bad arguments: exit 2
    from gmm_volunteer.fitting.traces import TraceError
    from gmm_volunteer.model.bundle import BundleError

    try:
        text, passed = refit_hazard(args.bundle, args.traces, args.form, args.link, not args.no_write)
    except (TraceError, BundleError, FileNotFoundError) as exc:
        print(f"refit_hazard: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if passed else 3


if __name__ == "__main__":
    sys.exit(main())
