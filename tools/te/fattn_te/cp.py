"""fattn-te's context-parallel runs (docs/te.md, "Context parallelism"):
the CP matrix (golden/cp_cases.json, or --cases) through TE's own
context-parallel attention in N local processes (fattn_te/cp_worker.py),
one run file per TE: /cases/<id> holds the same case without CP (one
process, TE's FusedAttention: the reference) and /cases/<id>/ranks/<r>/ each
rank's inputs, outputs, gradients and engine calls."""
import json
import os
import subprocess
import sys
import time

import numpy as np

from . import where

DEFAULT_MATRIX = os.path.join(where.SRC, "golden", "cp_cases.json")
# Seconds a TE run's ranks may take: importing TE in every rank, then the
# cases; a rank stuck in a collective gives up after the process group's
# timeout (below) and the run goes on with the next case.
RUN_TIMEOUT_S = float(os.environ.get("FATTN_TE_CP_TIMEOUT", "900"))
COLLECTIVE_TIMEOUT_S = 300.0


def cp_specs(resolved):
    """The cases that have the cp key, by id."""
    return {c["id"]: c for c in resolved if "spec" in c and c["spec"].get("cp")}


def _spawn(root, backend, world, work, ref, resolved_path, outdir, launch):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=here + (os.pathsep + os.environ["PYTHONPATH"]
                                              if os.environ.get("PYTHONPATH") else ""))
    store = os.path.join(work, f"store-{launch}")
    procs = []
    # On the host one process imports TE and forks the other ranks; CUDA
    # does not survive a fork, so on a GPU each rank is a process of its own.
    fork = backend == "cpu"
    for r in range(1 if fork else world):
        log = open(os.path.join(work, f"rank{r}-{launch}.log"), "w")
        argv = [sys.executable, "-W", "ignore", "-m", "fattn_te.cp_worker", "--root", root,
                "--rank", str(r), "--world", str(world), "--init", "file://" + store,
                "--ref", ref, "--resolved", resolved_path, "--out", outdir, "--backend",
                backend, "--timeout", str(COLLECTIVE_TIMEOUT_S)] + (["--fork"] if fork else [])
        procs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env),
                      log))
    return procs


def _wait(procs, deadline):
    """Exit codes of the ranks (None: killed at the deadline). A stop signal
    (guard.Stopped) kills the ranks before it goes on: none outlives
    fattn-te."""
    codes = []
    try:
        for p, log in procs:
            left = max(1.0, deadline - time.monotonic())
            try:
                codes.append(p.wait(timeout=left))
            except subprocess.TimeoutExpired:
                for q, _ in procs:
                    if q.poll() is None:
                        q.kill()
                p.wait()
                codes.append(None)
            log.close()
    except BaseException:
        for q, log in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
            log.close()
        raise
    return codes


def _log_tail(work, rank, launch, n=15):
    path = os.path.join(work, f"rank{rank}-{launch}.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def run_ranks(root, backend, cps, work, ref):
    """Every CP case's ranks: {case id: [payload of rank 0, 1, ...]} or
    {case id: error string}. The ranks are started once for the whole
    matrix (world = the largest size) and again, from the first case
    without results, if they died."""
    import pickle
    outdir = os.path.join(work, "ranks")
    os.makedirs(outdir, exist_ok=True)
    results, todo, launch = {}, sorted(cps), 0
    while todo:
        world = max(cps[c]["spec"]["cp"]["size"] for c in todo)
        resolved_path = os.path.join(work, f"resolved-{launch}.json")
        with open(resolved_path, "w", encoding="utf-8") as f:
            json.dump({c: cps[c] for c in todo}, f)
        procs = _spawn(root, backend, world, work, ref, resolved_path, outdir, launch)
        codes = _wait(procs, time.monotonic() + RUN_TIMEOUT_S)
        missing = []
        for cid in todo:
            paths = [os.path.join(outdir, f"{cid}.{r}.pkl")
                     for r in range(cps[cid]["spec"]["cp"]["size"])]
            if not all(os.path.exists(p) for p in paths):
                missing.append(cid)
                continue
            results[cid] = []
            for p in paths:
                with open(p, "rb") as f:
                    results[cid].append(pickle.load(f))
        if missing:
            # the ranks run the cases in order: they died or hung in the first
            # one without results; the ones after it run again
            bad = [r for r, c in enumerate(codes) if c != 0] or list(range(len(codes)))
            results[missing[0]] = "cp: " + "; ".join(
                f"{'ranks' if len(codes) == 1 else f'rank {r}'} "
                f"{'timed out' if codes[r] is None else f'exit {codes[r]}'}: "
                f"{_log_tail(work, r, launch)}" for r in bad)
        todo, launch = missing[1:], launch + 1
    return results


def rank_errors(errs):
    """The errors of the ranks that raised, [(rank, error)], as one reason:
    "rank 1: e" for one rank, "ranks 0, 1: e" for ranks that raised the same
    error, and each group's when they differ ("rank 0: e; rank 1: f")."""
    prefix = where.ERROR_PREFIX
    by = {}
    for r, e in errs:
        by.setdefault(e[len(prefix):] if e.startswith(prefix) else e, []).append(r)
    return prefix + "; ".join(
        f"rank {rs[0]}: {e}" if len(rs) == 1 else f"ranks {', '.join(map(str, rs))}: {e}"
        for e, rs in by.items())


def _case_tree(attrs, payloads):
    """A CP case's group: the reference's states and ranks/<r>/, or
    (attrs + skipped) when a rank raised: every rank's error, not the first."""
    errs = [(p["rank"], p["error"]) for p in payloads if "error" in p]
    if errs:
        reason = rank_errors(errs)
        return {"attrs": attrs + [("skipped", reason, None)], "children": {}}, reason
    ref = payloads[0]["reference"]
    children = dict(ref)
    children["ranks"] = {"attrs": [], "children": {str(p["rank"]): p["node"]
                                                   for p in payloads}}
    return {"attrs": attrs, "children": children}, None


def run(root, backend, cases, filt, out, fattn, work, impl_name):
    """fattn-te run --cp-matrix on one TE; returns (cases, tensors, errored,
    counts by comm type)."""
    from fattn_runfile import load_tree, resolved_cases, write_tree  # noqa: E402
    cases = cases or DEFAULT_MATRIX
    resolved = resolved_cases(cases, fattn=fattn)
    cps = cp_specs(resolved)
    if filt:
        import fnmatch
        cps = {k: v for k, v in cps.items() if fnmatch.fnmatchcase(k, filt)}
    if not cps:
        raise where.rf.InputError(f"{cases}: no case with the cp key"
                                f"{' matches ' + filt if filt else ''}")
    ref = os.path.join(work, "cp-ref.h5")
    refactored = where.is_refactored(root)
    argv = ["run", "--cp-reference", "--impl", "split" if refactored else "legacy",
            "--backend", backend, "--cases", cases, "-o", ref]
    if filt:
        argv += ["--filter", filt]
    rc, _so, se = where.run_fattn(fattn, argv)
    if rc != 0:
        sys.stderr.write(se)
        raise where.rf.InputError(f"fattn {' '.join(argv)}: exit {rc}")
    tree = load_tree(ref)
    ran = {c: r for c, r in tree["children"]["cases"]["children"].items()
           if not any(a[0] in ("skipped", "refused_rule") for a in r["attrs"])}
    results = run_ranks(root, backend, {c: cps[c] for c in sorted(ran) if c in cps}, work, ref)
    out_cases, errored, counts, ntensors = {}, [], {}, 0
    for cid, case in tree["children"]["cases"]["children"].items():
        attrs = [a for a in case["attrs"] if a[0] != "attrs_digest"]
        if cid not in results:  # skipped or refused by fattn's own run: as recorded
            out_cases[cid] = {"attrs": attrs, "children": {}}
            continue
        res = results[cid]
        if isinstance(res, str):
            node, reason = {"attrs": attrs + [("skipped", where.ERROR_PREFIX + res, None)],
                            "children": {}}, where.ERROR_PREFIX + res
        else:
            node, reason = _case_tree(attrs, res)
        if reason:
            errored.append((cid, reason))
        else:
            comm = cps[cid]["spec"]["cp"]["comm"]
            counts[comm] = counts.get(comm, 0) + 1
            ntensors += where._count_datasets(node)
        out_cases[cid] = node
    root_attrs = [a for a in tree["attrs"]
                  if a[0] not in ("impl", "git_rev", "forced_deterministic_bwd")]
    root_attrs.append(("forced_deterministic_bwd", np.uint8(backend == "cudnn"),
                       np.dtype("uint8")))
    root_attrs.append(("impl", impl_name, None))
    root_attrs.append(("git_rev", where.rf.attr_value(tree, "git_rev"), None))
    new = {"attrs": sorted(root_attrs, key=lambda a: a[0]),
           "children": {"cases": {"attrs": [], "children": out_cases}}}
    write_tree(out, new, fattn=fattn)
    return len(out_cases), ntensors, errored, counts


def counts_line(counts):
    """'p2p 3, all_gather 2, ...' in TE's order of the comm types."""
    order = ["p2p", "all_gather", "a2a", "a2a+p2p"]
    return ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))
