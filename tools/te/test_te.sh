#!/bin/sh
# meson test suite `te`: TE's own FusedAttnFunc (2.19.0 and 2.20.2) on the
# CPU engine against fattn's front ends. Skips (77) without the environment
# tools/te/setup.sh makes, or over a sanitizer-instrumented libfattn.
# Usage: test_te.sh FATTN LIBFATTN SANITIZE
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
counted() { # the paths of a fattn diff's counted differences, one a line
    grep -oE '^(different|missing in [AB]|structure): [^ ]+' "$1" | sed 's/^[^/]*//'
}
check() { # name, expected, got
    if [ "$2" = "$3" ]; then echo "ok - $1"; else echo "not ok - $1: expected [$2], got [$3]"; fail=1; fi
}

# 1. the whole default matrix, FP8 cases included: TE vs TE, and each vs
# fattn's front end.
"$here/fattn-te" verify --te 2.19.0 --te 2.20.2 --keep "$work/v" >"$work/verdict" 2>"$work/err"
rc=$?
cat "$work/verdict"
check "verify exit (the documented findings make it 1)" 1 "$rc"
# docs/te.md, Findings (F1 of docs/fp8-branches.md): return_max_logit with
# FP8 raises TypeError in 2.19.0 and returns None in 2.20.2; fattn refuses
# it; nothing else differs between the two releases
"$fattn" diff "$work/v/te1.h5" "$work/v/te2.h5" >"$work/diff" 2>&1
check "TE 2.19.0 -> TE 2.20.2: only refuse.fp8.max_logit differs (2.20.2 runs it)" \
    "24 0" "$(counted "$work/diff" | grep -c '^/cases/refuse\.fp8\.max_logit[/@]') $(counted "$work/diff" | grep -vc '^/cases/refuse\.fp8\.max_logit[/@]')"
check "TE's answers to fattn's refusals" 2 "$(grep -c '^te-2.19.0: refusals: 12 of 17 refused cases asked of TE (its C++ as the shim, its Python itself): 12 refused by TE too$\|^te-2.20.2: refusals: 12 of 17 refused cases asked of TE (its C++ as the shim, its Python itself): 11 refused by TE too; run by TE: refuse.fp8.max_logit$' "$work/verdict")"
check "TE 2.19.0's own exception for it is recorded" 1 "$(/usr/bin/python3 -c "
import json, sys
e = [x for x in json.load(open(sys.argv[1])) if x['case'] == 'refuse.fp8.max_logit'][0]
print(int(e['te'] == 'raised' and e['type'] == 'TypeError' and e['te_line'].endswith('dot_product_attention/backends.py:1751')))
" "$work/v/te1-refusals.json" 2>&1)"
check "the FP8 cases ran through TE's FP8 path" 1 "$(grep -c '^FP8: exercised (22 cases through TE' "$work/verdict")"
# docs/te.md, Findings: on the two padded max_logit cases TE's amax reads
# Max rows past each sequence's length; on the padded FP8 case TE
# dequantises the engine's unwritten rows with torch's NaN; every other
# counted object is bitwise fattn's.
for pair in "fattn-legacy $work/v/fattn-legacy.h5 $work/v/te1.h5" \
            "fattn-split $work/v/fattn-split.h5 $work/v/te2.h5"; do
    set -- $pair
    "$fattn" diff "$2" "$3" >"$work/diff" 2>&1
    got=$(counted "$work/diff" | grep -v '^/cases/refuse\.fp8\.max_logit[/@]' | sort | tr '\n' ' ')
    check "$1 vs TE: only the padded max_logit and FP8 NaN-payload findings" \
        "/cases/fp8.ds.bshd.padding_causal/backward/dk /cases/fp8.ds.bshd.padding_causal/backward/dq /cases/fp8.ds.bshd.padding_causal/backward/dv /cases/fp8.ds.bshd.padding_causal/forward/out /cases/max_logit.padding.short_seqlens.bf16/forward/max_logit /cases/max_logit.padding_causal.short_seqlens.f16/forward/max_logit " "$got"
    "$fattn" diff "$2" "$3" --only '/cases/fp8.ds.bshd.padding_causal/*' >"$work/diff" 2>&1
    check "$1 vs TE: the FP8 differences are NaN payloads only" 4 \
        "$(grep -c 'sign flips 0, class changes 0, NaN payloads' "$work/diff")"
done
check "verify lists the two differing paths under each fattn pair" 4 \
    "$(grep -c '^  /cases/max_logit.padding.*/forward/max_logit  different: 2 of 2 elements, 2 NaN/Inf vs finite$' "$work/verdict")"
"$env_dir/venv/bin/python" -W ignore "$here/check_verdict.py" "$fattn" "$work/v/te2.h5" \
    softmax.off_by_one.f16 "$work" || fail=1
"$fattn" inspect "$work/v/te1.h5" >/dev/null 2>&1
check "TE 2.19.0's run file is a valid fattn-run/1 file" 0 $?
check "impl te-2.19.0" 1 "$(/usr/bin/python3 -c "import h5py,sys; print(int(h5py.File(sys.argv[1])['/'].attrs['impl']=='te-2.19.0'))" "$work/v/te1.h5" 2>/dev/null)"

# 2. --te PATH: the unpacked wheel as a source directory
"$here/fattn-te" run --te "$env_dir/te/2.20.2" --filter 'layout.sb3hd*' -o "$work/p.h5" >/dev/null 2>"$work/err"
check "--te PATH runs" 0 $?
"$fattn" run --impl split --filter 'layout.sb3hd*' -o "$work/ps.h5" >/dev/null 2>&1
"$fattn" diff "$work/ps.h5" "$work/p.h5" >/dev/null 2>&1
check "--te PATH equals fattn split on layout.sb3hd" 0 $?

# 3. bad input: exit 2, nothing written
"$here/fattn-te" run --te /nonexistent -o "$work/bad.h5" 2>"$work/err"
check "--te on a missing directory exits 2" 2 $?
"$here/fattn-te" run --te 2.19.0 -o "$work/no/such/dir/x.h5" 2>"$work/err"
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
"$here/fattn-te" run --te 2.20.2 --cases "$work/fp8.json" -o "$work/fp8.h5" >/dev/null 2>"$work/err"
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
# the two fused_attn calls and TE's quantizers' cast, nothing else
got=$(PYTHONPATH="$here" "$env_dir/venv/bin/python" -W ignore -m fattn_te.discover \
    "$env_dir/te/2.20.2" --run 'fp8.*.outfp8' 2>/dev/null | cut -d' ' -f1 | tr '\n' ' ')
check "the FP8 path reaches fused_attn_fwd, fused_attn_bwd and quantize only" \
    "fused_attn_bwd fused_attn_fwd quantize " "$got"

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

# 7. a source tree: impl is te-<git describe>
mkdir -p "$work/src"
cp -R "$env_dir/te/2.20.2/transformer_engine" "$work/src/"
(cd "$work/src" && git init -q && git add -A && git -c user.name=t -c user.email=t@t \
    commit -qm tree && git tag v2.20.2-local) >/dev/null 2>&1
"$here/fattn-te" run --te "$work/src" --filter 'layout.sb3hd*' -o "$work/s.h5" >/dev/null 2>&1
check "--te on a git tree runs" 0 $?
check "impl te-<git describe>" te-v2.20.2-local "$(/usr/bin/python3 -c "import h5py,sys; v=h5py.File(sys.argv[1])['/'].attrs['impl']; print(v.decode() if isinstance(v, bytes) else v)" "$work/s.h5" 2>/dev/null)"
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
"$here/fattn-te" verify --te 2.20.2 --te "$work/src" --filter 'fp8.ds.*' >"$work/mut" 2>&1
check "the FP8 bug makes verify exit 1" 1 $?
check "the first verdict is no" 1 "$(grep -c '^te-2.20.2 -> te-v2.20.2-local-dirty: behavior-neutral: no' "$work/mut")"
check "it names the case and the quantizer" 1 "$(grep -c '^  /cases/fp8.ds.bshd/backward@dP_quantizer  ' "$work/mut")"

# 8. byte-reproducible with SOURCE_DATE_EPOCH, whatever the output path
mkdir -p "$work/r"
for o in "$work/r1.h5" "$work/r/r2.h5"; do
    SOURCE_DATE_EPOCH=1700000000 "$here/fattn-te" run --te 2.19.0 --filter 'dropout.*' -o "$o" >/dev/null 2>&1
done
cmp -s "$work/r1.h5" "$work/r/r2.h5"
check "two runs with SOURCE_DATE_EPOCH are byte-identical" 0 $?
exit $fail
