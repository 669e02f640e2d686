#!/usr/bin/env python3
"""Render the fattn-vs-PyTorch comparison as a markdown table (docs/torch.md).

usage: torch_table.py DIFF.json [DIFF.json ...] [--report R.json] [--cases SPEC.json]
                      [-o OUT.md]

DIFF.json: `fattn diff RUN.h5 TORCH.h5 --json DIFF.json` (any mode; several
files are merged, the first one naming a path wins). R.json: the report of
`torch_reference.py RUN.h5 -o TORCH.h5 --report R.json` (PyTorch errors and
the public-SDPA check). SPEC.json: the matrix whose every case gets a row
(default golden/default_cases.json), classified as --make-cases does.

Each expressible case gets, for O, Stats, dQ, dK and dV, "bitwise" or the
number of elements whose bits differ with the largest ULP distance; each
other case the reason PyTorch cannot express it. Needs no torch.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # leave no __pycache__ beside the tools
import torch_reference as tr  # noqa: E402  (same directory)

TENSORS = (("O", "forward/out"), ("Stats", "forward/aux/softmax_stats"),
           ("dQ", "backward/dq"), ("dK", "backward/dk"), ("dV", "backward/dv"))


def load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise tr.InputError("%s: cannot read: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise tr.InputError("%s: not JSON (%s expected): %s" % (path, what, e))


def cell(entry, mode):
    """One tensor's comparison in a few words."""
    st = entry.get("status")
    if st in ("missing_in_a", "missing_in_b"):
        return "missing in %s" % ("fattn's file" if st == "missing_in_a" else "PyTorch's file")
    if st == "corrupt":
        return "corrupt"
    if st == "structure":
        return "structure: %s" % entry.get("detail", "")
    bits = entry.get("bit_count")
    if bits == 0:
        return "bitwise"
    if bits is None:  # digest-only: elements not countable
        return "differs"
    text = "%d/%d differ, max %s ulp" % (bits, entry.get("numel", 0), entry.get("max_ulp"))
    if mode == "tol":
        text += ", within tol" if st == "equal" else ", %d beyond tol" % entry.get("count", 0)
    return text


def shown(value):
    return "(absent)" if value is None else str(value)


def render(matrix, diffs, report):
    paths, modes = {}, []
    for d in diffs:
        modes.append(d.get("mode", "bitwise"))
        for p, e in d.get("paths", {}).items():
            paths.setdefault(p, (e, d.get("mode", "bitwise")))
    run = {e["id"]: e for e in (report or {}).get("cases", [])}
    lines = ["| case | O | Stats | dQ | dK | dV | note |", "|---|---|---|---|---|---|---|"]
    n_expr = n_bitwise_cases = n_compared = 0
    for c, resolved in matrix:
        entry, made = tr.make_case(c, resolved)
        cid = c["id"]
        if made is None:
            lines.append("| `%s` | — | — | — | — | — | not expressible: %s |"
                         % (cid, entry["reason"]))
            continue
        n_expr += 1
        notes = []
        if entry["changed"].get("is_training") is False and c.get("is_training", True):
            notes.append("run as inference: %s" % entry["reason"])
        r = run.get(cid, {})
        if r.get("error"):
            notes.append("PyTorch failed: %s" % r["error"])
        if r.get("public_sdpa") and r["public_sdpa"] != "same bits":
            notes.append("public SDPA: %s" % r["public_sdpa"])
        cells, all_bitwise, any_seen = [], True, False
        for _, rel in TENSORS:
            p = "/cases/%s/%s" % (cid, rel)
            if p in paths:
                e, mode = paths[p]
                cells.append(cell(e, mode))
                any_seen = True
                all_bitwise = all_bitwise and cells[-1] == "bitwise"
            elif rel.startswith("backward/") and made.get("is_training") is False:
                cells.append("— (inference)")
            else:
                cells.append("not compared")
                all_bitwise = False
        if any_seen:
            n_compared += 1
            n_bitwise_cases += all_bitwise
        lines.append("| `%s` | %s | %s |" % (cid, " | ".join(cells), "; ".join(notes)))
    head = ("%d cases; %d expressible, %d of them compared, %d bitwise in every tensor "
            "compared (%s)." % (len(matrix), n_expr, n_compared, n_bitwise_cases,
                                ", ".join("diff --mode %s" % m for m in modes) or "no diff"))
    prov = []
    for d in diffs[:1]:
        for item in d.get("provenance_delta", []):
            if item.get("path") in ("/@device", "/@cudnn_version", "/@backend",
                                    "/@prov_torch_version"):
                prov.append("%s: fattn %s, PyTorch %s" % (item["path"][2:], shown(item.get("a")),
                                                          shown(item.get("b"))))
    out = [head]
    if prov:
        out.append("Provenance: " + "; ".join(prov) + ".")
    return "\n\n".join(out) + "\n\n" + "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="torch_table.py", description=__doc__.split("\n")[0])
    p.add_argument("diff", nargs="+", metavar="DIFF.json", help="fattn diff --json output")
    p.add_argument("--report", metavar="R.json", help="torch_reference.py --report output")
    p.add_argument("--cases", default=tr.DEFAULT_SPEC, metavar="SPEC.json",
                   help="the case matrix (default golden/default_cases.json)")
    p.add_argument("-o", "--output", metavar="OUT.md", help="write here instead of stdout")
    p.add_argument("--fattn", metavar="PATH",
                   help="the fattn executable that resolves the matrix (default: $FATTN, else "
                        "build*/harness/fattn of this source tree, else fattn on PATH)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        matrix = tr.read_cases(args.cases, args.fattn)
        diffs = [load_json(d, "fattn diff --json") for d in args.diff]
        for path, d in zip(args.diff, diffs):
            if not isinstance(d, dict) or d.get("schema") != "fattn-diff/1":
                raise tr.InputError("%s: not a fattn-diff/1 report" % path)
        report = load_json(args.report, "torch_reference report") if args.report else None
        if report is not None and (not isinstance(report, dict) or
                                   report.get("schema") != "fattn-torch-report/1"):
            raise tr.InputError("%s: not a fattn-torch-report/1 report" % args.report)
        text = render(matrix, diffs, report)
        if args.output:
            tr.atomic_write_text(args.output, text)
        else:
            sys.stdout.write(text)
    except tr.InputError as e:
        print("torch_table: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("torch_table: %s: %s" % (e.filename, e.strerror or e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
