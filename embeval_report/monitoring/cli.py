"""``embeval-report profile`` and ``embeval-report monitor``: argparse set-up and handlers.

::

    embeval-report profile baseline.yaml --out profile/
    embeval-report monitor profile/ new_batch.npy [--history monitor.jsonl] [--fail-on warning|critical]

``monitor`` prints a short table (one row per signal, with the bands its level is read against), writes the
batch's JSON (``--json``; by default ``monitor-<batch>.json`` beside ``--history``, else in the current folder;
``--json -`` prints only the JSON on stdout, and nothing else on stdout or stderr unless there is an error),
appends one line to ``--history`` when given, and exits 3 when the batch's level is at or above ``--fail-on``.
Bad input (a batch of another dimension, NaN, an empty batch, a profile of another format version) is one line,
exit 2 (raised as :class:`~embeval_report.errors.InputError`, printed by the main CLI).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..errors import ExitCode, InputError

COMMANDS = ("profile", "monitor")

MONITOR_EXIT = """exit status:
  0    the batch is below --fail-on (or no --fail-on)
  2    bad input or usage (one line names the file, field or row)
  3    --fail-on: the batch's alert level reached the threshold"""


def register(sub) -> None:
    """Add the ``profile`` and ``monitor`` subcommands to the main parser's subparsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    pr = sub.add_parser("profile", help="store a reference set's statistics for `monitor` (mean, covariance, norms, "
                                        "quantiles, a row sample, isotropy, a k-NN reference)")
    pr.add_argument("source", type=Path, help="the reference: a manifest (YAML) or a bare vectors file")
    pr.add_argument("--out", required=True, type=Path, help="the profile folder (new, empty, or an earlier profile)")
    pr.add_argument("--seed", type=int, default=0, help="seed of the row sample (default 0)")
    pr.add_argument("--sample-size", type=int, default=None,
                    help="rows of the k-NN reference and two-sample tests (default 5000; 1000 more are held out "
                         "for calibration)")
    pr.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    mo = sub.add_parser("monitor", help="score a new batch against a profile; alert levels, JSON, history",
                        epilog=MONITOR_EXIT, formatter_class=fmt)
    mo.add_argument("profile", type=Path, help="a folder written by `embeval-report profile`")
    mo.add_argument("batch", type=Path, help="the new batch: a vectors file (.npy, .npz, .parquet, .csv, ...)")
    mo.add_argument("--history", type=Path, default=None, help="append one JSON line for this batch to this file")
    mo.add_argument("--fail-on", choices=("warning", "critical"), default=None,
                    help="exit with status 3 when the batch's alert level reaches this level")
    mo.add_argument("--json", type=Path, default=None,
                    help="where to write the batch's JSON (default: monitor-<batch name>.json beside --history, "
                         "else in the current folder; '-' prints only the JSON on stdout, nothing else)")
    mo.add_argument("--name", default=None, help="the batch's name in the history (default: the file name)")
    mo.add_argument("--timestamp", default=None,
                    help="the batch's time in the history (default: now, ISO 8601)")
    mo.add_argument("--seed", type=int, default=0, help="seed of the test samples and permutations (default 0)")
    mo.add_argument("--alpha", type=float, default=0.05,
                    help="false-alarm rate of one batch: each of the seven signals' tests is read at alpha/7 "
                         "(Bonferroni; default 0.05)")
    mo.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")


def run(args) -> int:
    """Dispatch ``profile`` or ``monitor`` (raises :class:`InputError` on bad input)."""
    return _profile(args) if args.command == "profile" else _monitor(args)


def _profile(args) -> int:
    import tempfile

    from ..io import load_source
    from ..io.model_source import embedded_source
    from .profile import CALIBRATION, SAMPLE_SIZE, build_profile, save_profile

    if args.sample_size is not None and args.sample_size < 20:
        raise InputError(f"--sample-size: expected at least 20 rows, got {args.sample_size}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        es = load_source(embedded_source(args.source, tmp)[0])
    p = build_profile(es.vectors, name=es.name, seed=args.seed, sample_size=args.sample_size or SAMPLE_SIZE,
                      calibration=CALIBRATION, device=args.device)
    folder = save_profile(p, args.out)
    print(f"profile of {es.name}: {p.n:,} vectors, d = {p.d}; APCS {p.apcs:.4f}, PR/d "
          f"{p.participation_ratio_fraction:.3f}, mean norm {p.norm_mean:.4g} (CV {p.norm_cv:.3f}); "
          f"{len(p.sample):,} sampled rows ({p.n_index:,} k-NN reference, {len(p.calibration_scores):,} held out; "
          f"the anomaly threshold is their {100 * (1 - p.nominal_rate):.3g} % quantile); "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if p.apcs > 0.3 or p.norm_cv > 0.5:
        print("embeval-report: note: the reference itself is past a §220.2 dashboard threshold (APCS > 0.3 or norm "
              "CV > 0.5); `monitor` alerts on those only when a batch is in a worse band than the reference",
              file=sys.stderr)
    print(folder)
    return ExitCode.OK


def _fmt(x, spec=".4g") -> str:
    return "–" if x is None or x != x else format(x, spec)


def table(score) -> str:
    """The short table ``monitor`` prints: one row per signal (its effect, the value its level reads against the
    warning / critical edges, the raw and the Bonferroni p, level), then the batch's level and, when it is too
    small, what it cannot see."""
    from .score import VERDICT, edges_text, reads_text

    lines = [f"{'signal':28s} {'value':>10s} {'reads':>8s} {'warning / critical':>22s} {'p':>8s} {'p (×7)':>8s}  level"]
    for s in score.signals.values():
        lines.append(f"{s.label:28s} {_fmt(s.value):>10s} {reads_text(s.bands, s.plotted_value, s.p_value):>8s} "
                     f"{edges_text(s.bands):>22s} {_fmt(s.p_value, '.2g'):>8s} {_fmt(s.p_adjusted, '.2g'):>8s}  "
                     f"{s.level}")
    lines.append(f"batch: {score.n:,} rows, d = {score.d}, level {score.level.upper()} (the report's verdict: "
                 f"{VERDICT[score.level]}; {score.seconds:.2f} s)")
    for name in score.info.get("underpowered", []):
        pw = score.info["power"][name]
        need = f"about {pw['rows_needed']:,} rows needed" if pw["rows_needed"] else "more reference rows needed"
        lines.append(f"note: too small to see a warning-level change of the {score.signals[name].label.lower()}: "
                     f"power {pw['power']:.2f} to detect {pw['change']} ({need})")
    return "\n".join(lines)


def _monitor(args) -> int:
    import json

    from ..io import load_vectors
    from ..io.monitor_history import append_history
    from ..safe_files import check_target, replace_file
    from .score import history_record
    from .profile import load_profile
    from .score import LEVELS, score_batch

    if not 0 < args.alpha < 1:
        raise InputError(f"--alpha: expected a value between 0 and 1, got {args.alpha}")
    quiet = str(args.json) == "-"  # only the JSON on stdout, nothing else unless an error
    default = Path(f"monitor-{args.batch.stem}.json")
    out = None if quiet else args.json or (args.history.parent / default if args.history else default)
    for path, what in ((out, "--json"), (args.history, "--history")):
        if path is not None:
            check_target(path, what)  # a link there: one line, exit 2, before anything is read or written
    profile = load_profile(args.profile)
    Y, _ = _read_batch(args.batch, load_vectors)
    score = score_batch(profile, Y, seed=args.seed, alpha=args.alpha, label=args.batch.name, device=args.device)
    record = history_record(score, batch=args.name or args.batch.stem,
                            timestamp=args.timestamp or time.strftime("%Y-%m-%dT%H:%M:%S"), file=str(args.batch))
    text = json.dumps(record, indent=2, allow_nan=False)
    if quiet:
        print(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_file(out, text + "\n", "--json")  # a new file renamed into place, never through a link
        print(table(score))
        print(out)
    if args.history:
        append_history(args.history, record)
        if not quiet:
            print(f"appended to {args.history}", file=sys.stderr)
    if args.fail_on and LEVELS.index(score.level) >= LEVELS.index(args.fail_on):
        if not quiet:
            print(f"embeval-report: the batch reached '{score.level}' (--fail-on {args.fail_on})", file=sys.stderr)
        return ExitCode.GATE
    return ExitCode.OK


def _read_batch(path: Path, load_vectors):
    """The batch's vectors; an empty file reads as an empty batch (one clear line)."""
    import numpy as np

    if path.suffix == ".npy" and path.is_file():
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path.name}: not a readable .npy array ({exc})") from None
        if arr.ndim == 2 and arr.shape[0] == 0:
            raise InputError(f"{path.name}: an empty batch (0 rows); expected at least 2 vectors")
    return load_vectors(path)
