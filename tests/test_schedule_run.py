#!/usr/bin/python3
"""Schedules end to end (docs/cases.md "Schedules", docs/run-files.md).

usage: test_schedule_run.py FATTN_EXE   (prints TAP)

- the default matrix lists schedules of every kind;
- each cache step of the matrix's cache schedules, read back with h5py and
  recomputed in numpy from its own recorded tensors: every sequence's
  tokens stay where they were from step to step (through a non-paged
  reindex when a sequence finishes, through the page table when pages are
  handed out), one new token per continuing sequence, and out is
  softmax(QK^T scale)V over exactly that sequence's cached tokens, bottom-
  right aligned. Nothing here uses fattn's cache bookkeeping;
- a paged schedule and its contiguous twin give bitwise equal outputs;
- a golden with one bit flipped in step 3 of a decode schedule makes verify
  exit 1 naming steps/3;
- inspect refuses a schedule's run file with a step missing in the middle
  or an unknown object in a step, naming the step.
"""
import json
import os
import subprocess
import sys
import tempfile
sys.dont_write_bytecode = True
import tap  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
try:
    import h5py
    import numpy as np
    import fattn_runfile  # noqa: E402
except ImportError as e:  # pragma: no cover
    if os.environ.get("CI") == "true":
        print("1..1\nnot ok 1 - h5py/numpy missing under CI: %s" % e)
        sys.exit(1)
    print("1..0 # SKIP h5py/numpy not installed: %s" % e)
    sys.exit(0)

FATTN = os.path.abspath(sys.argv[1])
os.environ["FATTN"] = FATTN  # fattn_runfile.write_tree runs this fattn's write-tree
TMP = tempfile.mkdtemp(prefix="fattn-schedule-")
TESTS = tap.Tests()
test = TESTS.case
CACHE_CASES = "sched.decode.*"


def fattn(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([FATTN] + list(args), capture_output=True, text=True, env=e)


def floats(ds):
    """A dataset's values as float64, whatever its storage."""
    a = ds[()]
    if ds.attrs["dtype"] == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def matrix_specs(glob):
    p = fattn("cases", "--filter", glob, "--resolved", "--json")
    assert p.returncode == 0, p.stderr
    return [c["spec"] for c in json.loads(p.stdout)]


@test("the default matrix lists schedules of every kind: F/B, U, X, cache steps, F F B B")
def _():
    p = fattn("cases", "--filter", "sched.*")
    assert p.returncode == 0, p.stderr
    text = p.stdout
    for kind in ("step[", " U", " X ", "F0 F1 B0 B1", "U(forward) F1 B0"):
        assert kind in text, (kind, text)
    specs = matrix_specs("sched.*")
    assert any(s.get("paged") for s in specs) and any(not s.get("paged") and
                                                      "step" in s["schedule"][0] for s in specs)


def cache_rows(inp, spec, j, n_kv):
    """Sequence j's first n_kv cached K and V rows [n, hg, d] of a step."""
    k, v = floats(inp["k"]), floats(inp["v"])
    if not spec.get("paged"):
        return k[j, :n_kv], v[j, :n_kv]
    table, page = inp["page_table_k"][()], spec["paged"]["page_size"]
    rows = [(table[j, t // page], t % page) for t in range(n_kv)]
    return (np.stack([k[p, r] for p, r in rows]), np.stack([v[p, r] for p, r in rows]))


def q_rows(inp, spec, j, n_q):
    """Sequence j's new query rows [n, h, d] of a step, by q's format."""
    q, fmt = floats(inp["q"]), spec["layout"].replace("paged_kv_", "").split("_")[0]
    if fmt == "bshd":
        return q[j, :n_q]
    if fmt == "sbhd":
        return q[:n_q, j]
    cu = inp["cu_seqlens_q"][()]
    return q[cu[j]:cu[j] + n_q]


def out_rows(fw, inp, spec, j, n_q):
    """Sequence j's output rows [n, h, dv], by q's format."""
    o, fmt = floats(fw["out"]), spec["layout"].replace("paged_kv_", "").split("_")[0]
    if fmt == "bshd":
        return o[j, :n_q]
    if fmt == "sbhd":
        return o[:n_q, j]
    cu = inp["cu_seqlens_q"][()]
    return o[cu[j]:cu[j] + n_q]


def attention(q, k, v, h, hg, causal):
    """softmax(q k^T / sqrt(d)) v per head, bottom-right causal if asked."""
    nq, nk, d = q.shape[0], k.shape[0], q.shape[2]
    out = np.zeros((nq, h, v.shape[2]))
    for hi in range(h):
        g = hi // (h // hg)
        s = q[:, hi] @ k[:, g].T * np.float32(1.0 / np.sqrt(d))
        for i in range(nq if causal else 0):
            s[i, nk - nq + i + 1:] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, hi] = (p / p.sum(axis=1, keepdims=True)) @ v[:, g]
    return out


def check_cache_case(f, spec):
    steps, cached, maxerr = spec["schedule"], {}, 0.0
    for k, step in enumerate(steps, 1):
        g = f["cases"][spec["id"]]["steps"][str(k)]
        inp, fw = g["inputs"], g["forward"]
        cu_kv = inp["cu_seqlens_kv"][()]
        for j, (sid, new) in enumerate(step["step"]):
            n_kv = int(cu_kv[j + 1] - cu_kv[j])
            kk, vv = cache_rows(inp, spec, j, n_kv)
            old = cached.get(sid)
            assert n_kv == (len(old[0]) + new if old else new), (k, sid, n_kv)
            if old:  # the tokens this sequence had stay where they were
                assert np.array_equal(kk[:-new], old[0]) and np.array_equal(vv[:-new], old[1]), \
                    "step %d: sequence %d's cached tokens moved or changed" % (k, sid)
            cached[sid] = (kk, vv)
            want = attention(q_rows(inp, spec, j, new), kk, vv, spec["h"], spec["hg"],
                             "causal" in spec["mask"])
            got = out_rows(fw, inp, spec, j, new)
            err = np.max(np.abs(got - want))
            maxerr = max(maxerr, err)
            assert err < 2e-2, "step %d sequence %d: out off by %g" % (k, sid, err)
        for sid in list(cached):  # finished sequences leave the cache
            if sid not in [e[0] for e in step["step"]]:
                del cached[sid]
    return maxerr


@test("cache steps hold every sequence's tokens from step to step and attend to exactly them")
def _():
    path = os.path.join(TMP, "cache.h5")
    p = fattn("run", "--filter", CACHE_CASES, "--impl", "legacy", "-o", path)
    assert p.returncode == 0, p.stderr
    specs = matrix_specs(CACHE_CASES)
    assert len(specs) >= 2
    with h5py.File(path, "r") as f:
        for s in specs:
            check_cache_case(f, s)
    # the prefill-while-decoding cases, q in thd and sbhd
    path2 = os.path.join(TMP, "prefill.h5")
    p = fattn("run", "--filter", "sched.prefill_decode.*", "-o", path2)
    assert p.returncode == 0, p.stderr
    with h5py.File(path2, "r") as f:
        for s in matrix_specs("sched.prefill_decode.*"):
            check_cache_case(f, s)


@test("a paged schedule and its contiguous twin give bitwise equal outputs")
def _():
    (paged,) = matrix_specs("sched.decode.paged.sbhd.mqa.f16")
    twin = dict(paged, id="twin", layout=paged["layout"].replace("paged_kv_", ""))
    del twin["paged"]
    cases = os.path.join(TMP, "twins.json")
    json.dump([paged, twin], open(cases, "w"))
    path = os.path.join(TMP, "twins.h5")
    p = fattn("run", "--cases", cases, "-o", path)
    assert p.returncode == 0, p.stderr
    with h5py.File(path, "r") as f:
        a, b = f["cases"][paged["id"]]["steps"], f["cases"]["twin"]["steps"]
        assert len(a) == len(b) == len(paged["schedule"])
        for k in a:
            for name in ("out", "aux/softmax_stats"):
                x, y = a[k]["forward/" + name][()], b[k]["forward/" + name][()]
                assert x.tobytes() == y.tobytes(), "step %s forward/%s" % (k, name)


@test("a golden with one bit flipped in step 3 of a decode schedule: verify exits 1 naming steps/3")
def _():
    cid = "sched.decode.bshd.gqa.finish_early.bf16"
    cases = os.path.join(TMP, "one.json")
    json.dump(matrix_specs(cid), open(cases, "w"))
    d = os.path.join(TMP, "gold")
    p = fattn("golden", "--cases", cases, "--force", "--allow-dirty", "-o", d)
    assert p.returncode == 0, p.stderr
    path = os.path.join(d, "cpu-math-1.h5")
    with h5py.File(path, "r+") as f:
        ds = f["cases"][cid]["steps/3/forward/out"]
        data = ds[()].copy()
        data.reshape(-1)[5] ^= 1
        ds[...] = data
        ds.attrs.modify("digest", fattn_runfile.digest(data))
    assert fattn("inspect", path).returncode == 0, "the edited golden must stay valid"
    p = fattn("verify", "--cases", cases, "--fixtures", d)
    assert p.returncode == 1, (p.returncode, p.stdout[-1500:])
    assert "golden: steps/3/forward/out" in p.stdout, p.stdout[-1500:]


@test("inspect refuses a schedule's file with a step missing or an unknown object, naming it")
def _():
    cid = "sched.pipeline.thd.f16"
    path = os.path.join(TMP, "pipe.h5")
    p = fattn("run", "--filter", cid, "-o", path, env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert p.returncode == 0, p.stderr
    assert fattn("inspect", path).returncode == 0
    for what, edit, says in (
            ("a missing step", lambda c: c["steps"]["children"].pop("3"), "steps/ holds"),
            ("an unknown object", lambda c: c["steps"]["children"]["4"]["children"].update(
                {"extra": {"attrs": [], "children": {}}}), "in steps/4")):
        tree = fattn_runfile.load_tree(path)
        node = tree["children"]["cases"]["children"][cid]
        # an edit by hand: the attribute digest goes (absent, it is not checked)
        node["attrs"] = [a for a in node["attrs"] if a[0] != "attrs_digest"]
        edit(node["children"])
        bad = os.path.join(TMP, "bad.h5")
        fattn_runfile.write_tree(bad, tree)
        p = fattn("inspect", bad)
        assert p.returncode == 2 and says in p.stderr, (what, p.returncode, p.stderr[-600:])


sys.exit(1 if tap.run(TESTS) else 0)
