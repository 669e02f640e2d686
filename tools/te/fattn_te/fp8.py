"""FP8 cases through TE's own FusedAttnFunc: the quantizers, fp8_meta and
FP8 inputs handed to it as DotProductAttention / MultiheadAttention make
them (TE's own classes, with the harness's values), and the FP8 states
recorded as fattn's front ends record them (docs/fp8-branches.md "What
fattn runs today"): Float8Tensors as 1-byte datasets with `scale_inv`,
quantizers as "<recipe> <dtype> scale=%a amax=%a pow2=0|1 eps=%a"."""
import os

import numpy as np
import torch

from . import bridge, bridge_fp8

# get_attention_quantizers' slots (fused_attn.py:167-172): META_QKV,
# META_O, META_S in scaling_fwd; META_DO, META_DP, META_DQKV in scaling_bwd.
FWD_SLOTS = {"QKV": 2, "O": 3, "S": 8}
BWD_SLOTS = {"dO": 3, "dP": 5, "dQKV": 0}
# The harness's quantizer scales (harness/run/fe.c fh_fe_fp8_quantizers):
# QKV, O, S E4M3; dO, dP, dQKV E5M2; S and dP delayed under both recipes
# (DPA's [CS, DS] pair, DPA20:1207-1223).
SCALES = {"QKV": 16.0, "O": 32.0, "S": 256.0, "dO": 64.0, "dP": 512.0, "dQKV": 128.0}
# harness/model/inputs.c inputs_to_fp8: q, k, v's scales (k and v share q's for
# a packed qkv, v shares k's for a packed kv) and an FP8 d_out's
IN_SCALES = (32.0, 64.0, 16.0)
D_OUT_SCALE = 32.0

_DTYPE_NAME = {7: "float8_e4m3fn", 8: "float8_e5m2"}


def is_fp8_case(spec):
    return bool(spec.get("fp8"))


def hexf(x):
    """C's printf %a of a float promoted to double (glibc: no trailing
    zeros in the mantissa), as fh_ctx_quantizer_write formats."""
    x = float(np.float32(x))
    h = float.hex(x)
    if "p" not in h:
        return h
    m, e = h.split("p")
    if "." in m:
        m = m.rstrip("0").rstrip(".")
    return f"{m}p{e}"


def quantizer_string(q):
    k = bridge_fp8.kind(q)
    if k == "delayed":
        scale, amax = float(q.scale.reshape(-1)[0]), float(q.amax.reshape(-1)[0])
        pow2, eps = False, 0.0
    else:
        _, scale, amax = bridge_fp8.cs_state[id(q)]
        pow2, eps = bool(q.force_pow_2_scales), float(q.amax_epsilon)
    return (f"{k} {_DTYPE_NAME[int(q.dtype)]} scale={hexf(scale)} amax={hexf(amax)} "
            f"pow2={int(pow2)} eps={hexf(eps)}")


def _recipes(recipe):
    """The local recipes DPA keeps in fp8_meta (DPA20:1207-1223): the
    autocast recipe with fp8_dpa on; under current scaling a delayed one for
    S and dP after it."""
    from transformer_engine.common import recipe as r
    if recipe == "delayed":
        return [r.DelayedScaling(fp8_dpa=True)]
    if recipe == "current":
        return [r.Float8CurrentScaling(fp8_dpa=True), r.DelayedScaling(fp8_dpa=True)]
    if recipe == "mxfp8":
        return [r.MXFP8BlockScaling()]
    if recipe == "block":
        return [r.Float8BlockScaling()]
    raise ValueError(f"fp8 recipe {recipe!r}")


def _quantizer(kind, name):
    from transformer_engine.pytorch.tensor.float8_tensor import (
        Float8CurrentScalingQuantizer, Float8Quantizer)
    import transformer_engine_torch as tex
    dt = tex.DType.kFloat8E4M3 if name in ("QKV", "O", "S") else tex.DType.kFloat8E5M2
    if kind == "delayed":
        return Float8Quantizer(scale=torch.tensor([SCALES[name]], dtype=torch.float32),
                               amax=torch.zeros(1, dtype=torch.float32), fp8_dtype=dt)
    q = Float8CurrentScalingQuantizer(fp8_dtype=dt, device=torch.device("cpu"))
    # TE's current-scaling quantizer holds no scale or amax; fattn's front
    # ends record one, starting from the harness's table (docs/te.md).
    bridge_fp8.cs_state[id(q)] = [q, SCALES[name], 0.0]
    return q


def _other(kind):
    """A quantizer for a slot FusedAttnFunc does not read."""
    return _quantizer(kind, "QKV")


def make_quantizers(spec):
    """quantizers = {"scaling_fwd": 9, "scaling_bwd": 6} as DPA builds them
    (DPA19:974-1101, 1229-1302): delayed: all Float8Quantizer; current:
    forward 0-5 and backward 0-3 current, the rest (S, dP) delayed.
    MXFP8 and block-scaling cases get TE's own quantizers of that kind
    from TE's recipe states, so that TE's own checks meet them."""
    recipe = spec["fp8"]["recipe"]
    if recipe in ("mxfp8", "block"):
        from transformer_engine.pytorch.quantization import RecipeState
        rs = _recipes(recipe)[0]
        fwd = RecipeState.create(rs, mode="forward", num_quantizers=9).make_quantizers()
        bwd = RecipeState.create(rs, mode="backward", num_quantizers=6).make_quantizers()
        return {"scaling_fwd": fwd, "scaling_bwd": bwd}
    bridge_fp8.cs_state.clear()
    fwd, bwd = [], []
    for i in range(9):
        name = next((n for n, s in FWD_SLOTS.items() if s == i), None)
        k = "delayed" if recipe == "delayed" or i >= 6 else "current"
        fwd.append(_quantizer(k, name) if name else _other(k))
    for i in range(6):
        name = next((n for n, s in BWD_SLOTS.items() if s == i), None)
        k = "delayed" if recipe == "delayed" or i >= 4 else "current"
        bwd.append(_quantizer(k, name) if name else _other(k))
    return {"scaling_fwd": fwd, "scaling_bwd": bwd}


def module_meta(spec, local_recipes):
    """fp8_meta as DotProductAttention.init_fp8_metadata leaves it for the
    forward (DPA20:1259-1283): the autocast recipe as global_recipe, the
    local recipes, and as "recipe" the one DPA's FP8 attention runs (the
    delayed recipe that scales S and dP; the only one under delayed
    scaling), fp8_checkpoint on."""
    return {"global_recipe": local_recipes[0], "local_recipes": local_recipes,
            "recipe": local_recipes[-1], "fp8_checkpoint": True}


def func_args(spec):
    """The FP8 arguments FusedAttention passes (L:2327-2364, S:2585-2622)."""
    f = spec["fp8"]
    rs = _recipes(f["recipe"])
    return {"fp8": True, "fp8_meta": module_meta(spec, rs),
            "quantizers": make_quantizers(spec), "fp8_output": bool(f.get("output_fp8")),
            "bf16_backward": bool(f.get("bf16_backward"))}


def set_env(backends, spec):
    """The two knobs as TE reads them: NVTE_FP8_DPA_BWD per forward
    (L:1467, S:1625), NVTE_DPA_FP8CS_O_in_F16 once at import (L:219,
    S:234), so the module's value is set for the case."""
    f = spec.get("fp8") or {}
    os.environ["NVTE_FP8_DPA_BWD"] = "1" if f.get("dpa_bwd", True) else "0"
    backends._dpa_fp8_cs_o_in_f16 = bool(f.get("o_in_f16", True))


def float8_input(codes, scale_inv, nominal, fp8_dtype):
    """A Float8Tensor from the harness's codes, made by TE's own
    Float8Quantizer.create_tensor_from_data (scale_inv = 1/scale)."""
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer
    q = Float8Quantizer(scale=torch.tensor([1.0 / scale_inv], dtype=torch.float32),
                        amax=torch.zeros(1, dtype=torch.float32), fp8_dtype=fp8_dtype)
    return q.create_tensor_from_data(codes.view(torch.uint8), fake_dtype=nominal,
                                     requires_grad=True)


def _packed_codes(codes, group):
    """The codes as DPA hands a packed layout over: q, k, v (3hd/h3d) or k,
    v (2hd/h2d) views into one buffer, stacked at the pack dimension
    (combine_tensors, pytorch/utils.py, rebuilds the buffer from them)."""
    def pack(names, at):
        buf = torch.stack([codes[n] for n in names], dim=at)
        for i, n in enumerate(names):
            codes[n] = buf.select(at, i)
    nd = codes["q"].dim()
    if group in ("3hd", "h3d"):
        pack(["q", "k", "v"], nd - 2 if group == "3hd" else nd - 1)
    elif group in ("hd_2hd", "hd_h2d"):
        pack(["k", "v"], nd - 2 if group == "hd_2hd" else nd - 1)


def build_inputs(res, inputs, t):
    """FP8 q, k, v (and d_out) as the run file holds them: 1-byte datasets
    with scale_inv; TE gets them as Float8Tensors of the case's dtype."""
    import transformer_engine_torch as tex
    spec = res["spec"]
    nominal = {"bfloat16": torch.bfloat16, "float16": torch.float16}[spec["dtype"]]
    codes, meta = {}, {}
    for n in ("q", "k", "v", "d_out"):
        ds = inputs["children"].get(n)
        if ds is None or not ds["dtype"].startswith("float8"):
            continue
        si = next(float(v) for a, v, _ in ds["attrs"] if a == "scale_inv")
        fdt = tex.DType.kFloat8E4M3 if ds["dtype"] == "float8_e4m3fn" else tex.DType.kFloat8E5M2
        codes[n] = torch.from_numpy(np.ascontiguousarray(ds["data"]).copy())
        meta[n] = (si, fdt)
    if "q" in codes:
        _packed_codes(codes, res["layout_group"])
    for n, c in codes.items():
        t[n] = float8_input(c, meta[n][0], nominal, meta[n][1])
    return t


def dataset(t, scale_inv=True):
    """A Float8Tensor as fattn records one: its codes, 1 byte each, and
    (unless the record keeps it elsewhere) its scale_inv."""
    data = t._data.detach().contiguous().cpu().numpy().view(np.uint8)
    attrs = []
    if scale_inv:
        attrs = [("scale_inv", np.float32(t._scale_inv.reshape(-1)[0]), np.dtype("float32"))]
    return {"attrs": attrs, "data": np.ascontiguousarray(data),
            "dtype": _DTYPE_NAME[int(t._fp8_dtype)]}


def quantizer_attrs(src, names):
    """The quantizers of the ctx (or its backward_objects) by TE's names."""
    out = []
    for n in names:
        q = getattr(src, n, None)
        if q is not None:
            out.append((n, quantizer_string(q), None))
    return out


CTX_QUANTIZERS = ["QKV_quantizer", "O_quantizer", "dQKV_quantizer", "dO_quantizer",
                  "dP_quantizer", "S_quantizer"]
BWD_QUANTIZERS = ["dO_quantizer", "dP_quantizer", "dQKV_quantizer"]


def is_float8(t):
    return bridge.is_float8(t)
