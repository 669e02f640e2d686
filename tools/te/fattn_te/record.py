"""Run TE's FusedAttnFunc for each case of a matrix, as FusedAttention
calls it, and record TE's own states as a fattn-run/1 tree."""
import inspect
import os
import sys

import numpy as np
import torch

from . import blame, bridge, fp8, loader, modes
from .blame import CaseError  # noqa: F401  (record.CaseError, as callers name it)

_STORAGE_TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                  "float32": torch.float32, "int32": torch.int32, "int64": torch.int64,
                  "uint8": torch.uint8}
_TORCH_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8"}

# save_ctx roles in TE's saved order: the 12 fixed entries of both releases
# (2.19.0 backends.py:1677-1685, 2.20.2 FusedAttnBwdArgs.setup_saved_tensors
# backends.py:1545-1566), then the aux slots.
FIXED_ROLES = ["q_fp8", "k_fp8", "v_fp8", "out_fp8", "q", "k", "v", "out", "cu_seqlens_q",
               "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"]
AUX_ROLES = ["softmax_stats", "rng_state", "aux_bias", "aux_softmax_offset"]

# The backward-read set, by TE's ctx attribute names (harness/run/ctx_fields.h):
# (name, kind); OPT ones are absent when None.
CTX_FIELDS = [
    ("fp8", "bool"), ("nominal_dtype", "dtype"), ("is_input_fp8", "bool"),
    ("bf16_backward", "bool"), ("layer_number", "int"),
    ("QKV_quantizer", "none"), ("O_quantizer", "none"), ("dQKV_quantizer", "none"),
    ("dO_quantizer", "none"), ("dP_quantizer", "none"), ("S_quantizer", "none"),
    ("qkv_type", "optstr"), ("max_seqlen_q", "int"), ("max_seqlen_kv", "int"),
    ("attn_scale", "optfloat"), ("dropout_p", "float"), ("fast_zero_fill", "bool"),
    ("qkv_layout", "str"), ("o_format", "str"), ("qkv_scale_inv_format", "optstr"),
    ("dqkv_layout", "str"), ("attn_bias_type", "str"), ("attn_mask_type", "str"),
    ("softmax_type", "str"), ("window_size", "pair"), ("bottom_right_diagonal", "optbool"),
    ("fused_attention_backend", "backend"), ("use_FAv2_bwd", "bool"),
    ("deterministic", "bool")]


def is_refactored(backends):
    """The merged refactor (2.20.2) has the args bags; the monolith (2.19.0) not."""
    return hasattr(backends, "FusedAttnFwdArgs")


def to_torch(ds):
    data = np.ascontiguousarray(ds["data"])
    if ds["dtype"] == "bfloat16":
        return torch.from_numpy(data.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(data.copy())


def dataset(t):
    if fp8.is_float8(t):  # 1-byte codes with scale_inv (fattn_te/fp8.py)
        return fp8.dataset(t)
    t = t.detach().contiguous().cpu()
    name = _TORCH_NAME.get(t.dtype)
    if name is None:
        raise CaseError(f"TE gave the recorder a tensor of dtype {t.dtype}, which no "
                        f"run-file dtype holds")
    if name == "bfloat16":
        data = t.view(torch.int16).numpy().view(np.uint16)
    else:
        data = t.numpy()
    return {"attrs": [], "data": np.ascontiguousarray(data), "dtype": name}


def group(attrs=None, children=None):
    return {"attrs": sorted(attrs or [], key=lambda a: a[0]), "children": children or {}}


def put(children, name, t):
    if t is not None:
        children[name] = dataset(t)


def _pack(tensors, at):
    buf = torch.stack([t.detach() for t in tensors], dim=at)
    buf.requires_grad_(True)
    return [buf.select(at, i) for i in range(len(tensors))]


def build_inputs(res, inputs):
    """TE's q, k, v as DotProductAttention hands them over: views into one
    buffer for the packed layouts (layout group 3hd/h3d: q, k, v; 2hd/h2d:
    k, v), separate tensors otherwise; all of them requiring grad."""
    t = {n: to_torch(ds) for n, ds in inputs["children"].items()
         if not ds["dtype"].startswith("float8")}
    if "q" not in t:  # FP8 inputs: TE's Float8Tensors (fattn_te/fp8.py)
        return fp8.build_inputs(res, inputs, t)
    q, k, v = t["q"], t["k"], t["v"]
    grp = res["layout_group"]
    if grp in ("3hd", "h3d"):
        q, k, v = _pack([q, k, v], q.dim() - 2 if grp == "3hd" else q.dim() - 1)
    elif grp in ("hd_2hd", "hd_h2d"):
        q = q.requires_grad_(True)
        k, v = _pack([k, v], k.dim() - 2 if grp == "hd_2hd" else k.dim() - 1)
    else:
        q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    t["q"], t["k"], t["v"] = q, k, v
    for n in ("attn_bias", "softmax_offset"):
        if n in t:
            t[n].requires_grad_(True)
    if fp8.is_fp8_case(res["spec"]) and "d_out" in inputs["children"]:
        fp8.build_inputs(res, inputs, t)  # an FP8 d_out with f16 q, k, v
    return t


def func_args(te, res, t, gen):
    """FusedAttnFunc's arguments by name, as FusedAttention passes them on
    the f16 path (the values fattn's front ends get: harness/run/fe_legacy.c)."""
    spec = res["spec"]
    from transformer_engine.pytorch.cpp_extensions.fused_attn import FusedAttnBackend
    args = {
        "is_training": bool(spec["is_training"]),
        "max_seqlen_q": spec["sq"], "max_seqlen_kv": spec["skv"],
        "cu_seqlens_q": t.get("cu_seqlens_q"), "cu_seqlens_kv": t.get("cu_seqlens_kv"),
        "cu_seqlens_q_padded": t.get("cu_seqlens_q_padded"),
        "cu_seqlens_kv_padded": t.get("cu_seqlens_kv_padded"),
        # FusedAttention passes the cache's page table (twice) for a paged case
        "page_table_k": t.get("page_table_k"), "page_table_v": t.get("page_table_v"),
        "q": t["q"], "k": t["k"], "v": t["v"], "attn_bias": t.get("attn_bias"),
        "attn_scale": res["attn_scale_arg"], "dropout_p": res["dropout_p"],
        "fast_zero_fill": bool(spec["fast_zero_fill"]), "qkv_layout": spec["layout"],
        "attn_bias_type": spec["bias"], "attn_mask_type": spec["mask"],
        "softmax_type": spec["softmax"], "window_size": tuple(res["window"]),
        "bottom_right_diagonal": res["bottom_right_diagonal_arg"], "rng_gen": gen,
        "fused_attention_backend": FusedAttnBackend["F16_arbitrary_seqlen"],
        "use_FAv2_bwd": False, "fp8": False, "fp8_meta": None, "quantizers": None,
        "deterministic": bool(spec["deterministic"]),
        "softmax_offset": t.get("softmax_offset"), "fp8_output": False,
        "bf16_backward": False, "layer_number": 1,
        "return_max_logit": bool(spec["return_max_logit"]),
        "packed_qkv": None, "packed_kv": None,
    }
    if fp8.is_fp8_case(spec):  # the FP8 path's arguments (fattn_te/fp8.py)
        args.update(fp8.func_args(spec))
        args["fused_attention_backend"] = FusedAttnBackend["FP8"]
    return args


def call_forward(backends, args):
    """FusedAttnFunc.apply: positional in the monolith, five tensors and the
    args bag in the refactor. Returns (out, max_logit, names of the
    differentiable inputs in apply's order)."""
    F = backends.FusedAttnFunc
    params = list(inspect.signature(F.forward).parameters)[1:]
    if is_refactored(backends):
        import dataclasses
        fields = {f.name for f in dataclasses.fields(backends.FusedAttnFwdArgs)}
        fwd_args = backends.FusedAttnFwdArgs(**{n: v for n, v in args.items() if n in fields})
        pos = [args[n] if n != "fwd_args" else fwd_args for n in params]
    else:
        pos = [args[n] for n in params]
    res = F.apply(*pos)
    if args["return_max_logit"]:
        out, max_logit = res
    else:
        out, max_logit = res, None
    return out, max_logit, params


def _attr(name, kind, value):
    if kind == "none":  # a quantizer: None on the f16 path
        return None if value is None else (name, fp8.quantizer_string(value), None)
    if value is None:
        if kind.startswith("opt"):
            return None
        raise CaseError(f"TE's ctx for backward: {name} is None (backward reads it)")
    if kind in ("str", "optstr"):
        return (name, str(value), None)
    if kind in ("bool", "optbool"):
        return (name, np.uint8(bool(value)), np.dtype("uint8"))
    if kind == "int":
        return (name, np.int64(value), np.dtype("int64"))
    if kind in ("float", "optfloat"):
        return (name, np.float32(value), np.dtype("float32"))
    if kind == "pair":
        return (name, np.array([int(value[0]), int(value[1])], dtype=np.int64),
                np.dtype("int64"))
    if kind == "dtype":
        return (name, _TORCH_NAME[value], None)
    if kind == "backend":
        from transformer_engine.pytorch.cpp_extensions.fused_attn import FusedAttnBackend
        return (name, FusedAttnBackend.cast(value).name, None)
    raise AssertionError(kind)


def save_ctx_state(backends, ctx, saved_tensors=None):
    """save_ctx: the saved tensors by role (restored without consuming the
    ctx, with TE's own restore_from_saved) and the backward-read set, read
    from the ctx (monolith) or its backward_objects (refactor).
    saved_tensors: what the forward handed ctx.save_for_backward when
    autograd kept none (a forward under no_grad or inference_mode)."""
    from transformer_engine.pytorch.quantized_tensor import restore_from_saved
    if saved_tensors is None:
        saved_tensors = ctx.saved_tensors
    saved = list(restore_from_saved(ctx.tensor_objects, saved_tensors))
    src = ctx.backward_objects if is_refactored(backends) else ctx
    children = {}
    for role, t in zip(FIXED_ROLES, saved[:12]):
        put(children, role, t)
    aux = saved[12:]
    if is_refactored(backends):
        slots = aux
    else:  # the monolith's aux list [Stats, rng_state, (Bias), (Offset)]
        slots = [aux[0], aux[1], None, None]
        i = 2
        if src.attn_bias_type in ("pre_scale_bias", "post_scale_bias"):
            slots[2] = aux[i]
            i += 1
        if src.softmax_type != "vanilla":
            slots[3] = aux[i]
            i += 1
        if i != len(aux):
            raise CaseError(f"TE's ctx for backward holds {len(aux)} aux tensors; its bias "
                            f"and softmax types need {i}")
    for role, t in zip(AUX_ROLES, slots):
        put(children, role, t)
    attrs = [a for a in (_attr(n, k, getattr(src, n)) for n, k in CTX_FIELDS) if a]
    return group(attrs, children)


def synth_inputs(res):
    """Inputs for a case fattn refused (fattn's run makes none): the
    resolved shapes and dtypes, values from a torch generator seeded with
    the case's seed, cu_seqlens as resolved. Whether TE raises is what
    such a case shows; its values need only repeat run to run."""
    g = torch.Generator().manual_seed(int(res["spec"]["seed"]))
    children = {}
    for name in ("q", "k", "v", "attn_bias", "softmax_offset", "d_out"):
        t = res["tensors"].get(name)
        if t is not None:
            x = torch.rand(t["shape"], generator=g, dtype=torch.float32) - 0.5
            children[name] = dataset(x.to(_STORAGE_TORCH[t["dtype"]]))
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        if res.get(name) is not None:
            children[name] = dataset(torch.tensor(res[name], dtype=torch.int32))
    return {"children": {"inputs": group([], children)}}


def te_raised_where(exc):
    """The TE line an exception left TE's code from: the innermost frame
    in transformer_engine/ (else the innermost frame)."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    te = [f for f in frames if "/transformer_engine/" in f.filename]
    f = (te or frames)[-1] if (te or frames) else None
    if f is None:
        return "?"
    name = f.filename.split("/transformer_engine/", 1)[-1]
    return f"transformer_engine/{name}:{f.lineno}" if te else f"{name}:{f.lineno}"


def case_path(res, path):
    """How a case is called (docs/te.md, "How a case runs"): "dpa" (TE's
    DotProductAttention, --call dpa), "module" (TE's FusedAttention, the
    default) or "function" (FusedAttnFunc.apply directly); under --call dpa
    a case DPA cannot be given (dpa.not_through_dpa says why) goes the
    module's way, and the module's unless FusedAttention cannot express the
    case (module.not_expressed says why)."""
    from . import dpa, module
    if path == "dpa" and not dpa.not_through_dpa(res):
        return "dpa"
    return "function" if path == "function" or module.not_expressed(res) else "module"


def run_case(backends, res, ref_case, path="module"):
    spec = res["spec"]
    inputs = ref_case["children"]["inputs"]
    t = build_inputs(res, inputs)
    gen = bridge.PhiloxGen(spec["rng_seed"], spec["rng_offset"])
    bridge.last_forward = None
    fp8.set_env(backends, spec)
    bridge.last_inputs = None
    # the grad mode the forward runs under (modes.py); without a graph the
    # ctx and what it was handed to save are captured as the forward runs
    cap = modes.CtxCapture(backends.FusedAttnFunc)
    with cap, modes.context(spec):
        how = case_path(res, path)
        if how == "dpa":
            from . import dpa
            bridge.default_gen = gen  # DPA's FusedAttention passes rng_gen=None too
            try:
                out, max_logit, ctx, grad_root = dpa.call_dpa(backends, res, t)
            finally:
                bridge.default_gen = None
        elif how == "module":
            from . import module
            # FusedAttention passes rng_gen=None: the engine takes the default
            # generator, seeded per case as fattn's front ends seed theirs.
            bridge.default_gen = gen
            try:
                out, max_logit, ctx, grad_root = module.call_module(backends, res, t)
            finally:
                bridge.default_gen = None
        else:
            args = func_args(backends, res, t, gen)
            out, max_logit, _ = call_forward(backends, args)
            ctx, grad_root = out.grad_fn, out
    graphless = modes.grad_mode(spec) is not None
    if graphless:
        ctx = cap.ctx
    if ctx is None:
        raise CaseError("TE's FusedAttention returned an output with no FusedAttnFunc "
                        "node below it")
    fwd_pack = bridge.last_forward
    recorded = dict(t)
    if spec.get("max_batch_size") and bridge.last_inputs:
        # TE's InferenceParams made the cache, the table and the lengths:
        # the inputs are what TE handed the engine
        recorded.update({n: x for n, x in bridge.last_inputs.items() if x is not None})
    node = {"inputs": group([], {n: dataset(x) for n, x in recorded.items()})}
    aux = {}
    # the aux pack as tex.fused_attn_fwd returned it: [O, Stats, (Max),
    # rng_state, (Bias), (SoftmaxOffset)]; Max became max_logit
    if not fwd_pack:
        raise CaseError("TE's FusedAttnFunc.forward never called fused_attn_fwd")
    stats = fwd_pack[1]
    if (max_logit is not None) != bool(bridge.last_forward_max):
        raise CaseError(f"TE's FusedAttention returned {'a' if max_logit is not None else 'no'} "
                        f"max_logit, but asked fused_attn_fwd for "
                        f"{'it' if bridge.last_forward_max else 'none'}")
    after = 3 if max_logit is not None else 2
    rng_state, rest = fwd_pack[after], list(fwd_pack[after + 1:])
    put(aux, "softmax_stats", stats)
    put(aux, "rng_state", rng_state)
    if spec["bias"] in ("pre_scale_bias", "post_scale_bias"):
        put(aux, "aux_bias", rest.pop(0))
    if spec["softmax"] != "vanilla":
        put(aux, "aux_softmax_offset", rest.pop(0))
    fchildren = {"aux": group([], aux)}
    fattrs = [("rng_gen_offset", np.int64(gen.offset), np.dtype("int64")),
              ("rng_gen_seed", np.int64(gen.seed), np.dtype("int64"))]
    if fp8.is_float8(out):  # fp8_output: the scale_inv is forward's attribute
        fchildren["out"] = fp8.dataset(out, scale_inv=False)
        fattrs.append(("out_scale_inv", np.float32(out._scale_inv.reshape(-1)[0]),
                       np.dtype("float32")))
    else:
        put(fchildren, "out", out)
    put(fchildren, "max_logit", max_logit)
    node["forward"] = group(fattrs, fchildren)
    if graphless and cap.saved is None:
        raise CaseError("TE's FusedAttnFunc.forward saved nothing for backward")
    node["save_ctx"] = save_ctx_state(backends, ctx, cap.saved if graphless else None)
    if modes.has_backward(spec):
        src = ctx.backward_objects if is_refactored(backends) else ctx
        fp8_bwd = bool(getattr(src, "fp8", False))
        # PyTorch's autograd runs TE's backward as training does (its checks:
        # the count of grads, None for a non-differentiable input, each
        # grad's shape against its input); the grads are what it hands back
        # for q, k, v, attn_bias and softmax_offset.
        roles = [(n, r) for n, r in (("q", "dq"), ("k", "dk"), ("v", "dv"),
                                     ("attn_bias", "d_bias"),
                                     ("softmax_offset", "d_softmax_offset"))
                 if t.get(n) is not None]
        d_out = t["d_out"]  # an FP8 d_out stays TE's Float8Tensor unless reshaped
        if list(d_out.shape) != list(grad_root.shape):
            d_out = d_out.reshape(grad_root.shape)
        with blame.BackwardReturn(backends.FusedAttnFunc) as blame.last_backward:
            grads = torch.autograd.grad([grad_root], [t[n] for n, _ in roles], [d_out],
                                        allow_unused=True)
        bchildren = {}
        for (_, role), g in zip(roles, grads):
            put(bchildren, role, g)
        # the amaxes an FP8 backward wrote, in the quantizers it was handed
        battrs = fp8.quantizer_attrs(src, fp8.BWD_QUANTIZERS) if fp8_bwd else []
        node["backward"] = group(battrs, bchildren)
    return node
