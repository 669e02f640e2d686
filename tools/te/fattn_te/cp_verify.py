"""fattn-te verify --te A --te B --cp-matrix (docs/te.md, "Context
parallelism"): the CP matrix through both TEs' context-parallel attention,
then

1. TE A vs TE B, every rank, every engine call, bitwise: a difference is
   counted unless DEVIATIONS (verify.py, the one table) documents it -- the
   P2P forward merge 2.20.2 changed (P1);
2. per TE, CP against the same case without CP (the case's own states in
   the same file, one process): every rank's out, max_logit and gradients
   within the tolerance TE's own test_attention_with_cp holds them to, a
   tolerance check, not a bitwise one -- both releases share fattn's engine
   model, so this is what catches a wrong one;
3. fattn's front end of each TE's shape against that TE on the cases
   without CP (fattn run --cp-reference), bitwise.

Exit 0 when all three hold and nothing errored, 1 otherwise, 2 on bad
input."""
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np

from . import cp, cp_findings, guard, signatures, verify, where

# TE's test_attention_with_cp tolerances: run_attention_with_cp.py get_tols
# (release_v2.19 :172-192): bf16 2.5e-2, 3.5e-2 with GQA (h != hg); fp16
# 5e-3; atol = rtol, as torch.testing.assert_close applies them
# (|cp - no_cp| <= atol + rtol * |no_cp|; tests/pytorch/utils.py:239-245).
TE_TOLS = "run_attention_with_cp.py get_tols (TE release_v2.19 :172-192)"


def te_tolerance(spec):
    if spec["dtype"] == "float16":
        return 5e-3
    return 2.5e-2 if spec["h"] == spec["hg"] else 3.5e-2


# FP8 (get_tols, the same lines: atol = rtol = 0.5, rmse_tol 0.15): TE's
# compare_and_assert (tests/pytorch/utils.py release_v2.19 :239-265) only
# logs assert_close's verdict for FP8 and asserts
# RMSE(cp, no_cp) < rmse_tol * (max(max cp, max no_cp) - min(min cp, min no_cp)),
# on each of a bshd/sbhd rank's two sequence chunks separately (run_attention_with_cp.py
# :695-800); max_logit and d_softmax_offset whole.
FP8_RMSE_TOL = 0.15
TE_FP8_TOLS = "FP8: RMSE < 0.15 of the range, tests/pytorch/utils.py compare_and_assert :239-265"


def _fp8_ratio(a, ref, sd, chunks):
    """The largest RMSE / (rmse_tol * range) over the compared chunks
    (TE passes when it is below 1)."""
    parts = ([(x, y) for x, y in zip(np.array_split(a, 2, axis=sd), np.array_split(ref, 2, axis=sd))]
             if chunks else [(a, ref)])
    worst = 0.0
    for x, y in parts:
        if x.size == 0:
            continue
        rmse = float(np.sqrt(np.mean(np.square(x - y))))
        rng = max(float(x.max()), float(y.max())) - min(float(x.min()), float(y.min()))
        bound = FP8_RMSE_TOL * rng
        worst = max(worst, rmse / bound if bound > 0 else (0.0 if rmse == 0 else float("inf")))
    return worst


_RUN_LINE = re.compile(r"\(context parallelism: ([^;]*); (\d+) errored\)")


def _te_run(root, args, out):
    argv = [os.path.join(os.path.dirname(where.HERE), "fattn-te"), "run", "--cp-matrix",
            "--te", root, "--backend", args.backend, "-o", out] + where.fattn_args(args)
    p = guard.run(argv)  # stopped with fattn-te
    m = _RUN_LINE.search(p.stdout)
    if p.returncode not in (0, 1) or not m:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"fattn-te run --cp-matrix --te {root}: exit {p.returncode}")
    return m.group(1)


# (group, name, which token index, the dimension it indexes: "seq" = the
# format's sequence dimension, 2 = a bias's query dimension, None = whole)
_COMPARED = [("forward", "out", "q", "seq"), ("forward", "max_logit", None, None),
             ("backward", "dq", "q", "seq"), ("backward", "dk", "kv", "seq"),
             ("backward", "dv", "kv", "seq"), ("backward", "d_bias", "q", 2),
             ("backward", "d_softmax_offset", None, None)]


def _rank_checks(cid, case, spec, tol):
    """(path, ratio, bitwise, line or None) for every compared tensor of
    every rank: ratio = max |cp - ref| / (tol + tol |ref|)."""
    fmt = spec["layout"].split("_")[0]
    sd = {"bshd": 1, "sbhd": 0, "thd": 0}[fmt]
    valid = signatures.valid_tokens(case) if fmt == "thd" else None
    out = []
    for r in sorted(case["ranks"], key=int):
        g = case["ranks"][r]
        idx = {"q": g["inputs/token_index_q"][()], "kv": g["inputs/token_index_kv"][()]}
        for grp, name, which, dim in _COMPARED:
            if grp not in g or name not in g[grp]:
                continue
            a = signatures.load(g[grp][name])
            ref = signatures.load(case[grp][name])
            if which is not None and not (dim == 2 and ref.shape[2] == 1):
                ref = np.take(ref, idx[which], axis=sd if dim == "seq" else dim)
                if valid is not None and dim == "seq":
                    keep = valid[idx[which]]
                    a, ref = a[keep], ref[keep]
            path = f"/cases/{cid}/ranks/{r}/{grp}/{name}"
            if a.shape != ref.shape:
                out.append((path, float("inf"), False,
                            f"  {path}  shape {list(a.shape)}, without CP {list(ref.shape)}"))
                continue
            if spec.get("fp8"):
                chunks = fmt != "thd" and dim == "seq"
                ratio = _fp8_ratio(a, ref, sd, chunks)
                line = None
                if name in cp_findings.GRADS and cp_findings.applies(spec):
                    why = cp_findings.check(case, spec, r, name,
                                            lambda x, y: _fp8_ratio(x, y, sd, chunks))
                    if why is None:  # TE's finding T1: documented, not counted
                        out.append((path, ratio, False, None, "T1"))
                        continue
                    out.append((path, ratio, False,
                                f"  {path}  not T1's signature: {why} (case {cid}, rank {r})"))
                    continue
                if not ratio < 1.0:
                    line = (f"  {path}  exceeds TE's FP8 tolerance (RMSE < {FP8_RMSE_TOL} of the "
                            f"range): {ratio:.3g} of it (case {cid}, rank {r})")
                out.append((path, ratio, bool(np.array_equal(a, ref)), line))
                continue
            diff = np.abs(a - ref)
            bound = tol + tol * np.abs(ref)
            bad = ~(diff <= bound)  # NaN counts
            ratio = float(np.max(np.where(np.isfinite(diff), diff / bound, np.inf))) \
                if diff.size else 0.0
            line = None
            if bad.any():
                line = (f"  {path}  exceeds TE's tolerance (atol = rtol = {tol}): "
                        f"{int(bad.sum())} of {bad.size} elements, max abs "
                        f"{float(np.nanmax(diff)):.3g} (case {cid}, rank {r})")
            out.append((path, ratio, bool(np.array_equal(a, ref)), line))
    return out


def tolerance_check(name, path):
    """One line for TE `name`'s file: every rank against its case without
    CP, within TE's tolerance; then each tensor beyond it. Returns 0 or 1."""
    import h5py
    rows, ncases, nranks = [], 0, 0
    with h5py.File(path, "r") as f:
        for cid, case in f["cases"].items():
            if "ranks" not in case:
                continue
            spec = json.loads(case.attrs["spec"])
            ncases += 1
            nranks += len(case["ranks"])
            rows += _rank_checks(cid, case, spec, te_tolerance(spec))
    t1 = [r for r in rows if len(r) > 4]
    rows = [r for r in rows if len(r) == 4]
    bad = [r for r in rows if r[3]]
    bitwise = sum(1 for r in rows if r[2])
    worst = max(rows, key=lambda r: r[1]) if rows else None
    what = (f"{verify._n(ncases, 'case')}, {verify._n(nranks, 'rank')}, "
            f"{verify._n(len(rows), 'tensor')}: {bitwise} bitwise")
    if t1:
        what = f"T1 in {verify._n(len(t1), 'tensor')} not counted; " + what
    if worst and not bad:
        what += f"; largest {worst[1]:.3g} of the tolerance, {worst[0]}"
    word = "within tolerance" if not bad else f"no ({len(bad)} of {len(rows)} beyond it)"
    print(f"{name}: context parallelism against the same case without CP: {word} ({what}; "
          f"TE's test_attention_with_cp tolerance, {TE_TOLS}: bf16 2.5e-2, GQA 3.5e-2, "
          f"fp16 5e-3; {TE_FP8_TOLS})")
    by_case = {}
    for r in t1:
        cid, rank = re.match(r"^/cases/([^/]+)/ranks/(\d+)/", r[0]).groups()
        by_case.setdefault(cid, []).append((int(rank), r[0].rsplit("/", 1)[1], r[1]))
    for cid, items in sorted(by_case.items()):
        worst_t1 = max(x[2] for x in items)
        print(f"  documented finding: /cases/{cid}  ranks "
              f"{', '.join(map(str, sorted({x[0] for x in items})))} "
              f"(dk, dv; {worst_t1:.3g} of TE's FP8 tolerance from the case without CP): "
              f"{cp_findings.NAME} "
              f"(TE {cp_findings.TE_LINES}; docs/te.md, Context parallelism)")
    for r in bad[:verify._SHOWN]:
        print(r[3])
    if len(bad) > verify._SHOWN:
        print(f"  ... and {len(bad) - verify._SHOWN} more")
    return 1 if bad else 0


def refusals(path, root, resolved):
    """The file's errored cases split: ({case: R1} TE's refusals with their
    exact signature, {case: reason} the rest, a reason saying why R1's
    case is not R1 where it is one)."""
    refused, errored = {}, {}
    for cid, reason in verify._errored(path).items():
        spec = resolved[cid]["spec"] if cid in resolved else {}
        entry, why = cp_findings.refusal(spec, reason, root)
        if entry is not None:
            refused[cid] = entry
        else:
            errored[cid] = reason if why is None else f"{reason} (not R1's signature: {why})"
    return refused, errored


def te_pair(fattn, a_name, a, b_name, b, resolved, kept, refused_both=()):
    """TE A vs TE B, bitwise but for DEVIATIONS; one line per documented
    case (and per case both refused as TE's documented refusal, whose
    recorded reasons name each release's line). Returns 0 or 1."""
    r = verify._diff_json(fattn, a, b)
    n = sum(1 for e in r["paths"].values() if e["kind"] in ("dataset", "digest"))
    counted, changes, misses = [], {}, {}
    pair = verify.signatures.Pair([a_name, b_name], [a, b], [None, None])
    for path, e in sorted(r["paths"].items()):
        if e["status"] in ("equal", "private"):
            continue
        m = re.match(r"^/cases/([^/@]+)", path)
        if m and m.group(1) in refused_both:
            continue
        d = verify._documented(path, e, resolved, False, {}, pair, misses)
        if d:
            m = d["path"].match(path)
            changes.setdefault((d["name"].split(":")[0], m.group(1)), []).append((path, d))
            continue
        counted.append((path, e))
    pair.close()
    ncases = verify._cases(a)
    if counted:
        word = f"no ({len(counted)} of {verify._n(n, 'tensor')} differ)"
    elif changes:
        names = sorted({k[0] for k in changes})
        word = "no, documented changes only (" + ", ".join(
            f"{x} in {verify._n(sum(1 for k in changes if k[0] == x), 'case')}"
            for x in names) + ")"
    else:
        word = "yes"
    print(f"{a_name} -> {b_name}: context parallelism: behavior-neutral: {word} "
          f"({verify._n(ncases, 'case')}, {verify._n(n, 'tensor')})")
    for cid, (d, why) in sorted(misses.items()):
        print(f"  /cases/{cid}  not {d['name'].split(':')[0]}'s signature: {why}")
    for cid in sorted(refused_both):
        print(f"  refused by both: /cases/{cid}: {cp_findings.R1['name']} (TE "
              f"{cp_findings.R1['te_lines']}; docs/te.md, Context parallelism)")
    for (_, cid), items in sorted(changes.items()):
        d = items[0][1]
        ranks = sorted({int(m.group(1)) for p, _ in items
                        for m in [re.search(r"/ranks/(\d+)/", p)] if m})
        print(f"  documented change: /cases/{cid}  ranks {', '.join(map(str, ranks))} "
              f"({verify._n(len(items), 'path')}): {d['name']} (TE {d['te_lines']}; docs/te.md, "
              f"Context parallelism)")
    errs = {"A": verify._errored(a), "B": verify._errored(b)}
    # one line per case and rank (or the case without CP): its states'
    # tensors first, then how many engine-call paths differ
    groups, order = {}, []
    for path, e in counted:
        m = re.match(r"^/cases/([^/@]+)(?:/ranks/(\d+))?(?:/(.*))?", path)
        cid, rank, rest = (m.group(1), m.group(2), m.group(3) or "") if m else (path, None, "")
        key = (cid, rank)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((rest, e))
    shown, seen = [], set()
    for cid, rank in order:
        where = [k for k in ("A", "B") if cid in errs[k]]
        if where:
            if cid not in seen:
                seen.add(cid)
                shown.append(f"  /cases/{cid}  errored in "
                             f"{' and '.join({'A': a_name, 'B': b_name}[k] for k in where)}: "
                             f"{errs[where[-1]][cid]}")
            continue
        items = groups[(cid, rank)]
        states = [(r_, e) for r_, e in items if not r_.startswith("engine_call")]
        calls = len(items) - len(states)
        head = f"/cases/{cid}/ranks/{rank}" if rank is not None else f"/cases/{cid}"
        for r_, e in states:
            shown.append(f"  {head}/{r_}  {verify._what(e)} (case {cid}, "
                         f"{'rank ' + rank if rank is not None else 'without CP'})")
        if calls:
            shown.append(f"  {head}/engine_call  {verify._n(calls, 'path')} differ (case {cid}, "
                         f"{'rank ' + rank if rank is not None else 'without CP'})")
    for line in shown[:verify._SHOWN]:
        print(line)
    if len(shown) > verify._SHOWN:
        more = f"fattn diff {a} {b}" if kept else "run again with --keep DIR"
        print(f"  ... and {len(shown) - verify._SHOWN} more ({more})")
    return 1 if counted else 0


def fattn_pair(fattn, fe_name, fe_file, te_name, te_file, resolved):
    """fattn's front end against TE on the cases without CP: the TE file's
    own states (its ranks aside) bitwise. Returns 0 or 1."""
    r = verify._diff_json(fattn, fe_file, te_file)
    errored = verify._errored(te_file)  # listed with the TE's errored cases
    rows = {}
    for p, e in r["paths"].items():
        m = re.match(r"^/cases/([^/@]+)(/ranks(?:/|$))?", p)
        if not (m and (m.group(2) or m.group(1) in errored)):
            rows[p] = e
    n = sum(1 for e in rows.values() if e["kind"] in ("dataset", "digest"))
    counted = []
    pair = verify.signatures.Pair([fe_name, te_name], [fe_file, te_file], [None, None])
    for path, e in sorted(rows.items()):
        if e["status"] in ("equal", "private"):
            continue
        if verify._documented(path, e, resolved, True, {}, pair):
            continue
        counted.append((path, e))
    pair.close()
    word = "yes" if not counted else f"no ({len(counted)} of {verify._n(n, 'tensor')} differ)"
    print(f"{fe_name} -> {te_name}: the cases without CP: behavior-neutral: {word} "
          f"({verify._n(verify._cases(te_file), 'case')}, {verify._n(n, 'tensor')})")
    for path, e in counted[:verify._SHOWN]:
        print(f"  {path}  {verify._what(e)}")
    return 1 if counted else 0


def _sizes(resolved):
    """'2 ranks: 11, 4 ranks: 6': the cases by size."""
    by = {}
    for c in resolved.values():
        cpk = c["spec"].get("cp")
        if cpk:
            by[cpk["size"]] = by.get(cpk["size"], 0) + 1
    return ", ".join(f"{k} ranks: {v}" for k, v in sorted(by.items()))


def main(args):
    if len(args.te) != 2:
        raise where.rf.InputError("verify takes --te twice (A and B)")
    fattn = where.rf.find_fattn()
    where.use_library_of(fattn)
    if not args.cases:
        args.cases = cp.DEFAULT_MATRIX
    tmp = tempfile.mkdtemp(prefix="fattn-te-verify-")
    work = args.keep or tmp
    try:
        os.makedirs(work, exist_ok=True)
        roots, names = where.te_roots(args.te, tmp)
        files, counts = [], []
        for i, root in enumerate(roots):
            out = os.path.join(work, f"te{i + 1}-cp.h5")
            counts.append(_te_run(root, args, out))
            files.append(out)
        resolved = {c["id"]: c for c in where.rf.resolved_cases(args.cases, fattn=fattn)
                    if "spec" in c and c["spec"].get("cp")}
        if args.filter:
            import fnmatch
            resolved = {k: v for k, v in resolved.items() if fnmatch.fnmatchcase(k, args.filter)}
        kept = bool(args.keep)
        split = [refusals(f, root, resolved) for f, root in zip(files, roots)]
        both = set(split[0][0]) & set(split[1][0])
        rc = te_pair(fattn, names[0], files[0], names[1], files[1], resolved, kept, both)
        for name, f in zip(names, files):
            rc = max(rc, tolerance_check(name, f))
        fe_files = {}
        for name, f, root in zip(names, files, roots):
            impl = "split" if where.is_refactored(root) else "legacy"
            if impl not in fe_files:
                out = os.path.join(work, f"fattn-{impl}-cp.h5")
                argv = [fattn, "run", "--cp-reference", "--impl", impl, "--backend",
                        args.backend, "-o", out] + where.fattn_args(args)
                p = guard.run(argv)  # stopped with fattn-te
                if p.returncode != 0:
                    sys.stderr.write(p.stderr)
                    raise RuntimeError(f"fattn run --cp-reference --impl {impl}: exit "
                                       f"{p.returncode}")
                fe_files[impl] = out
            rc = max(rc, fattn_pair(fattn, f"fattn-{impl}", fe_files[impl], name, f, resolved))
        errs = [e for _, e in split]
        for name, c, (ref, err) in zip(names, counts, split):
            more = f"; {len(ref)} refused by TE as documented" if ref else ""
            print(f"{name}: context parallelism: {c} ({_sizes(resolved)}); "
                  f"{len(err)} errored{more}")
            for cid, entry in sorted(ref.items()):
                print(f"  refused by TE: {cid}: {verify._errored(files[names.index(name)])[cid]}: "
                      f"{entry['name'].split(':')[0]}")
            for cid, reason in sorted(err.items()):
                print(f"  errored: {cid}: {reason}")
        if any(errs):
            rc = max(rc, 1)
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
