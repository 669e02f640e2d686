#!/usr/bin/env python3
"""Join bench_cudnn, torch_sdpa_bench and bench_verify output into one report.

    bench_report.py --fattn F.jsonl [F2.jsonl ...] --torch T.jsonl [T2.jsonl ...]
                    [--verify V.json] [--git-rev REV] [--date YYYY-MM-DD]
                    --json OUT.json --md OUT.md

Each --fattn / --torch file is one pass of that benchmark (JSON lines);
several passes of a side are pooled. Per shape and mask, for each side and
kind (forward, backward): the time is the median of every round's median
over all passes, and the noise band is the smallest and largest round
median. The ratio fattn/PyTorch is of throughput (PyTorch's time over
fattn's); its band pairs the bands' ends (worst: PyTorch's fastest round
over fattn's slowest; best: the other way round). "ratio >= 1 within
noise" holds when the band's upper end reaches 1.

Only standard-library Python: it runs wherever the benchmarks ran.
"""

import argparse
import json
import statistics
import sys


def read_jsonl(paths):
    rows = []
    for p in paths or []:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a benchmark cut off mid-line by its timeout
                    print(f"bench_report: {p}: skipping a line that is not JSON: {line[:80]}",
                          file=sys.stderr)
    return rows


STEPS = []  # bench_cudnn's instrumented rows, as read


def split(rows):
    """info (first), skipped reasons, measured rows by (shape, causal), errors."""
    info, skipped, errors = None, [], []
    by_case = {}
    steps = STEPS
    for r in rows:
        if "info" in r:
            info = info or r["info"]
        elif "skipped" in r:
            skipped.append(r["skipped"])
        elif "error" in r:
            errors.append(f'{r.get("shape")} causal={r.get("causal")}: {r["error"]}')
        elif r.get("bench") == "cudnn_steps":  # bench_cudnn --steps: kept as measured
            steps.append(r)
        elif "shape" in r:
            by_case.setdefault((r["shape"], bool(r["causal"])), []).append(r)
    return info, skipped, by_case, errors


def pooled(passes, kind):
    """Median of all round medians of `kind` over the passes, and the band."""
    rounds = [x for p in passes for x in p.get(f"{kind}_ms_rounds", [])]
    if not rounds:
        return None
    return {"ms": statistics.median(rounds), "lo": min(rounds), "hi": max(rounds),
            "min_single": min(p[f"{kind}_ms_min"] for p in passes), "rounds": len(rounds)}


def tflops(gflop, ms):
    return gflop / ms if ms else 0.0  # GFLOP / ms = TFLOP/s


def ratio(f, t):
    """Throughput ratio fattn/PyTorch and its band, from pooled times."""
    if not f or not t:
        return None
    return {"ratio": t["ms"] / f["ms"], "lo": t["lo"] / f["hi"], "hi": t["hi"] / f["lo"]}


def verdict(r):
    if not r:
        return "n/a"
    if r["lo"] >= 1.0:
        return ">= 1"
    if r["hi"] >= 1.0:
        return ">= 1 within noise"
    return "< 1"


def build(args):
    f_info, f_skip, f_cases, f_err = split(read_jsonl(args.fattn))
    t_info, t_skip, t_cases, t_err = split(read_jsonl(args.torch))
    verify = None
    if args.verify:
        v = read_jsonl([args.verify])
        verify = v if v else None
    rows = []
    keys = list(f_cases) + [k for k in t_cases if k not in f_cases]  # the benches' order
    for key in keys:
        fp, tp = f_cases.get(key, []), t_cases.get(key, [])
        any_row = (fp or tp)[0]
        gflop = any_row["fwd_gflop"]
        row = {"shape": key[0], "causal": key[1], "fwd_gflop": gflop,
               "bwd_gflop": 2.5 * gflop, "fattn_passes": len(fp), "torch_passes": len(tp)}
        for kind, g in (("fwd", gflop), ("bwd", 2.5 * gflop), ("bwd_det", 2.5 * gflop)):
            f = pooled(fp, kind)
            t = pooled(tp, kind) if kind != "bwd_det" else None
            row[f"fattn_{kind}"] = f and {**f, "tflops": tflops(g, f["ms"])}
            if kind != "bwd_det":
                row[f"torch_{kind}"] = t and {**t, "tflops": tflops(g, t["ms"])}
                row[f"{kind}_ratio"] = ratio(f, t)
                row[f"{kind}_verdict"] = verdict(row[f"{kind}_ratio"])
        if row["fattn_fwd"] and row["fattn_bwd"] and row["fattn_bwd_det"]:
            row["det_cost"] = row["fattn_bwd_det"]["ms"] / row["fattn_bwd"]["ms"]
        if fp:
            row["host_us"] = statistics.median(p["host_us"] for p in fp)
            row["bwd_host_us"] = statistics.median(p["bwd_host_us"] for p in fp)
            for k in ("host_fattn_us", "host_execute_us", "bwd_host_fattn_us",
                      "bwd_host_execute_us"):
                if all(k in p for p in fp):
                    row[k] = statistics.median(p[k] for p in fp)
            # each pass is a fresh process, so each first call is cold: all
            # kept, the table shows the first pass's
            row["plan_build_s"] = [p["plan_build_s"] for p in fp]
            row["bwd_plan_build_s"] = [p["bwd_plan_build_s"] for p in fp]
            row["bwd_det_plan_build_s"] = [p["bwd_det_plan_build_s"] for p in fp]
            row["engine_tags"] = {k: fp[0][k] for k in ("engine_tag", "route", "bwd_engine_tag",
                                                         "bwd_det_engine_tag")}
            for k in ("fwd_tune", "bwd_tune", "bwd_det_tune"):
                if k in fp[0]:
                    row[k] = fp[0][k]
        # the same method on both sides (--public): host cost medians, and
        # CUDA events around each public call queued back to back
        for side, passes, keys in (
                ("fattn", fp, ("fwd_public_ms", "bwd_public_ms", "bwd_det_public_ms",
                               "fwd_public_wall_us", "bwd_public_wall_us") + DEV_KEYS),
                ("torch", tp, ("fwd_host_us", "bwd_host_us", "fwd_h2h_ms", "bwd_h2h_ms"))):
            for k in keys:
                if passes and all(k in p for p in passes):
                    row[f"{side}_{k}"] = statistics.median(p[k] for p in passes)
        if tp:
            row["torch_first_fwd_s"] = [p["first_fwd_s"] for p in tp]
            row["torch_first_bwd_s"] = [p["first_bwd_s"] for p in tp]
        rows.append(row)
    return {
        "schema": "fattn-bench/1", "date": args.date, "git_rev": args.git_rev,
        "fattn_info": f_info, "torch_info": t_info,
        "skipped": {"fattn": f_skip, "torch": t_skip},
        "errors": {"fattn": f_err, "torch": t_err},
        "flops": "forward 4*b*h*sq*skv*d, halved for causal; backward 2.5 x forward",
        "rows": rows, "verify": verify, "steps": STEPS,
    }


# bench_cudnn --public on device tensors: host cost with the queue empty
# (reported and wall) and the public calls timed by CUDA events.
DEV_KEYS = tuple(f"dev_{k}_{m}" for k in ("fwd", "bwd", "bwd_det")
                 for m in ("host_us", "host_wall_us", "public_ms", "public_wall_us"))
GOAL_FWD_HOST_US = 20.0  # the forward host-cost goal of a cache hit


def device_table(rows):
    """Markdown lines: fattn on device tensors beside PyTorch, and the host-cost
    verdicts (fattn's wall time of the call against PyTorch's, both with the
    queue empty before the call)."""
    dev = [r for r in rows if "fattn_dev_fwd_host_wall_us" in r]
    if not dev:
        return []
    out = ["", "Device tensors (`bench_cudnn --public`): fattn's call on device tensors, no "
           "copies. Host µs: the call's wall time with the queue empty before it (its "
           "engine-reported host_us in brackets) against PyTorch's whole call timed the same "
           f"way; forward goal < {GOAL_FWD_HOST_US:.0f} µs and < PyTorch, backward goal < "
           "PyTorch. Public ms: CUDA events around each call, queued back to back, against "
           "PyTorch's call on device tensors.", "",
           "| shape | causal | host µs fwd: fattn [reported] / PyTorch | goal | "
           "host µs bwd: fattn [reported] / PyTorch | goal | host µs det. bwd | "
           "public fwd ms fattn / PyTorch | public bwd ms fattn / PyTorch | "
           "public det. bwd ms |",
           "|---|---|--:|---|--:|---|--:|--:|--:|--:|"]
    for r in dev:
        tf_, tb = r.get("torch_fwd") or {}, r.get("torch_bwd") or {}
        th_f, th_b = r.get("torch_fwd_host_us"), r.get("torch_bwd_host_us")
        fw, bw = r["fattn_dev_fwd_host_wall_us"], r["fattn_dev_bwd_host_wall_us"]
        g_f = ("met" if fw < GOAL_FWD_HOST_US and th_f is not None and fw < th_f
               else "not met" if th_f is not None else "–")
        g_b = ("met" if th_b is not None and bw < th_b else "not met" if th_b is not None
               else "–")
        out.append(
            f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | "
            f"{fw:.1f} [{r['fattn_dev_fwd_host_us']:.1f}] / {fmt(th_f, '.1f')} | {g_f} | "
            f"{bw:.1f} [{r['fattn_dev_bwd_host_us']:.1f}] / {fmt(th_b, '.1f')} | {g_b} | "
            f"{r['fattn_dev_bwd_det_host_wall_us']:.1f} | "
            f"{r['fattn_dev_fwd_public_ms']:.3f} / {fmt(tf_.get('ms'), '.3f')} | "
            f"{r['fattn_dev_bwd_public_ms']:.3f} / {fmt(tb.get('ms'), '.3f')} | "
            f"{r['fattn_dev_bwd_det_public_ms']:.3f} |")
    return out


def fmt(x, spec=".0f"):
    return "–" if x is None else format(x, spec)


def markdown(rep):
    fi, ti = rep["fattn_info"] or {}, rep["torch_info"] or {}
    out = [f"# fattn cuDNN engine vs PyTorch SDPA (cuDNN) — {rep['date']}", ""]
    out.append(f"- device: {fi.get('device') or ti.get('device') or 'n/a'}, "
               f"{fi.get('sm_count') or ti.get('sm_count') or '?'} SMs, "
               f"sm_{(fi.get('cc') or ti.get('cc') or '?').replace('.', '')}")
    out.append(f"- cuDNN: fattn loads {fi.get('cudnn_version', 'n/a')} "
               f"(headers {fi.get('cudnn_header_version', 'n/a')}); PyTorch "
               f"{ti.get('torch_version', 'n/a')} uses {ti.get('cudnn_version', 'n/a')}")
    out.append(f"- git revision: {rep['git_rev']}")
    out.append(f"- FLOPs: {rep['flops']}; TFLOP/s from the median of all round medians; "
               f"bands are the fastest and slowest round")
    out.append(f"- settings: fattn {fi.get('iters', '?')} executions x {fi.get('rounds', '?')} "
               f"rounds, PyTorch {ti.get('iters', '?')} calls x {ti.get('rounds', '?')} rounds "
               f"(+{ti.get('warmup', '?')} warm-up)")
    for side in ("fattn", "torch"):
        for s in rep["skipped"][side]:
            out.append(f"- {side}: skipped: {s}")
        for e in rep["errors"][side]:
            out.append(f"- {side}: ERROR {e}")
    out += ["", "| shape | causal | fwd TFLOP/s fattn | fwd PyTorch | fwd ratio (band) | "
            "bwd TFLOP/s fattn | bwd PyTorch | bwd ratio (band) | det. bwd cost | "
            "host µs fwd / bwd (cache hit) | cold plan build s fwd / bwd / det | "
            "PyTorch first call s fwd / bwd |",
            "|---|---|--:|--:|---|--:|--:|---|--:|--:|---|---|"]

    def tf(row, key):
        v = row.get(key)
        return fmt(v and v["tflops"])

    def rt(row, kind):
        r = row.get(f"{kind}_ratio")
        if not r:
            return "–"
        return f"{r['ratio']:.3f} ({r['lo']:.3f}–{r['hi']:.3f}) {row[f'{kind}_verdict']}"

    for r in rep["rows"]:
        builds = ("–" if "plan_build_s" not in r else
                  f"{r['plan_build_s'][0]:.2f} / {r['bwd_plan_build_s'][0]:.2f} / "
                  f"{r['bwd_det_plan_build_s'][0]:.2f}")
        first = ("–" if "torch_first_fwd_s" not in r else
                 f"{r['torch_first_fwd_s'][0]:.2f} / {r['torch_first_bwd_s'][0]:.2f}")
        host = ("–" if "host_us" not in r else f"{r['host_us']:.1f} / {r['bwd_host_us']:.1f}")
        if "host_fattn_us" in r and "bwd_host_fattn_us" in r:
            host += (f" (fattn {r['host_fattn_us']:.1f} + execute {r['host_execute_us']:.1f} / "
                     f"{r['bwd_host_fattn_us']:.1f} + {r['bwd_host_execute_us']:.1f})")
        out.append(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | {tf(r, 'fattn_fwd')} | "
                   f"{tf(r, 'torch_fwd')} | {rt(r, 'fwd')} | {tf(r, 'fattn_bwd')} | "
                   f"{tf(r, 'torch_bwd')} | {rt(r, 'bwd')} | "
                   f"{fmt(r.get('det_cost'), '.2f')}x | {host} | {builds} | {first} |")
    tuned = [r for r in rep["rows"] if any(k in r for k in ("fwd_tune", "bwd_tune", "bwd_det_tune"))]
    if tuned:
        out += ["", "Autotune (FATTN_CUDNN_AUTOTUNE=1): per kind, candidates timed, heuristics "
                "mode A's first config and the winner, and mode A's first's time over the "
                "winner's (5 executions each, median, on the first call's buffers).", "",
                "| shape | causal | forward | backward | deterministic backward |",
                "|---|---|---|---|---|"]

        def tune(t):
            if not t:
                return "–"
            return (f"{t['candidates']}: {t['mode_a_first']} → {t['winner']} "
                    f"({t['mode_a_first_ms'] / t['winner_ms']:.3f}x)")
        for r in tuned:
            out.append(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | "
                       f"{tune(r.get('fwd_tune'))} | {tune(r.get('bwd_tune'))} | "
                       f"{tune(r.get('bwd_det_tune'))} |")
    same = [r for r in rep["rows"] if "fattn_fwd_public_ms" in r and "torch_fwd_host_us" in r]
    if same:
        out += ["", "Same method on both sides. Host µs: fattn's engine-reported host cost of a "
                "plan-cache hit (copies excluded) and PyTorch's whole call timed by "
                "`time.perf_counter` with the queue empty before it, median of each. Public "
                "call ms: CUDA events around each call, queued back to back; fattn's calls take "
                "host tensors, so they hold their copies in and out: beside them PyTorch's call "
                "on device tensors, and PyTorch's call made on host tensors (the same uploads, "
                "SDPA, the same downloads).", "",
                "| shape | causal | host µs fwd fattn / PyTorch | host µs bwd fattn / PyTorch | "
                "public fwd ms fattn / PyTorch (device) / PyTorch (host tensors) | "
                "public bwd ms fattn / PyTorch (device) / PyTorch (host tensors) |",
                "|---|---|--:|--:|--:|--:|"]
        for r in same:
            tf_, tb = r.get("torch_fwd") or {}, r.get("torch_bwd") or {}
            out.append(
                f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | "
                f"{r['host_us']:.1f} / {r['torch_fwd_host_us']:.1f} | "
                f"{r['bwd_host_us']:.1f} / {r['torch_bwd_host_us']:.1f} | "
                f"{r['fattn_fwd_public_ms']:.3f} / {fmt(tf_.get('ms'), '.3f')} / "
                f"{fmt(r.get('torch_fwd_h2h_ms'), '.3f')} | "
                f"{r['fattn_bwd_public_ms']:.3f} / {fmt(tb.get('ms'), '.3f')} / "
                f"{fmt(r.get('torch_bwd_h2h_ms'), '.3f')} |")
    out += device_table(rep["rows"])
    tags = sorted({(r["engine_tags"]["engine_tag"], r["engine_tags"]["route"],
                    r["engine_tags"]["bwd_engine_tag"], r["engine_tags"]["bwd_det_engine_tag"])
                   for r in rep["rows"] if "engine_tags" in r})
    if tags:
        out += ["", "fattn engine configs (forward [route] / backward / deterministic backward): " +
                "; ".join(f"{a} [{b}] / {c} / {d}" for a, b, c, d in tags)]
    if rep.get("steps"):
        out += ["", "Host steps of a plan-cache hit (`bench_cudnn --steps`, µs, medians): "
                "desc = resolving the parameters, get_plan = the lookup a hit makes now, "
                "exec_call = the engine's variant pack (reused) + execute after a wait, "
                "exec_cold = the same right after the host wrote 256 MiB; graph, dump, key, "
                "vpack, execute = what a hit did before (graph build, text dump, binary key, "
                "a fresh variant pack, the execute call after them).", "",
                "| shape | causal | kind | desc | get_plan | exec_call | exec_cold | "
                "exec_after_h2d | graph | dump | key | vpack | execute | reported host_us | "
                "device-tensor call (wall) | its reported host_us |",
                "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in rep["steps"]:
            cells = " | ".join(fmt(r.get(k), ".1f") for k in (
                "desc_us", "get_plan_us", "exec_call_us", "exec_cold_us", "exec_after_h2d_us",
                "graph_us", "dump_us", "key_us", "vpack_us", "execute_us", "reported_host_us",
                "dev_public_us", "dev_reported_host_us"))
            out.append(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | {r['kind']} | "
                       f"{cells} |")
    for v in rep.get("verify") or []:
        cmd = f"`fattn verify {' '.join(v.get('args', []))}`"
        store = v.get("plan_store")
        where = (f" with a plan store: {v.get('store_built', 0)} plans built, "
                 f"{v.get('store_loaded', 0)} restored, {v.get('store_rejected', 0)} stored "
                 f"files refused, {v.get('store_stored', 0)} written" if store
                 else " without a plan store")
        goal = v.get("goal_warm_s", 60)
        errored = 2 in (v["cold_exit"], v["warm_exit"])
        goal_verdict = "n/a" if errored else "met" if v["warm_s"] < goal else "NOT met"
        out += ["", f"{cmd} in one process{where}: cold (first invocation) {v['cold_s']:.1f} s, "
                f"warm (second, same process) {v['warm_s']:.1f} s — goal warm < {goal} s: "
                f"{goal_verdict}; exit codes "
                f"{v['cold_exit']} / {v['warm_exit']}; cuDNN plans cached after cold / "
                f"warm: {v['plans_after_cold']} / {v['plans_after_warm']}."]
        if errored:
            out.append("A verify run exited 2 (usage error or an errored case): its time is "
                       "not that of a full run (bench-logs/verify.err, verify.log).")
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fattn", nargs="+", required=True, help="bench_cudnn JSON lines, per pass")
    p.add_argument("--torch", nargs="+", required=True, help="torch_sdpa_bench JSON lines, per pass")
    p.add_argument("--verify", help="bench_verify's JSON line")
    p.add_argument("--git-rev", default="unknown")
    p.add_argument("--date", default="unknown")
    p.add_argument("--json", required=True, help="write the joined report here")
    p.add_argument("--md", required=True, help="write the markdown table here")
    args = p.parse_args(argv)
    rep = build(args)
    with open(args.json, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)
        f.write("\n")
    md = markdown(rep)
    with open(args.md, "w") as f:
        f.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
