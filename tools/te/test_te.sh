#!/bin/sh
# meson test suite `te`: TE's own FusedAttnFunc on the CPU engine against
# fattn's front ends, for the first two releases the support table knows
# (tools/te/releases.sh): TE's monolith, which fattn's legacy front end
# models, and the refactor as merged, which split models (2.19.0 and
# 2.20.2). Skips (77) without the environment tools/te/setup.sh makes, or
# over a sanitizer-instrumented libfattn.
# Usage: test_te.sh FATTN LIBFATTN SANITIZE
set -u
fattn=$1 lib=$2 sanitize=$3
here=$(cd "$(dirname "$0")" && pwd)
te_legacy=$("$here/releases.sh" | sed -n 1p)
te_split=$("$here/releases.sh" | sed -n 2p)
env_dir=${FATTN_TE_ENV:-${HOME:-/root}/.cache/fattn-te}
if [ "$sanitize" != none ]; then
    echo "SKIP: libfattn is built with -Db_sanitize=$sanitize; it cannot be loaded into an uninstrumented Python"
    exit 77
fi
for need in venv/bin/python te/"$te_legacy"/.fattn-te-unpacked te/"$te_split"/.fattn-te-unpacked; do
    if [ ! -e "$env_dir/$need" ]; then
        echo "SKIP: no TE environment ($env_dir/$need missing; run tools/te/setup.sh)"
        exit 77
    fi
done
export FATTN="$fattn" FATTN_LIB="$lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
counted() { # the paths of a fattn diff's counted differences, one a line
    grep -oE '^(different|missing in [AB]|structure|value): [^ ]+' "$1" | sed 's/^[^/]*//; s/:$//'
}
check() { # name, expected, got
    if [ "$2" = "$3" ]; then echo "ok - $1"; else echo "not ok - $1: expected [$2], got [$3]"; fail=1; fi
}

# Every fattn-te run below makes its temporary folders here: none may be
# left when it is done (counted at the end).
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"

# 1. the whole default matrix, FP8 and paged cases included, none left out:
# TE vs TE, and each vs fattn's front end.
"$here/fattn-te" verify --te "$te_legacy" --te "$te_split" --keep "$work/v" >"$work/verdict" 2>"$work/err"
rc=$?
cat "$work/verdict"
check "verify exits 0: nothing but the documented deviations and change" 0 "$rc"
n=$("$fattn" cases | wc -l) # the default matrix, every case of it
check "TE ${te_legacy} -> TE ${te_split}: the documented change F1 only" 1 "$(grep -c '^te-'"$te_legacy"' -> te-'"$te_split"': behavior-neutral: no, documented changes only (F1 in refuse.fp8.max_logit) ('"$n"' cases' "$work/verdict")"
check "fattn legacy vs ${te_legacy}: neutral (71 documented deviations)" 1 "$(grep -c '^fattn-legacy -> te-'"$te_legacy"': behavior-neutral: neutral (71 documented deviations) ('"$n"' cases' "$work/verdict")"
check "fattn split vs ${te_split}: F1 and 71 documented deviations" 1 "$(grep -c '^fattn-split -> te-'"$te_split"': behavior-neutral: no, documented changes only (F1 in refuse.fp8.max_logit; 71 documented deviations) ('"$n"' cases' "$work/verdict")"
check "F1 listed under the TE pair and the split pair" 2 "$(grep -c '^  documented change: /cases/refuse.fp8.max_logit  refused in [a-z0-9.-]*, run in te-'"$te_split"' (26 paths): F1' "$work/verdict")"
check "nothing left out" 0 "$(grep -c 'left out' "$work/verdict")"
check "cases through the module and FusedAttnFunc.apply, none errored" 2 "$(grep -c '^te-2.[0-9.]*: 122 cases through FusedAttention, 21 through FusedAttnFunc.apply (layout outside QKVLayouts 2, mixed q/kv formats 4, paged with a separate V table 1, paged with a thd q 2, raw_func_args 12), 0 errored$' "$work/verdict")"
# docs/te.md, Findings (F1 of docs/fp8-branches.md): return_max_logit with
# FP8 raises TypeError in 2.19.0 and returns None in 2.20.2; fattn refuses
# it; nothing else differs between the two releases
"$fattn" diff "$work/v/te1.h5" "$work/v/te2.h5" >"$work/diff" 2>&1
check "TE ${te_legacy} -> TE ${te_split}: only refuse.fp8.max_logit differs (${te_split} runs it)" \
    "26 0" "$(counted "$work/diff" | grep -c '^/cases/refuse\.fp8\.max_logit[/@]') $(counted "$work/diff" | grep -vc '^/cases/refuse\.fp8\.max_logit[/@]')"
check "TE's answers to fattn's refusals" 2 "$(grep -c '^te-'"$te_legacy"': refusals: 13 of 21 refused cases asked of TE (its C++ as the shim, its Python itself): 13 refused by TE too$\|^te-'"$te_split"': refusals: 13 of 21 refused cases asked of TE (its C++ as the shim, its Python itself): 12 refused by TE too; run by TE: refuse.fp8.max_logit$' "$work/verdict")"
check "TE ${te_legacy}'s own exception for it is recorded" 1 "$(/usr/bin/python3 -c "
import json, sys
e = [x for x in json.load(open(sys.argv[1])) if x['case'] == 'refuse.fp8.max_logit'][0]
print(int(e['te'] == 'raised' and e['type'] == 'TypeError' and e['te_line'].endswith('dot_product_attention/backends.py:1751')))
" "$work/v/te1-refusals.json" 2>&1)"
check "the 12 paged cases ran with their page tables handed to TE" 12 "$(/usr/bin/python3 -c "
import h5py, sys
f = h5py.File(sys.argv[1])
print(sum(1 for c, g in f['cases'].items() if c.startswith('paged.') and 'page_table_k' in g.get('inputs', {}) and 'out' in g.get('forward', {})))
" "$work/v/te2.h5" 2>&1)"
# the max_batch_size cases: TE's InferenceParams made the cache, a table of
# max_batch_size rows and the lengths (equal to fattn's model: the verdicts
# above), and its step() copied the tokens through the shim's copy_to_kv_cache
check "InferenceParams' tables of max_batch_size rows reached the engine" "5x4 4x4 3x3" "$(/usr/bin/python3 -c "
import h5py, sys
f = h5py.File(sys.argv[1])
print(' '.join('%dx%d' % f['cases'][c]['inputs/page_table_k'].shape for c in sorted(f['cases']) if c.startswith('paged.mbs.')))
" "$work/v/te2.h5" 2>&1)"
# a forward under no_grad / inference_mode: inputs, forward and what TE's
# forward handed save_for_backward; no backward
check "no_grad and inference_mode cases: save_ctx kept, no backward" "4 4 0" "$(/usr/bin/python3 -c "
import h5py, sys
f = h5py.File(sys.argv[1])
cs = [g for c, g in f['cases'].items() if c.startswith('mode.') and ('no_grad' in c or 'inference_mode' in c)]
print(len(cs), sum(len(g.get('save_ctx', {})) > 0 for g in cs), sum('backward' in g for g in cs))
" "$work/v/te2.h5" 2>&1)"
check "the FP8 cases ran through TE's FP8 path, all through FusedAttention" 1 "$(grep -c '^FP8: exercised (34 cases through TE.s FP8 path, 34 of them through FusedAttention; 7 refused)$' "$work/verdict")"
# docs/te.md, Findings: on the two padded max_logit cases TE's amax reads
# Max rows past each sequence's length; on the padded FP8 case TE
# dequantises the engine's unwritten rows with torch's NaN; every other
# counted object is bitwise fattn's.
for pair in "fattn-legacy $work/v/fattn-legacy.h5 $work/v/te1.h5" \
            "fattn-split $work/v/fattn-split.h5 $work/v/te2.h5"; do
    set -- $pair
    "$fattn" diff "$2" "$3" >"$work/diff" 2>&1
    got=$(counted "$work/diff" | grep -v '^/cases/refuse\.fp8\.max_logit[/@]' | LC_ALL=C sort | tr '\n' ' ')
    check "$1 vs TE: only the padded max_logit, FP8 NaN-payload, module page-table and InferenceParams cu_seqlens findings" \
        "/cases/fp8.ds.bshd.padding_causal/backward/dk /cases/fp8.ds.bshd.padding_causal/backward/dq /cases/fp8.ds.bshd.padding_causal/backward/dv /cases/fp8.ds.bshd.padding_causal/forward/out /cases/max_logit.padding.short_seqlens.bf16/forward/max_logit /cases/max_logit.padding_causal.short_seqlens.f16/forward/max_logit /cases/paged.bshd_bshd_bshd.decode.gqa.bf16/engine_call/forward@page_table_v /cases/paged.bshd_bshd_bshd.decode.page1.bf16/engine_call/forward@page_table_v /cases/paged.bshd_bshd_bshd.padding.poisoned.f16/engine_call/forward@page_table_v /cases/paged.bshd_bshd_bshd.prefill.padding_causal.top_left.f16/engine_call/forward@page_table_v /cases/paged.mbs.bshd_bshd_bshd.decode.mqa.f16/engine_call/forward@cu_seqlens_kv_padded /cases/paged.mbs.bshd_bshd_bshd.decode.mqa.f16/engine_call/forward@cu_seqlens_q_padded /cases/paged.mbs.bshd_bshd_bshd.decode.mqa.f16/engine_call/forward@page_table_v /cases/paged.mbs.bshd_bshd_bshd.prefill.gqa.bf16/engine_call/forward@cu_seqlens_kv_padded /cases/paged.mbs.bshd_bshd_bshd.prefill.gqa.bf16/engine_call/forward@cu_seqlens_q_padded /cases/paged.mbs.bshd_bshd_bshd.prefill.gqa.bf16/engine_call/forward@page_table_v /cases/paged.mbs.sbhd_bshd_bshd.decode.bf16/engine_call/forward@cu_seqlens_kv_padded /cases/paged.mbs.sbhd_bshd_bshd.decode.bf16/engine_call/forward@cu_seqlens_q_padded /cases/paged.mbs.sbhd_bshd_bshd.decode.bf16/engine_call/forward@page_table_v /cases/paged.sbhd_bshd_bshd.prefill.f16/engine_call/forward@page_table_v /cases/paged.sbhd_sbhd_sbhd.prefill.gqa.f16/engine_call/forward@page_table_v /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/1/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/1/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/2/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/2/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/3/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/3/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/4/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/4/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/5/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.bshd.gqa.finish_early.bf16/steps/5/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/1/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/1/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/1/engine_call/forward@page_table_v /cases/sched.decode.paged.sbhd.mqa.f16/steps/2/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/2/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/2/engine_call/forward@page_table_v /cases/sched.decode.paged.sbhd.mqa.f16/steps/3/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/3/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/3/engine_call/forward@page_table_v /cases/sched.decode.paged.sbhd.mqa.f16/steps/4/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/4/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/4/engine_call/forward@page_table_k /cases/sched.decode.paged.sbhd.mqa.f16/steps/4/engine_call/forward@page_table_v /cases/sched.decode.paged.sbhd.mqa.f16/steps/5/engine_call/forward@cu_seqlens_kv_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/5/engine_call/forward@cu_seqlens_q_padded /cases/sched.decode.paged.sbhd.mqa.f16/steps/5/engine_call/forward@page_table_k /cases/sched.decode.paged.sbhd.mqa.f16/steps/5/engine_call/forward@page_table_v /cases/sched.prefill_decode.sbhd.f16/steps/1/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.sbhd.f16/steps/1/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.sbhd.f16/steps/2/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.sbhd.f16/steps/2/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.sbhd.f16/steps/3/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.sbhd.f16/steps/3/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.sbhd.f16/steps/4/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.sbhd.f16/steps/4/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/1/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/1/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/1/engine_call/forward@page_table_v /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/2/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/2/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/2/engine_call/forward@page_table_v /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/3/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/3/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/3/engine_call/forward@page_table_v /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/4/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/4/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/4/engine_call/forward@page_table_v /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/5/engine_call/forward@cu_seqlens_kv_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/5/engine_call/forward@cu_seqlens_q_padded /cases/sched.prefill_decode.thd.paged.gqa.bf16/steps/5/engine_call/forward@page_table_v " "$got"
    "$fattn" diff "$2" "$3" --only '/cases/fp8.ds.bshd.padding_causal/*' >"$work/diff" 2>&1
    check "$1 vs TE: the FP8 differences are NaN payloads only" 4 \
        "$(grep -c 'sign flips 0, class changes 0, NaN payloads' "$work/diff")"
done
check "verify lists the two documented paths under each fattn pair" 4 \
    "$(grep -c '^  documented: /cases/max_logit.padding.*/forward/max_logit  different: 2 of 2 elements, 2 NaN/Inf vs finite: max_logit with a padding mask' "$work/verdict")"
check "verify lists the nine module page-table paths under each fattn pair" 18 \
    "$(grep -c '^  documented: /cases/paged\.[a-z0-9_.]*/engine_call/forward@page_table_v  value: .*: FusedAttention hands fused_attn_fwd one page table for K and V' "$work/verdict")"
check "verify lists the four FP8 NaN-payload paths under each fattn pair, on one line" 2 \
    "$(grep -c '^  documented: /cases/fp8.ds.bshd.padding_causal  4 paths (backward/dk, backward/dq, backward/dv, forward/out): NaN payloads of the rows' "$work/verdict")"
check "verify lists the InferenceParams cu_seqlens paths, one line per case" 6 \
    "$(grep -c '^  documented: /cases/paged\.mbs\.[a-z0-9_.]*  2 paths (engine_call/forward@cu_seqlens_kv_padded, engine_call/forward@cu_seqlens_q_padded): FusedAttention hands InferenceParams. cu_seqlens as the padded ones' "$work/verdict")"

# DEVIATIONS matches narrowly, each entry only with its exact signature
# (tools/te/check_documented.py says how)
"$env_dir/venv/bin/python" -W ignore "$here/check_documented.py" "$here" "$work/v" >"$work/dev.out" 2>&1
check "DEVIATIONS match only their own differences, with their exact signatures" \
    "F1 None None NaN None None F1 None None" "$(head -1 "$work/dev.out")"
check "F1 raised at another line of backends.py is not F1, and says so" \
    "te-${te_legacy} refused it with TypeError: Value after * must be an iterable, not NoneType (transformer_engine/pytorch/attention/dot_product_attention/backends.py:1752); F1 is TypeError: Value after * must be an iterable, not NoneType (transformer_engine/pytorch/attention/dot_product_attention/backends.py:1751)" \
    "$(sed -n 2p "$work/dev.out")"

"$env_dir/venv/bin/python" -W ignore "$here/check_verdict.py" "$fattn" "$work/v/te2.h5" \
    softmax.off_by_one.f16 "$work" || fail=1
"$fattn" inspect "$work/v/te1.h5" >/dev/null 2>&1
check "TE ${te_legacy}'s run file is a valid fattn-run/1 file" 0 $?
check "impl te-${te_legacy}" 1 "$(/usr/bin/python3 -c "import h5py,sys; print(int(h5py.File(sys.argv[1])['/'].attrs['impl']=='te-${te_legacy}'))" "$work/v/te1.h5" 2>/dev/null)"

# 2. --te as a TE wheel file (the 2.20.2 wheel setup.sh downloaded), unpacked
# into the run's temporary folder; the unpacked release directory is what
# section 1 ran
"$here/fattn-te" run --te "$env_dir/wheels/transformer_engine-${te_split}-py3-none-any.whl" \
    --filter 'layout.sb3hd*' -o "$work/p.h5" >/dev/null 2>"$work/err"
check "--te WHEEL runs" 0 $?
"$fattn" run --impl split --filter 'layout.sb3hd*' -o "$work/ps.h5" >/dev/null 2>&1
"$fattn" diff "$work/ps.h5" "$work/p.h5" >/dev/null 2>&1
check "--te WHEEL equals fattn split on layout.sb3hd" 0 $?

# 3. bad input: exit 2, nothing written
"$here/fattn-te" run --te /nonexistent -o "$work/bad.h5" 2>"$work/err"
check "--te on a missing directory exits 2" 2 $?
"$here/fattn-te" run --te "$te_legacy" -o "$work/no/such/dir/x.h5" 2>"$work/err"
check "-o in a missing directory exits 2 at once" 2 $?
check "the message names the directory" 1 "$(grep -c "$work/no/such/dir" "$work/err")"
check "nothing written" no "$( [ -e "$work/bad.h5" ] && echo yes || echo no)"

# 3b. a spec file holding an FP8 case runs through TE's FP8 path and is
# fattn split's, Float8Tensors (1-byte datasets with scale_inv) and
# quantizer states included
/usr/bin/python3 -c '
import json, sys
print(json.dumps([c for c in json.load(open(sys.argv[1])) if c["id"] == "fp8.cs.bshd.fp8in"]))' \
    "$here/../../golden/default_cases.json" >"$work/fp8.json"
"$here/fattn-te" run --te "$te_split" --cases "$work/fp8.json" -o "$work/fp8.h5" >/dev/null 2>"$work/err"
check "an FP8 case in --cases runs" 0 $?
"$fattn" run --impl split --cases "$work/fp8.json" -o "$work/fp8s.h5" >/dev/null 2>&1
"$fattn" diff "$work/fp8s.h5" "$work/fp8.h5" >"$work/diff" 2>&1
check "the FP8 case equals fattn split bitwise" 0 $?
check "its FP8 grads and quantizers were compared" 1 "$(/usr/bin/python3 -c "
import h5py, sys
c = h5py.File(sys.argv[1])['cases/fp8.cs.bshd.fp8in']
print(int(c['backward/dq'].attrs['dtype'] in (b'float8_e5m2', 'float8_e5m2')
          and 'scale_inv' in c['backward/dq'].attrs and 'dQKV_quantizer' in c['backward'].attrs
          and str(c['save_ctx'].attrs['QKV_quantizer']).count('current float8_e4m3fn') == 1))
" "$work/fp8.h5" 2>&1)"

# 4. setup.sh over a complete environment downloads and installs nothing
"$here/setup.sh" >"$work/setup" 2>&1
check "setup.sh is idempotent (exit)" 0 $?
check "setup.sh is idempotent (nothing fetched)" 0 "$(grep -c 'installing\|fetching\|creating' "$work/setup")"

# 5. the shim: TE's enum values, and a name outside its table is refused by name
got=$(PYTHONPATH="$here" "$env_dir/venv/bin/python" -c '
from fattn_te import shim
m = shim.make_module()
vals = (int(m.NVTE_QKV_Layout.NVTE_BHSD_BHSD_BHSD), int(m.NVTE_Fused_Attn_Backend.NVTE_FP8),
        int(m.DType.kBFloat16), int(m.NVTE_QKV_Format.NVTE_QKV_Format_NOT_SET))
try:
    m.no_such_entry_point
    print(vals, "accepted")
except AttributeError:
    print(vals, "refused")
' 2>&1)
check "shim enums and strictness" "(25, 2, 6, 8) refused" "$got"

# 5b. what the FP8 path reaches of the shim, as discover.py --run logs it:
# the two fused_attn calls and TE's quantizers' cast, nothing else; 5c. the
# schedules (a paged decode, the FP8 pipeline with its update) reach TE's
# own recipe update and KV-cache copy (the shim's C++ stand-ins on libfattn)
# besides; one TE import for both
PYTHONPATH="$here" TORCHINDUCTOR_CACHE_DIR="$env_dir/torchinductor" \
    "$env_dir/venv/bin/python" -W ignore -m fattn_te.discover "$env_dir/te/${te_split}" \
    --run 'fp8.*.outfp8' 'sched.[df]*.p*.f16' >"$work/reach" 2>/dev/null
reached() { # the names logged under filter $1
    awk -v f="== $1" '/^== /{on = ($0 == f); next} on {print $1}' "$work/reach" | tr '\n' ' '
}
check "the FP8 path reaches fused_attn_fwd, fused_attn_bwd and quantize only" \
    "fused_attn_bwd fused_attn_fwd quantize " "$(reached 'fp8.*.outfp8')"
check "the schedules reach the recipe update and copy_to_kv_cache" \
    "copy_to_kv_cache fused_amax_and_scale_update_after_reduction fused_attn_bwd fused_attn_fwd quantize " \
    "$(reached 'sched.[df]*.p*.f16')"

# 6. the bridge refuses a libfattn whose struct layout is not its mirror
got=$(PYTHONPATH="$here" "$env_dir/venv/bin/python" -c '
from fattn_te import bridge
bridge.Engine("cpu")
bridge._ABI[0] += 8
try:
    bridge.Engine("cpu")
    print("accepted")
except bridge.BridgeError as e:
    print("refused" if "struct layout" in str(e) else e)
' 2>&1)
check "bridge checks libfattn's struct layout" refused "$got"

# 7. a source tree: impl is te-<its VERSION.txt, else source>+<short revision>
mkdir -p "$work/src"
cp -R "$env_dir/te/${te_split}/transformer_engine" "$work/src/"
(cd "$work/src" && git init -q && git add -A && git -c user.name=t -c user.email=t@t \
    commit -qm tree && git tag v"$te_split"-local) >/dev/null 2>&1
"$here/fattn-te" run --te "$work/src" --filter 'layout.sb3hd*' -o "$work/s.h5" >/dev/null 2>&1
check "--te on a git tree runs" 0 $?
srcrev=$(git -C "$work/src" rev-parse --short HEAD)
check "impl te-source+<short revision> (no VERSION.txt; git describe's tag is not the label)" "te-source+$srcrev" "$(/usr/bin/python3 -c "import h5py,sys; v=h5py.File(sys.argv[1])['/'].attrs['impl']; print(v.decode() if isinstance(v, bytes) else v)" "$work/s.h5" 2>/dev/null)"
"$fattn" diff "$work/p.h5" "$work/s.h5" >/dev/null 2>&1
check "the git tree's states equal the wheel's" 0 $?
"$here/fattn-te" run --te "$work/src" --filter 'fp8.cs.*' -o "$work/s8.h5" >/dev/null 2>&1
check "--te on a git tree runs the FP8 cases" 0 $?
"$fattn" run --impl split --filter 'fp8.cs.*' -o "$work/s8f.h5" >/dev/null 2>&1
"$fattn" diff "$work/s8f.h5" "$work/s8.h5" >/dev/null 2>&1
check "the git tree's FP8 states equal fattn split's" 0 $?

# 7b. a one-line FP8 bug in the tree (the dO quantizer handed to the FP8
# fused_attn_bwd where dP's belongs, 2.20.2 backends.py:2147) is caught by
# verify, naming case and quantizer: the grads are bitwise unchanged (dP's
# E5M2 codes scale by powers of two), but dP's amax lands in dO's quantizer
line=$(grep -n '^                    args.dP_quantizer,$' "$work/src/transformer_engine/pytorch/attention/dot_product_attention/backends.py" | sed -n 2p | cut -d: -f1)
check "the FP8 fused_attn_bwd's dP argument is at 2147" 2147 "$line"
sed -i "${line}s/args.dP_quantizer,/args.dO_quantizer,/" \
    "$work/src/transformer_engine/pytorch/attention/dot_product_attention/backends.py"
"$here/fattn-te" verify --te "$te_split" --te "$work/src" --filter 'fp8.ds.bshd' >"$work/mut" 2>&1
check "the FP8 bug makes verify exit 1" 1 $?
check "the first verdict is no" 1 "$(grep -c '^te-'"$te_split"' -> te-source+'"$srcrev"'-dirty: behavior-neutral: no' "$work/mut")"
check "it names the case and the quantizer (under the TE pair and the split pair)" 2 "$(grep -c '^  /cases/fp8.ds.bshd/backward@dP_quantizer  ' "$work/mut")"

# 8. byte-reproducible with SOURCE_DATE_EPOCH, whatever the output path
mkdir -p "$work/r"
for o in "$work/r1.h5" "$work/r/r2.h5"; do
    SOURCE_DATE_EPOCH=1700000000 "$here/fattn-te" run --te "$te_legacy" --filter 'dropout.*' -o "$o" >/dev/null 2>&1
done
cmp -s "$work/r1.h5" "$work/r/r2.h5"
check "two runs with SOURCE_DATE_EPOCH are byte-identical" 0 $?
# 9. a TE developer's one-line bugs, in copies of the 2.20.2 wheel
B=transformer_engine/pytorch/attention/dot_product_attention/backends.py
mutant() { # name, file, python re.sub pattern, replacement: a copy of 2.20.2 with one line changed
    mkdir -p "$work/$1"
    cp -R "$env_dir/te/${te_split}/transformer_engine" "$env_dir/te/${te_split}/"*.dist-info "$work/$1/"
    "$env_dir/venv/bin/python" - "$work/$1/$2" "$3" "$4" <<'PY' || echo "not ok - mutant $1 not made"
import re, sys
path, pat, rep = sys.argv[1:4]
src = open(path).read()
new, n = re.subn(pat, rep, src, count=1, flags=re.M)
assert n == 1, pat
open(path, "w").write(new)
PY
}
# 9a. FusedAttention.forward no longer zeroes dropout in eval: an inference
# case with dropout set (not raw_func_args) catches it through the module
# path only.
mutant evaldrop "$B" 'dropout_p=self\.attention_dropout if self\.training else 0\.0,' 'dropout_p=self.attention_dropout,'
cat >"$work/evaldrop.json" <<'JSON'
[{"id": "inference.dropout_p0.2.f16", "b": 2, "h": 2, "sq": 24, "skv": 40, "d_qk": 16,
  "dtype": "float16", "layout": "sbhd_sbhd_sbhd", "is_training": false, "dropout_p": 0.2,
  "seed": 1070}]
JSON
"$here/fattn-te" verify --te "$te_split" --te "$work/evaldrop" --cases "$work/evaldrop.json" >"$work/out" 2>&1
check "eval-mode dropout bug: verify exits 1" 1 $?
check "eval-mode dropout bug: save_ctx dropout_p named" 2 "$(grep -c '^  /cases/inference.dropout_p0.2.f16/save_ctx@dropout_p' "$work/out")"
"$here/fattn-te" run --call function --te "$work/evaldrop" --cases "$work/evaldrop.json" -o "$work/ed.h5" >/dev/null 2>&1
"$fattn" run --impl split --cases "$work/evaldrop.json" -o "$work/eds.h5" >/dev/null 2>&1
"$fattn" diff "$work/eds.h5" "$work/ed.h5" >/dev/null 2>&1
check "the same bug passes on --call function (it is FusedAttention's)" 0 $?
# 9b. grads returned in the wrong order: autograd misplaces them where the
# shapes agree and refuses them where they do not
mutant order "$B" '^    return dq, dk, dv, d_bias, d_softmax_offset$' '    return dk, dq, dv, d_bias, d_softmax_offset'
"$here/fattn-te" verify --te "$te_split" --te "$work/order" --filter 'layout.sb*' >"$work/out" 2>&1
check "grads in the wrong order: verify exits 1" 1 $?
check "misplaced dq named (TE vs TE, fattn-split vs TE)" 2 "$(grep -c '^  /cases/layout.sb3hd.causal.f16/backward/dq  different' "$work/out")"
check "autograd's refusal recorded as the case's result" 1 "$(grep -c '^  errored: layout.sbhd_sbhd_sbhd.no_mask.f16 (errored in this TE only): TE raised RuntimeError: Function FusedAttnFuncBackward returned an invalid gradient at index 0' "$work/out")"
# 9c. a missing aux entry: the inconsistent hand-off is the case's result
mutant noaux "$B" '^        if self\.aux_bias is not None:$' '        if False:'
"$here/fattn-te" run --te "$work/noaux" --filter 'bias.*' -o "$work/noaux.h5" >"$work/out" 2>&1
check "missing aux entry: run exits 1 (cases errored)" 1 $?
check "named as an inconsistent hand-off" 1 "$(grep -c '^  bias.post_scale_bias.1hss.f16: inconsistent hand-off: TE handed fused_attn_bwd an inconsistent aux_ctx_tensors: passed 2 entries .*; the contract expects 3: Stats, rng_state, Bias$' "$work/out")"
check "the inference bias case (no backward) still ran" 1 "$(grep -c '4 errored' "$work/out")"
# 9d. a bad argument TE hands the engine in one kind of case (the two
# max_seqlen swapped): the hand-off contract names it as TE's, not as an
# engine check; the others' verdicts stand, the errored cases are counted
mutant swapped transformer_engine/pytorch/cpp_extensions/fused_attn.py \
    '^    # execute kernel$' '    if attn_mask_type == "causal": max_seqlen_q, max_seqlen_kv = max_seqlen_kv, max_seqlen_q'
"$here/fattn-te" verify --te "$te_split" --te "$work/swapped" --filter 'layout.sb*' --keep "$work/be" >"$work/out" 2>&1
check "swapped max_seqlen: verify exits 1" 1 $?
ncausal=$(grep -c '^  errored: layout\.[^ ]*\.causal\.[a-z0-9]* (errored in this TE only): inconsistent hand-off: TE handed fused_attn_fwd an inconsistent max_seqlen_q: passed [0-9]*; the contract expects [0-9]* (Q.s sequence dim in sbhd)$' "$work/out")
nerr=$(sed -n 's/^te-'"$te_split"' (.*swapped): .*, \([0-9]*\) errored$/\1/p' "$work/out")
check "swapped max_seqlen: the causal layout cases with sq != skv errored, named as TE's hand-off" yes "$([ "$ncausal" -gt 0 ] && echo yes)"
check "swapped max_seqlen: the errored cases counted" "$ncausal" "$nerr"
"$fattn" diff "$work/be/te1.h5" "$work/be/te2.h5" >"$work/diff" 2>&1
check "swapped max_seqlen: only the errored cases differ" 0 "$(grep '^different:\|^missing\|^structure' "$work/diff" | grep -vc '\.causal\.')"

# 9e. a documented change matches only its exact signature: a copy of
# 2.20.2 with one more assert in its FP8 branch refuses
# refuse.fp8.max_logit otherwise than F1 documents, and is caught
mutant f1assert "$B" '^(        fused_attention_backend = FusedAttnBackend\["FP8"\]\n)' \
    '\1        assert not args.return_max_logit, "FP8 has no max_logit"\n'
"$here/fattn-te" verify --te "$te_split" --te "$work/f1assert" --filter 'refuse.fp8.max_logit' >"$work/out" 2>&1
check "an extra assert in the F1 case: verify exits 1" 1 $?
check "... the case and the cause named (TE's assert, its line), under both pairs" 2 "$(grep -c '^  /cases/refuse.fp8.max_logit  errored in te-'"$te_split"' (.*f1assert): TE raised AssertionError: FP8 has no max_logit (transformer_engine/pytorch/attention/dot_product_attention/backends.py:1647); fattn refuses the case by rule fp8_max_logit' "$work/out")"
check "... and not taken for F1: the TE pair differs" 1 "$(grep -c '^te-'"$te_split"' ('"$te_split"') -> te-'"$te_split"' (.*f1assert): behavior-neutral: no (1 of 1 cases differ' "$work/out")"

# 9g. FusedAttention.forward's FP8 arguments: fp8_output given
# bf16_backward's value (one line, 2.20.2 backends.py:2619) is caught on an
# FP8 case run through the module, and passes on --call function (the
# module's argument building is what catches it)
mutant fp8flags "$B" '^                fp8_output=fp8_output,$' '                fp8_output=bf16_backward,'
f8case=fp8.cs.bshd_bs2hd.gqa.outfp8
for how in module function; do # each held to section 1's run of the release
    "$here/fattn-te" run --call $how --te "$work/fp8flags" --filter "$f8case" -o "$work/f8$how.h5" >/dev/null 2>&1
    "$fattn" diff "$work/v/te2.h5" "$work/f8$how.h5" --only "/cases/$f8case*" >"$work/f8$how.diff" 2>&1
    echo "exit $?" >>"$work/f8$how.diff"
done
check "FP8 module flags swapped: the FP8 case differs, its out named" "exit 1 yes" \
    "$(tail -1 "$work/f8module.diff") $(grep -q "^\(different\|structure\|missing in [AB]\): /cases/$f8case/forward/out" "$work/f8module.diff" && echo yes)"
check "... and passes through FusedAttnFunc.apply (it is FusedAttention's)" "exit 0" "$(tail -1 "$work/f8function.diff")"

# 9h. a saved quantizer that shares its scale with the live one instead of
# a copy (2.20.2 backends.py:1858 dropped: the S copy keeps the live scale
# tensor): invisible to one forward and backward, caught by the schedule
# whose recipe update falls between a forward and its backward, naming the
# step and the quantizer
mutant scopy "$B" '^        S_quantizer\.scale = S_quantizer\.scale\.clone\(\)$' '        pass'
"$env_dir/venv/bin/python" -c '
import json, sys
print(json.dumps([c for c in json.load(open(sys.argv[1]))
                  if c["id"] in ("fp8.ds.bshd", "sched.fp8.pipeline.update_between.f16")]))' \
    "$here/../../golden/default_cases.json" >"$work/scopy.json"
"$here/fattn-te" verify --te "$te_split" --te "$work/scopy" --cases "$work/scopy.json" >"$work/out" 2>&1
check "S copy sharing its scale: verify exits 1 on the schedule" 1 $?
check "... one forward and backward (fp8.ds.bshd) cannot tell" "2 0" "$(grep -c 'behavior-neutral: no (1 of 2 cases differ' "$work/out") $(grep -c '/cases/fp8\.ds\.bshd[/@ ]' "$work/out")"
check "... naming the step and the quantizer (TE pair, split pair)" 2 "$(grep -c '^  /cases/sched.fp8.pipeline.update_between.f16/steps/4/save_ctx@S_quantizer  ' "$work/out")"
check "... and the backward it changed" 2 "$(grep -c '^  /cases/sched.fp8.pipeline.update_between.f16/steps/4/backward/dv  different' "$work/out")"

# 9f. blame: TE (its line), TE's hand-off, or fattn-te's own error, which
# stops the run with exit 2 and writes nothing (tools/te/check_blame.py)
TORCHINDUCTOR_CACHE_DIR="$env_dir/torchinductor" "$env_dir/venv/bin/python" -W ignore \
    "$here/check_blame.py" "$here" "$work" >"$work/blame" 2>"$work/blame.err"
check "blame: who raised each probe" "te te handoff handoff tool te tool run" \
    "$(cut -d' ' -f1 "$work/blame" | tr '\n' ' ' | sed 's/ $//')"
check "blame: a TE error names TE's line" 1 "$(grep -c '^te TE raised ValueError: te (transformer_engine/pytorch/attenti' "$work/blame")"
check "blame: fattn-te's own error stops the run, exit 2, nothing written" "run 2 nothing written" "$(tail -1 "$work/blame")"
check "blame: ... naming the case and fattn-te's line" 1 "$(grep -c "^fattn-te: case layout.sb3hd.causal.f16: fattn-te's own error (not a result about TE): AttributeError: .* (tools/te/fattn_te/record.py:[0-9]*)$" "$work/blame.err")"

# 9h. modes and paged caches as TE's users run them: one-line bugs in copies
# of 2.20.2, each run on the cases that show it and held to section 1's run
# of 2.20.2, caught with the case and the cause named
ref2="$work/v/te2.h5"
moderun() { # mutant, filter: fattn-te run on the copy, then fattn diff against 2.20.2's run
    "$here/fattn-te" run --te "$work/$1" --filter "$2" -o "$work/$1.h5" >"$work/$1.run" 2>&1
    echo "exit $?" >>"$work/$1.run"
    "$fattn" diff "$ref2" "$work/$1.h5" --only "/cases/$2" >"$work/$1.diff" 2>&1
}
# FusedAttention asks FusedAttnFunc for max_logit only when training (2.20.2 backends.py:2612)
mutant maxlogit "$B" '^                return_max_logit=self\.return_max_logit,$' \
    '                return_max_logit=self.return_max_logit and self.training,'
moderun maxlogit 'mode.eval.max_logit.*'
check "inference max_logit bug: the eval case errored, exit 1" "exit 1" "$(tail -1 "$work/maxlogit.run")"
check "... named as TE's hand-off of a max_logit it never asked for" 1 \
    "$(grep -c "^  mode.eval.max_logit.causal.bf16: inconsistent hand-off: TE's FusedAttention returned a max_logit, but asked fused_attn_fwd for none$" "$work/maxlogit.run")"
# FusedAttention's is_training from the grad mode, not train()/eval() (:2599)
mutant gradmode "$B" '^                is_training=self\.training,$' \
    '                is_training=torch.is_grad_enabled(),'
moderun gradmode 'mode.train.*'
check "grad-mode is_training bug: the training forwards under no_grad and inference_mode lose their dropout" \
    "/cases/mode.train.inference_mode.dropout.causal.bf16/engine_call/forward@is_training /cases/mode.train.inference_mode.dropout.causal.bf16/forward/out /cases/mode.train.inference_mode.dropout.causal.bf16/save_ctx/out /cases/mode.train.no_grad.dropout.f16/engine_call/forward@is_training /cases/mode.train.no_grad.dropout.f16/forward/out /cases/mode.train.no_grad.dropout.f16/save_ctx/out " \
    "$(counted "$work/gradmode.diff" | sort | tr '\n' ' ')"
# FusedAttention no longer cuts InferenceParams' cu_seqlens_kv to b + 1 (:2434)
mutant trim "$B" '^            cu_seqlens_kv = cu_seqlens_kv\[: batch_size \+ 1\]$' \
    '            cu_seqlens_kv = cu_seqlens_kv'
moderun trim 'paged.*'
check "cu_seqlens trimming bug: run exits 1" "exit 1" "$(tail -1 "$work/trim.run")"
check "... the max_batch_size cases errored, each named as TE's hand-off of cu_seqlens_kv" 3 \
    "$(grep -c '^  paged\.mbs\.[^ ]*: inconsistent hand-off: TE handed fused_attn_fwd an inconsistent cu_seqlens_kv: passed \[[0-9]*\] int32; the contract expects int32 \[[0-9]*\] (b + 1 for the batch of [0-9]*)$' "$work/trim.run")"
check "... and nothing else differs (the paged cases without max_batch_size hand b + 1 already)" \
    "" "$(counted "$work/trim.diff" | grep -v '^/cases/paged\.mbs\.' | tr '\n' ' ')"

# 9i. the DotProductAttention path's CPU side: which cases DPA is given and
# why the others are not, the arguments it gets (tools/te/check_dpa.py);
# DotProductAttention itself needs CUDA, so --call dpa here exits 2 saying so
TORCHINDUCTOR_CACHE_DIR="$env_dir/torchinductor" "$env_dir/venv/bin/python" -W ignore \
    "$here/check_dpa.py" "$here" "$fattn" "$work" "$te_split" >"$work/dpa" 2>&1
check "dpa: the cases through DotProductAttention" 70 "$(sed -n 1p "$work/dpa")"
check "dpa: why the others are not" "ALiBi 2; FP8 32; bhsd layout 2; mixed q/kv formats 4; paged without max_batch_size 9; raw_func_args 12; schedule 8; softmax offset 4" "$(sed -n 2p "$work/dpa")"
check "dpa: DPA's arguments for an eval case with dropout" '[{"attention_dropout": 0.2, "attention_type": "self", "attn_mask_type": "no_mask", "kv_channels": [16, 16], "layer_number": 1, "num_attention_heads": 2, "num_gqa_groups": 2, "qkv_format": "sbhd", "return_max_logit": false, "softmax_scale": 0.25, "softmax_type": "vanilla", "window_size": [-1, -1]}, {"attn_mask_type": "no_mask", "bottom_right_diagonal": true, "core_attention_bias_type": "no_bias", "fast_zero_fill": true, "max_seqlen_kv": 40, "max_seqlen_q": 24, "qkv_format": "sbhd", "window_size": [-1, -1]}, {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "NVTE_FLASH_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}]' "$(sed -n 3p "$work/dpa")"
check "dpa: a case DPA routes away is recorded so, listed on the run line" \
    "0 [\"  routed away: layout.sb3hd.causal.f16: DotProductAttention routes it away from FusedAttention (a stand-in for DPA's answer)\"]" \
    "$(sed -n 4p "$work/dpa")"
check "dpa: ... and left out of the verdict, listed under it" \
    "0 ['fattn-split -> te: behavior-neutral: yes (0 cases, 0 tensors)', \"  routed away (not compared): /cases/layout.sb3hd.causal.f16: DotProductAttention routes it away from FusedAttention (a stand-in for DPA's answer)\"]" \
    "$(sed -n 5p "$work/dpa")"
check "dpa: the one-head packed layout entry matches narrowly" "one-head layout entry: narrow" \
    "$(grep '^one-head layout entry' "$work/dpa")"
"$here/fattn-te" run --call dpa --te "$te_split" --filter 'mode.eval.dropout*' -o "$work/dpa.h5" 2>"$work/err"
check "--call dpa without CUDA exits 2" 2 $?
check "... saying DotProductAttention needs CUDA and where to run it" 1 "$(grep -c 'needs CUDA .*run it on a GPU runner (tools/te/gpu-te.sh)' "$work/err")"
check "... and writes nothing" no "$( [ -e "$work/dpa.h5" ] && echo yes || echo no)"

# 10. --te forms: a wheel file and the transformer_engine/ folder; a bad
# second --te is refused before any TE runs
"$here/fattn-te" run --te "$env_dir/te/${te_split}/transformer_engine" --filter 'layout.sb3hd*' -o "$work/f.h5" >/dev/null 2>&1
check "--te transformer_engine/ runs" 0 $?
"$fattn" diff "$work/ps.h5" "$work/f.h5" >/dev/null 2>&1
check "--te transformer_engine/ equals fattn split on layout.sb3hd" 0 $?
start=$(date +%s)
"$here/fattn-te" verify --te "$te_legacy" --te "$work/nothing-here" --keep "$work/k" >/dev/null 2>"$work/err"
check "a bad second --te: exit 2" 2 $?
check "... before any TE ran" no "$( [ -e "$work/k/te1.h5" ] && echo yes || echo no)"
check "... saying what --te takes" 1 "$(grep -c 'takes a TE release that tools/te/setup.sh unpacked .* a TE wheel file' "$work/err")"

# 11. libfattn is the one built with $FATTN, not the newest build*/
got=$(env -u FATTN_LIB PYTHONPATH="$here" "$env_dir/venv/bin/python" -c '
import os, sys
from fattn_te import cli
cli.use_library_of(sys.argv[1]); print(os.environ["FATTN_LIB"])' "$fattn" 2>&1)
check "libfattn from \$FATTN's build" "$(cd "$(dirname "$fattn")/.." && pwd -P)/lib/libfattn.so" "$got"

# 12. for CI: a TE checkout at two revisions (PATH@REV: exported, labelled
# by VERSION.txt and the short revision), the later one with a one-line bug
# in the backward's engine call; --json - names the engine-call argument
# with both values as the first cause; a second verify with --ref-cache
# reruns neither TE; --junit parses
mkdir -p "$work/revs/build_tools"
cp -R "$env_dir/te/$te_split/transformer_engine" "$work/revs/"
echo "$te_split.dev0" >"$work/revs/build_tools/VERSION.txt"
(cd "$work/revs" && git init -q && git add -A && git -c user.name=t -c user.email=t@t \
    commit -qm base) >/dev/null 2>&1
"$env_dir/venv/bin/python" - "$work/revs/$B" <<'PY' || echo "not ok - the window bug not made"
import re, sys
src = open(sys.argv[1]).read()
new, n = re.subn(r"(None,\n {20}args\.attn_bias_type,\n {20}args\.attn_mask_type,\n {20}"
                 r"args\.softmax_type,\n) {20}args\.window_size,",
                 r"\1                    (args.window_size[1], args.window_size[1]),", src, count=1)
assert n == 1
open(sys.argv[1], "w").write(new)
PY
(cd "$work/revs" && git -c user.name=t -c user.email=t@t commit -qam "window bug") >/dev/null 2>&1
r1=$(git -C "$work/revs" rev-parse --short HEAD~1) r2=$(git -C "$work/revs" rev-parse --short HEAD)
for run in 1 2; do
    "$here/fattn-te" verify --te "$work/revs@HEAD~1" --te "$work/revs@HEAD" \
        --filter 'layout.sb3hd.causal.f16' --ref-cache "$work/refs" --json - \
        --junit "$work/revs-$run.xml" >"$work/revs-$run.json" 2>"$work/revs-$run.err"
    check "PATH@REV window bug, run $run: exit 1" 1 $?
done
check "the first run ran both TEs, the second reused both" "0 2" \
    "$(grep -c 'reused from the reference cache' "$work/revs-1.err") $(grep -c 'reused from the reference cache' "$work/revs-2.err")"
check "PATH@REV labels and the first cause from --json" \
    "te-$te_split.dev0+$r1 te-$te_split.dev0+$r2 engine_call/backward|engine_call/backward@window_size_left: te-$te_split.dev0+$r1 -1, te-$te_split.dev0+$r2 0|inputs,engine_call/forward,forward,save_ctx" \
    "$(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = d["pairs"][0]["failing"]["layout.sb3hd.causal.f16"]["cause"]
print(d["te"][0]["label"], d["te"][1]["label"], "|".join([c["state"], c["first"][0], ",".join(c["equal_before"])]))
' "$work/revs-2.json" 2>&1)"
check "the reused run reports as the first" 1 "$(/usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(int([p["text"] for p in a["pairs"]] == [p["text"] for p in b["pairs"]]))' "$work/revs-1.json" "$work/revs-2.json" 2>&1)"
check "--junit: the failing case's testcase names the cause" 1 "$(/usr/bin/python3 -c '
import sys, xml.etree.ElementTree as ET
t = ET.parse(sys.argv[1]).getroot()
f = [c.find("failure") for c in t.iter("testcase") if c.find("failure") is not None]
print(int(len(f) == 2 and all("engine_call/backward@window_size_left" in x.get("message") for x in f)))' "$work/revs-2.xml" 2>&1)"

# 13. no temporary folder outlived any run above
check "no temporary folders left" "" "$(ls -A "$work/tmp" | tr '\n' ' ')"
exit $fail
