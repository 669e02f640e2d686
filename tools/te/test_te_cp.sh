#!/bin/sh
# meson test suite `te`: TE's own context-parallel attention (2.19.0 and
# 2.20.2) in local gloo ranks on the CPU engine (docs/te.md, "Context
# parallelism"). Skips (77) without the environment tools/te/setup.sh makes,
# or over a sanitizer-instrumented libfattn.
# Usage: test_te_cp.sh FATTN LIBFATTN SANITIZE
set -u
fattn=$1 lib=$2 sanitize=$3
here=$(cd "$(dirname "$0")" && pwd)
env_dir=${FATTN_TE_ENV:-${HOME:-/root}/.cache/fattn-te}
if [ "$sanitize" != none ]; then
    echo "SKIP: libfattn is built with -Db_sanitize=$sanitize; it cannot be loaded into an uninstrumented Python"
    exit 77
fi
for need in venv/bin/python te/2.19.0/.fattn-te-unpacked te/2.20.2/.fattn-te-unpacked; do
    if [ ! -e "$env_dir/$need" ]; then
        echo "SKIP: no TE environment ($env_dir/$need missing; run tools/te/setup.sh)"
        exit 77
    fi
done
export FATTN="$fattn" FATTN_LIB="$lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { # name, expected, got
    if [ "$2" = "$3" ]; then echo "ok - $1"; else echo "not ok - $1: expected [$2], got [$3]"; fail=1; fi
}
py() { "$env_dir/venv/bin/python" "$@"; }
te_copy() { # dir: a copy of the 2.20.2 wheel's package, to write a one-line bug into
    mkdir -p "$1" && cp -R "$env_dir/te/2.20.2/transformer_engine" "$env_dir/te/2.20.2/"*.dist-info "$1/"
}
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"

# 1. the CP matrix (2 and 4 ranks, every comm type) through both releases
"$here/fattn-te" verify --te 2.19.0 --te 2.20.2 --cp-matrix --keep "$work/v" >"$work/verdict" 2>"$work/err"
rc=$?
cat "$work/verdict"
check "verify --cp-matrix exits 0" 0 "$rc"
check "TE 2.19.0 -> 2.20.2: the P2P forward merge (P1) only" 1 "$(grep -c '^te-2.19.0 -> te-2.20.2: context parallelism: behavior-neutral: no, documented changes only (P1 in 9 cases) (26 cases, ' "$work/verdict")"
check "P1 in the p2p and a2a+p2p cases only" 9 "$(grep -c '^  documented change: /cases/cp[24]\.\(p2p\|a2a_p2p\)\..*: P1: ' "$work/verdict")"
check "each TE's ranks within TE's tolerance of the case without CP" 2 "$(grep -c '^te-2\.[0-9.]*: context parallelism against the same case without CP: within tolerance (T1 in 16 tensors not counted; 25 cases, 66 ranks, ' "$work/verdict")"
check "fattn's front ends equal each TE without CP" 2 "$(grep -c '^fattn-\(legacy\|split\) -> te-2\.[0-9.]*: the cases without CP: behavior-neutral: yes (26 cases, ' "$work/verdict")"
check "the comm types and sizes, none errored" 2 "$(grep -c '^te-2\.[0-9.]*: context parallelism: p2p 10, all_gather 6, a2a 7, a2a+p2p 2 (2 ranks: 18, 4 ranks: 8); 0 errored; 1 refused by TE as documented$' "$work/verdict")"
check "R1: the delayed recipe without reduce_amax, refused by both TEs' FusedAttention" 1 "$(grep -c '^  refused by both: /cases/cp2\.p2p\.bshd\.causal\.fp8ds\.no_reduce_amax: R1: ' "$work/verdict")"
check "... shown as TE's refusal, each release's own line, raised by both ranks" "2251 2510" "$(sed -n 's/^  refused by TE: cp2\.p2p\.bshd\.causal\.fp8ds\.no_reduce_amax: ranks 0, 1: TE raised AssertionError: Amax reduction across TP+CP group is necessary when using context parallelism with FP8! (transformer_engine\/pytorch\/attention\/dot_product_attention\/backends\.py:\([0-9]*\)): R1$/\1/p' "$work/verdict" | tr '\n' ' ' | sed 's/ $//')"
check "T1: TE's FP8 P2P dK/dV, its exact signature, in the three FP8 p2p cases of each TE" 6 "$(grep -c '^  documented finding: /cases/cp[24]\.p2p\.[a-z]*\(\.causal\)\?\.fp8\(ds\|cs\)  ranks 0, 1\(, 2, 3\)\? (dk, dv; .*): T1: ' "$work/verdict")"
"$fattn" inspect "$work/v/te2-cp.h5" >/dev/null 2>"$work/err"
check "the CP run file is a valid fattn-run/1 file" 0 $?
# what each rank recorded, read back with h5py (docs/run-files.md)
py - "$work/v/te2-cp.h5" >"$work/ranks" 2>&1 <<'PY'
import h5py, json, sys
f = h5py.File(sys.argv[1], "r")
ok = True
for cid, c in f["cases"].items():
    cp = json.loads(c.attrs["spec"])["cp"]
    if "ranks" not in c:  # TE's refusal (R1), its reason recorded instead
        ok &= cid.endswith(".no_reduce_amax") and "Amax reduction" in c.attrs["skipped"]
        continue
    ranks = c["ranks"]
    ok &= sorted(ranks, key=int) == [str(r) for r in range(cp["size"])]
    for r, g in ranks.items():
        ok &= all(k in g for k in ("inputs", "forward", "backward", "engine_call"))
        ok &= len(g["engine_call/forward"]) >= 1 and len(g["engine_call/backward"]) >= 1
print("ranks", int(ok))
# the P2P ring of a causal bshd case at 4 ranks: each rank calls the engine
# 4 times forward; rank 3's diagonal step is the causal mask with the
# window (-1,-1) TE's C++ makes causal (fattn_mask_band_right)
g = f["cases/cp4.p2p.bshd.causal.bf16/ranks/3/engine_call/forward"]
first = g["000"].attrs
print("calls", len(g), first["mask_type"], first["window_size"].tolist())
# FP8: every rank holds its recipe state; the delayed recipe's forward
# amaxes were all-reduced (MAX) over the CP group when the autocast was
# left: the ranks' own amaxes differ, their states after it are one, and
# S's new scale is 448 over the largest of the ranks' amaxes
import numpy as np
fp8 = [c for c in f["cases"] if "fp8" in json.loads(f["cases"][c].attrs["spec"])
       and "ranks" in f["cases"][c]]
ok = all("fp8" in r for c in fp8 for r in f["cases"][c]["ranks"].values())
red = differ = 0
for c in fp8:
    rs = [f["cases"][c]["ranks"][r]["fp8"] for r in sorted(f["cases"][c]["ranks"], key=int)]
    local = np.stack([g["amax_fwd_local"][()] for g in rs])
    same = all(np.array_equal(g["scale_fwd"][()], rs[0]["scale_fwd"][()]) and
               np.array_equal(g["amax_history_fwd"][()], rs[0]["amax_history_fwd"][()]) for g in rs)
    s = rs[0]["scale_fwd"][()][-1]
    red += bool(same and s == np.float32(448) / np.float32(local[:, -1].max()))
    differ += bool(same and not (local[:, -1] == local[0, -1]).all())
print("fp8", len(fp8), int(ok), red, differ)
q = f["cases/cp2.a2a.sbhd.fp8cs/ranks/1/engine_call/forward/000"]
print("fp8 call", q["q"].attrs["dtype"], q.attrs["s_quantizer"].split(" ")[0],
      q.attrs["o_quantizer"].split(" ")[0])
PY
check "every rank of every case: inputs, forward, backward, engine calls" "ranks 1" "$(sed -n 1p "$work/ranks")"
check "the ring's engine calls: a causal mask with the window (-1,-1)" "calls 4 NVTE_CAUSAL_MASK [-1, -1]" "$(sed -n 2p "$work/ranks")"
check "FP8: each rank's recipe state, one after the reduction in all eight, S's the largest rank's (own amaxes differing in four)" "fp8 8 1 8 4" "$(sed -n 3p "$work/ranks")"
check "FP8: an engine call's FP8 q and its S and O quantizers" "fp8 call float8_e4m3fn delayed current" "$(sed -n 4p "$work/ranks")"
py - "$work/v/te2-cp.h5" "$work/nofp8.h5" <<'PY'
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["cases/cp2.a2a.sbhd.fp8cs/ranks/0/fp8"]
PY
"$fattn" inspect "$work/nofp8.h5" >/dev/null 2>"$work/err"
check "an FP8 case's rank without its fp8 state is refused (exit 2)" "2 1" "$? $(grep -c "case cp2.a2a.sbhd.fp8cs: ranks/0: an FP8 case's rank has no fp8 state" "$work/err")"
# the shim's quantize reduces a current-scaling amax over the group, as TE's
# C++ does (two gloo ranks, shards of amax 0.5 and 1.0)
NVTE_TORCH_COMPILE=0 TORCHINDUCTOR_CACHE_DIR="$env_dir/torchinductor" "$env_dir/venv/bin/python" -W ignore "$here/check_cp_fp8.py" "$here" "$work" >"$work/cs" 2>"$work/cs.err"
check "current scaling: one amax and scale over the group, each rank's own without" "reduce 0x1p+0 0x1p+0 0x1.24924ap-9 0x1.24924ap-9|local 0x1p-1 0x1p+0 0x1.24924ap-10 0x1.24924ap-9" "$(grep -v '^R1' "$work/cs" | tr '\n' '|' | sed 's/|$//')"
check "R1 only with its exact signature (its check's line in the TE that ran)" "R1 2510 R1|R1 2511 not|R1 other message not|R1 from both ranks R1|R1 and another rank's error not" "$(grep '^R1' "$work/cs" | sed 's/: \(R1\|not\).*/ \1/' | tr '\n' '|' | sed 's/|$//')"
# the top-level states are the case without CP: fattn's C front end's own
check "the cases fattn's runner skips name fattn-te" 26 "$("$fattn" run --cases "$here/../../golden/cp_cases.json" -o "$work/skip.h5" >/dev/null 2>&1; py -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r')
print(sum('runs through fattn-te only' in f['cases'][c].attrs['skipped'] for c in f['cases']))" "$work/skip.h5")"

# 2. a TE developer's one-line bug in the CP branch of FusedAttention.forward
# (a copy of 2.20.2): cp_comm_type no longer passed on (the default "p2p"
# in its place). An a2a case then runs the P2P ring: right maths, within
# TE's tolerance of the case without CP, but not what 2.20.2 computes:
# caught bitwise, naming the case and each rank.
B=transformer_engine/pytorch/attention/dot_product_attention/backends.py
te_copy "$work/nocomm"
py - "$work/nocomm/$B" <<'PY' || echo "not ok - the bug was not made"
import re, sys
path = sys.argv[1]
src = open(path).read()
# FusedAttention's call of attn_forward_func_with_cp (2.20.2 backends.py:2534-2549):
# its positional cp_comm_type, before its own keyword arguments
new, n = re.subn(r"cp_comm_type,(\n\s*softmax_scale=self\.softmax_scale,\n\s*qkv_format=qkv_format,)",
                 r'"p2p",\1', src, count=1)
assert n == 1
open(path, "w").write(new)
PY
"$here/fattn-te" verify --te 2.20.2 --te "$work/nocomm" --cp-matrix --filter 'cp2.a2a.thd.*' >"$work/out" 2>&1
rc=$?
cat "$work/out"
check "the cp_comm_type bug: verify exits 1" 1 "$rc"
check "the cp_comm_type bug: TE vs TE differs" 1 "$(grep -c '^te-2.20.2 ([^)]*) -> te-2.20.2 ([^)]*): context parallelism: behavior-neutral: no (' "$work/out")"
check "... naming the case and each rank" 2 "$(grep -c '^  /cases/cp2\.a2a\.thd\.padding_causal\.gqa\.bf16/ranks/[01]/forward/out  different: .*(case cp2\.a2a\.thd\.padding_causal\.gqa\.bf16, rank [01])$' "$work/out")"
check "... while within TE's tolerance of the case without CP (the ring's maths is right)" 2 "$(grep -c '^te-2.20.2 ([^)]*): context parallelism against the same case without CP: within tolerance (1 case, 2 ranks' "$work/out")"

# 3. the delayed recipe's amax reduction gone from a copy of 2.20.2 (one
# line, quantization.py:684): the ranks' FP8 states after the autocast are
# their own; caught bitwise, naming the case, each rank and the state
W=$work/noreduce
te_copy "$W"
py - "$W/transformer_engine/pytorch/quantization.py" <<'PY' || echo "not ok - the bug was not made"
import sys
path = sys.argv[1]
src = open(path).read()
old = "                cls.reduce_tensor_across_group_op_max(contiguous_amax, group)\n"
assert src.count(old) == 1
open(path, "w").write(src.replace(old, "                pass\n"))
PY
"$here/fattn-te" verify --te 2.20.2 --te "$W" --cp-matrix --filter 'cp2.all_gather.*fp8*' >"$work/out" 2>&1
rc=$?
cat "$work/out"
check "no amax reduction: verify exits 1" 1 "$rc"
check "... naming the recipe state of each rank whose own amax was not the largest, in both FP8 cases" 3 "$(grep -c '^  /cases/cp2\.all_gather\.[a-z.0-9_]*fp8[a-z_0-9.]*/ranks/[01]/fp8/scale_fwd  different: ' "$work/out")"
check "... and nothing but the FP8 state" 0 "$(grep '^  /cases/' "$work/out" | grep -vc '/fp8/\(scale_fwd\|amax_history_fwd\)  different: ')"

# 4. no temporary folder outlived any run above
check "no temporary folders left" "" "$(ls -A "$work/tmp" | tr '\n' ' ')"
exit $fail
