"""``embeval-report``: the command line.

Exit status: 0 success; 2 bad input or usage (one-line message, no traceback); 3 when
``--fail-on`` is given and a verdict reached that level; 130 when interrupted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import InputError
from .thresholds import SEVERITY

EXIT_INPUT, EXIT_GATE = 2, 3


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="report folder to write (replaced atomically)")
    p.add_argument("--chapters", type=lambda s: [c.strip() for c in s.split(",") if c.strip()],
                   help="comma-separated chapter names (default: every chapter whose inputs exist)")
    p.add_argument("--seed", type=int, default=0, help="seed for every sampling step (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--sample-size", type=int, default=None,
                   help="size of sampled estimates (pairs, rows) where no exact identity exists")
    p.add_argument("--renderer", choices=("auto", "quarto", "builtin"), default="auto")
    p.add_argument("--formats", default="html,pdf", type=lambda s: tuple(f.strip() for f in s.split(",") if f.strip()),
                   help="comma-separated: html, pdf (default both)")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--fail-on", choices=("concerning", "problematic"), default=None,
                   help="exit with status 3 when any verdict reaches this level (CI gating)")
    p.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="embeval-report", description="Evaluate an embedding set and write a report.")
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="generate the built-in demo embedding set and write its report")
    _common(demo)
    run = sub.add_parser("run", help="write the report for a manifest (YAML) or a bare vectors file")
    run.add_argument("source", type=Path)
    _common(run)
    ch = sub.add_parser("chapters", help="list the chapters and the inputs each needs")
    ch.add_argument("source", nargs="?", type=Path, help="a manifest or vectors file to check against")
    rd = sub.add_parser("render", help="re-render an executed report folder")
    rd.add_argument("dir", type=Path)
    rd.add_argument("--renderer", choices=("auto", "quarto", "builtin"), default="auto")
    rd.add_argument("--formats", default="html,pdf", type=lambda s: tuple(f.strip() for f in s.split(",")))
    rd.add_argument("--title", default=None)
    return ap


def _check_formats(formats) -> None:
    bad = [f for f in formats if f not in ("html", "pdf")]
    if bad or not formats:
        raise InputError(f"--formats: expected a comma-separated list of html, pdf; got {','.join(formats) or 'nothing'}")


def _run(args, source, prepare=None) -> int:
    from .runner import run_report

    _check_formats(args.formats)
    result = run_report(source, args.out, chapters=args.chapters, seed=args.seed, device=args.device,
                        sample_size=args.sample_size, renderer=args.renderer, formats=args.formats,
                        title=args.title, timeout=args.timeout, prepare=prepare)
    for o in sorted(result.outcomes, key=lambda o: o.chapter.order):
        extra = f" ({o.reason})" if o.reason else ""
        print(f"  {o.status:8s} {o.chapter.name}{extra}", file=sys.stderr)
    for fmt, err in result.render_errors.items():
        print(f"embeval-report: warning: {fmt} rendering failed: {err}", file=sys.stderr)
    for f in result.files.values():
        print(f)
    print(result.out / "metrics.json")
    worst = result.worst_verdict()
    if args.fail_on and SEVERITY[worst] >= SEVERITY[args.fail_on]:
        print(f"embeval-report: a verdict reached '{worst}' (--fail-on {args.fail_on})", file=sys.stderr)
        return EXIT_GATE
    return 1 if result.render_errors and not result.files else 0


def _chapters(args) -> int:
    from .chapters import describe_input, discover
    from .io import load_source

    es = load_source(args.source) if args.source else None
    for ch in discover():
        needs = ", ".join(describe_input(r) for r in ch.requires) or "nothing"
        line = f"{ch.order:02d} {ch.name:14s} {ch.title}\n     needs: {needs}"
        if es is not None:
            missing = ch.missing(es)
            line += "\n     " + ("ready" if not missing else "missing: " + ", ".join(map(describe_input, missing)))
        print(line + (f"\n     {ch.description}" if ch.description else ""))
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import write_demo
            return _run(args, None, prepare=lambda staging: write_demo(staging / "demo-data", seed=args.seed))
        if args.command == "run":
            return _run(args, args.source)
        if args.command == "chapters":
            return _chapters(args)
        if args.command == "render":
            from .render import render_report
            _check_formats(args.formats)
            if not (args.dir / "chapters").is_dir():
                raise InputError(f"{args.dir}: not an executed report folder (no chapters/ inside)")
            for path in render_report(args.dir, title=args.title, formats=args.formats,
                                      renderer=args.renderer).values():
                print(path)
            return 0
    except InputError as exc:
        print(f"embeval-report: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("embeval-report: interrupted; no report was written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
