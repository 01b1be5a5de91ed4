"""`gmmv fit` (and `gmmv collect`, delegated to `gmm_volunteer.fitting.collect.cli`).

`add_subcommands(subparsers)` is called by the `gmmv` CLI; each parser sets
`func(args) -> int` (the exit code). Heavy libraries are imported only when a command
runs. Exit codes of `fit`: 0 written, 2 unusable traces (the message names the file and
column).
"""

from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_BAD_TRACES = 2
PROGRESS_EVERY = 10.0  # s between progress lines inside a fitting stage


def _cmd_fit(args: argparse.Namespace) -> int:
    from gmm_volunteer.fitting.determinism import pin_threads_before_numpy

    pin_threads_before_numpy()  # the same traces give the same bundle, run to run
    from gmm_volunteer.fitting.arma import FULL_GRID, QUICK_GRID
    from gmm_volunteer.fitting.fit import fit_bundle
    from gmm_volunteer.fitting.hazard import DEGREES
    from gmm_volunteer.fitting.traces import TraceError
    from gmm_volunteer.io.bundlefiles import check_bundle_destination
    from gmm_volunteer.model.bundle import BundleError

    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.cli.outputs import check_output_target

    check_output_target(args.output)  # before minutes of fitting
    try:
        check_bundle_destination(args.output)  # before minutes of fitting
    except BundleError as err:
        raise CommandError(str(err), EXIT_BAD_TRACES) from None
    from gmm_volunteer.cli import feedback

    log = _stage_logger(feedback)
    try:
        out = fit_bundle(
            args.traces,
            args.output,
            candidates=[args.arma] if args.arma else QUICK_GRID if args.quick else FULL_GRID,
            degrees=DEGREES,
            report=not args.no_report,
            log=log,
            progress=log.progress,
            workers=args.workers,
            hazard_form=args.hazard_form,
            hazard_link=args.hazard_link,
        )
        log(None)
    except TraceError as err:  # `gmmv fit: error: ...`, as every command's input errors
        raise CommandError(str(err), EXIT_BAD_TRACES) from None
    print(f"wrote {out}/bundle.yaml" + ("" if args.no_report else f" and {out}/report/report.md"))
    return EXIT_OK


def arma_order(text: str) -> tuple[int, int]:
    """``"1,0"`` -> (1, 0): an ARMA order within the paper's grid's bounds."""
    from gmm_volunteer.fitting.arma import P_CANDIDATES, Q_CANDIDATES

    try:
        p, q = (int(x) for x in str(text).split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write P,Q, e.g. 1,0") from None
    if not (1 <= p <= max(P_CANDIDATES) and 0 <= q <= max(Q_CANDIDATES)):
        raise argparse.ArgumentTypeError(f"{text!r}: p must be 1..{max(P_CANDIDATES)} and q 0..{max(Q_CANDIDATES)}")
    return p, q


def _stage_logger(feedback):
    """``log(message)`` for `fit_bundle`: "gmmv fit: <stage> ..." on stderr (not with
    --quiet); with -v also how long the previous stage took. ``log(None)`` ends the last.
    ``log.progress(done, total)`` reports the ARMA candidates inside a stage."""
    import time

    log = feedback.Stages("gmmv fit")
    shown = {"t": 0.0}

    def progress(done: int, total: int, work_share: float) -> None:
        """A line inside a stage at most every PROGRESS_EVERY s (and at its end), with
        the time left extrapolated from the share of the stage's work done
        (`arma.candidate_work`: a count of candidates took ARMA(1, 0) for ARMA(5, 2),
        and counted ruled-out ones, decided at once, as work done, so the figure grew as
        the stage went on)."""
        now = time.monotonic()
        if log.started is None or (now - max(shown["t"], log.started) < PROGRESS_EVERY and done < total):
            return
        shown["t"] = now
        elapsed = now - log.started
        left = elapsed * (1.0 - work_share) / work_share if work_share > 0 else float("nan")
        feedback.info(f"gmmv fit:   {done} of {total} ARMA candidates (fitted or ruled out), {elapsed:.0f} s"
                      + (f", about {left:.0f} s left" if done < total and work_share > 0 else ""))

    log.progress = progress
    return log


def _add_output_flags(p, quiet_help: str = "no progress lines") -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    add_output_flags(p, quiet_help)


def add_subcommands(subparsers) -> None:
    """Add `fit` (and `collect`, when the collectors import) to the `gmmv` parser."""
    p = subparsers.add_parser(
        "fit",
        help="fit a model bundle from a traces folder",
        description="Fit the model's stochastic components from traces (traces/FORMAT.md) and write a model "
        "bundle (docs/formats.md) with a diagnostics report; see docs/fitting.md. Exit 2 on unusable traces.",
    )
    p.add_argument("traces", metavar="TRACES", help="traces folder (traces/FORMAT.md)")
    p.add_argument("-o", "--output", metavar="BUNDLE", required=True, help="bundle directory to write")
    p.add_argument("--quick", action="store_true", help="reduced ARMA grid p in {1,2,5}, q in {0,1,2}: minutes instead of tens of minutes")
    p.add_argument("--arma", type=arma_order, metavar="P,Q",
                   help="fit this one ARMA order to every series instead of searching a grid (wins over "
                        "--quick): seconds instead of minutes, to try traces end to end, not for a bundle to keep")
    p.add_argument("--no-report", action="store_true", help="skip the diagnostics report")
    from gmm_volunteer.fitting.hazard import FORMS, HAZARD_FORM, HAZARD_LINK, LINKS

    p.add_argument("--hazard-form", choices=FORMS, default=HAZARD_FORM,
                   help=f"form of the execution hazard (default {HAZARD_FORM}; docs/model.md D32)")
    p.add_argument("--hazard-link", choices=LINKS, default=HAZARD_LINK,
                   help=f"link of the hazards (default {HAZARD_LINK}; docs/model.md D32)")
    from gmm_volunteer.cli import argtypes

    p.add_argument("--workers", type=argtypes.count(1, 1024), default=1, metavar="N",
                   help="processes: 2 or more fit each series' ARMA candidates side by side in "
                        "that many (the same bundle; default 1)")
    _add_output_flags(p, "no progress lines")
    p.set_defaults(func=_cmd_fit)
    try:
        from gmm_volunteer.fitting.collect.cli import add_collect_parser
    except ImportError:
        return
    add_collect_parser(subparsers)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m gmm_volunteer.fitting.cli fit ...`): `gmmv`'s, whose
    handlers print errors and map them to exit codes."""
    from gmm_volunteer.cli.commands import main as gmmv_main

    return gmmv_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
