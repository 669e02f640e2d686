"""A case's schedule through TE's own code (docs/te.md "Schedules";
docs/cases.md "Schedules"): the steps in order, each recorded under
steps/<k>/ as fattn's harness records it, with what TE keeps between them
kept by TE:

- one FusedAttention for the whole schedule (module.make_module), called
  for each forward as DotProductAttention calls it;
- FP8 with the delayed recipe: a DotProductAttention (TE's
  TransformerEngineBaseModule) whose fp8_meta holds two
  DelayedScalingRecipeStates (TE's class) and whose quantizers (TE's
  make_quantizers: views of the states) every forward is handed, as DPA
  hands its own; U is FP8GlobalStateManager.reduce_and_update_fp8_tensors
  (TE's, after add_fp8_tensors_to_global_buffer as DPA's prepare_forward
  registers its state, module/base.py:1632), whose C++ update the shim runs
  on libfattn (bridge_state.py); X is DPA's own get_extra_state and
  set_extra_state (module/base.py:1354-1457) on the same module;
- cache steps: TE's own InferenceParams (pre_step, then the step
  DotProductAttention takes, dot_product_attention.py 2.20.2:2532-2569),
  on the host as kvcache.py puts it (its copy_to_kv_cache the shim's,
  bridge_kv.py, on libfattn), and FusedAttention handed the cache and the
  InferenceParams.

The inputs are fattn's of each step (its run file); a cache step's new K
and V are read from the cache fattn recorded after it (the rows each
sequence gained), and TE writes them into TE's own cache, which is what is
recorded: so a difference in where TE keeps a token shows in k, v and the
page table.
"""
import contextlib
import io
import os
import pickle
from collections import OrderedDict

import numpy as np
import torch

from . import bridge, engine_calls, fp8, kvcache, modes, module, record

FWD_N, BWD_N = 9, 6  # DotProductAttention's num_gemms 3 (dot_product_attention.py 2.20.2:1364)


@contextlib.contextmanager
def on_host():
    """What TE's module code asks of CUDA, made host calls on the CPU engine
    (docs/te.md, "Schedules"): is_available (the base module's constructor,
    module/base.py:895) and synchronize (get/set_extra_state, :1412, :1456)."""
    if bridge.engine().device != "cpu":
        yield
        return
    saved = (torch.cuda.is_available, torch.cuda.synchronize)
    torch.cuda.is_available = lambda: True
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        yield
    finally:
        torch.cuda.is_available, torch.cuda.synchronize = saved


def cache_host():
    """InferenceParams on the host on either engine, as kvcache.py keeps
    it (its buffers on the CPU, TE's copy_to_kv_cache op with a CPU kernel
    of its own body; the cuDNN engine uploads what it is handed)."""
    return kvcache.host()


class Fp8Module:
    """DotProductAttention's FP8 state for a delayed-scaling case: the
    recipe from the spec's fp8 object, its two recipe states on the host
    with the harness's scales for the six attention quantizers (fp8.SCALES;
    TE starts them at 1), the quantizers made from them, registered with
    FP8GlobalStateManager as an autocast of that recipe would register
    them."""

    def __init__(self, res):
        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe as R
        from transformer_engine.pytorch.quantization import (
            DelayedScalingRecipeState, FP8GlobalStateManager)
        spec, f = res["spec"], res["spec"]["fp8"]
        self.recipe = R.DelayedScaling(
            margin=int(f.get("margin", 0)), fp8_format=R.Format.HYBRID,
            amax_history_len=int(f.get("amax_history_len", 1024)),
            amax_compute_algo=f.get("amax_compute_algo", "max"), fp8_dpa=True)
        with on_host():
            self.dpa = te.DotProductAttention(
                num_attention_heads=spec["h"], kv_channels=(spec["d_qk"], spec["d_v"]),
                num_gqa_groups=spec["hg"], layer_number=1)
        cpu = torch.device("cpu")
        fwd = DelayedScalingRecipeState(self.recipe, mode="forward", num_quantizers=FWD_N,
                                        device=cpu)
        bwd = DelayedScalingRecipeState(self.recipe, mode="backward", num_quantizers=BWD_N,
                                        device=cpu)
        for name, i in fp8.FWD_SLOTS.items():
            fwd.scale[i] = fp8.SCALES[name]
        for name, i in fp8.BWD_SLOTS.items():
            bwd.scale[i] = fp8.SCALES[name]
        d = self.dpa
        d.fp8_meta.update({"recipe": self.recipe, "scaling_fwd": fwd, "scaling_bwd": bwd,
                           "local_recipes": [self.recipe], "num_gemms": 3,
                           "fp8_checkpoint": True})
        d.quantizers = {"scaling_fwd": fwd.make_quantizers(),
                        "scaling_bwd": bwd.make_quantizers()}
        d.fp8, d.fp8_initialized, d.fp8_meta_tensors_initialized = True, True, True
        FP8GlobalStateManager.reset()
        key = FP8GlobalStateManager.get_unique_autocast_key(self.recipe, None)
        FP8GlobalStateManager.quantization_state.autocast_arguments[key] = (self.recipe, None)
        FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(d.fp8_meta)

    def args(self, spec):
        """The FP8 arguments DPA passes FusedAttention (:3021-3059): its
        fp8_meta and its quantizers, the same objects every forward."""
        f = spec["fp8"]
        return {"fp8": True, "fp8_meta": self.dpa.fp8_meta, "quantizers": self.dpa.quantizers,
                "fp8_output": bool(f.get("output_fp8")),
                "bf16_backward": bool(f.get("bf16_backward"))}

    def state_group(self, recipe=None):
        """The state (or a checkpoint's) as fattn records it: four float32
        arrays."""
        src = recipe or {"scale_fwd": self.dpa.fp8_meta["scaling_fwd"].scale,
                         "amax_history_fwd": self.dpa.fp8_meta["scaling_fwd"].amax_history,
                         "scale_bwd": self.dpa.fp8_meta["scaling_bwd"].scale,
                         "amax_history_bwd": self.dpa.fp8_meta["scaling_bwd"].amax_history}
        return {n: record.dataset(src[n].detach().float()) for n in
                ("scale_fwd", "amax_history_fwd", "scale_bwd", "amax_history_bwd")}

    def update(self, which):
        """U: TE's reduce_and_update_fp8_tensors for the directions asked."""
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager
        if which in ("backward", "both"):
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        if which in ("forward", "both"):
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=True)
        return {"recipe": record.group([], self.state_group())}

    def extra_state(self):
        """X: DPA's get_extra_state, recorded as it serialised it, then its
        set_extra_state of that on the same module. TE refuses to unpickle a
        delayed-scaling checkpoint unless NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE
        is 1 (_extra_state.py); this one is fattn-te's own, made just now."""
        with on_host():
            blob = self.dpa.get_extra_state()
        state = pickle.load(io.BytesIO(blob.numpy().tobytes()))
        rec = state["recipe"]
        attrs = [("amax_compute_algo", str(rec.amax_compute_algo), None),
                 ("amax_history_len", np.int64(rec.amax_history_len), np.dtype("int64")),
                 ("fp8_format", rec.fp8_format.name, None),
                 ("margin", np.int64(rec.margin), np.dtype("int64"))]
        group = record.group(attrs, self.state_group(state))
        old = os.environ.get("NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE")
        os.environ["NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE"] = "1"
        try:
            with on_host():
                self.dpa.set_extra_state(blob)
        finally:
            if old is None:
                del os.environ["NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE"]
            else:
                os.environ["NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE"] = old
        return {"extra_state": group}


def _forward_of(steps, k):
    """The step (1-based) of the forward a B at step k ends."""
    mb = steps[k - 1]["B"]
    return next(f for f in range(k - 1, 0, -1) if steps[f - 1].get("F") == mb)


def run(backends, res, ref_case, path="module"):
    """Every step of the case's schedule; the case group's children."""
    spec, steps = res["spec"], res["spec"]["schedule"]
    ref = ref_case["children"]["steps"]["children"]
    gen = bridge.PhiloxGen(spec["rng_seed"], spec["rng_offset"])
    if "step" in steps[0]:
        return {"steps": record.group([], _cache_steps(backends, res, ref, gen))}
    mod = module.make_module(backends, res)
    f8mod = None
    if fp8.is_fp8_case(spec) and spec["fp8"]["recipe"] == "delayed":
        f8mod = Fp8Module(res)
    elif fp8.is_fp8_case(spec):
        f8 = fp8.func_args(spec)  # one set of quantizers for every forward
    out, live = {}, {}
    try:
        for k, step in enumerate(steps, 1):
            name = str(k)
            try:
                if "F" in step:
                    rk = res["steps"][k - 1]
                    args = f8mod.args(spec) if f8mod else (f8 if fp8.is_fp8_case(spec) else None)
                    node, lv = record.forward_call(backends, rk, ref[name]["children"]["inputs"],
                                                   gen, path, f8=args, mod=mod)
                    if modes.has_backward(spec):  # else its ctx ends with it
                        live[step["F"]] = (lv, rk)
                elif "B" in step:
                    lv, rk = live.pop(step["B"])
                    node = {"save_ctx": record.save_ctx_state(backends, lv[0])}
                    record.backward_call(backends, lv, node)
                elif "U" in step:
                    node = f8mod.update(step["U"])
                else:
                    node = f8mod.extra_state()
            except record.CaseError as e:
                raise record.CaseError(f"step {k}: {e}") from e
            out[name] = record.group([], node)
    finally:
        if f8mod is not None:
            from transformer_engine.pytorch.quantization import FP8GlobalStateManager
            FP8GlobalStateManager.reset()
    return {"steps": record.group([], out)}


def _torch(ds):
    return record.to_torch(ds)


def _new_tokens(rk, inp, pairs, name):
    """The step's new K or V in q's format: each sequence's rows the cache
    fattn recorded gained in this step (its last `new` positions), as
    DotProductAttention hands them to InferenceParams.step; rows past a
    sequence's new length zero (never copied)."""
    cache = _torch(inp["children"][name])
    cu = _torch(inp["children"]["cu_seqlens_kv"]).tolist()
    table = _torch(inp["children"]["page_table_k"]) if "page_table_k" in inp["children"] else None
    spec, fmt = rk["spec"], rk["q_format"]
    page = spec["paged"]["page_size"] if table is not None else None
    rows = []
    for j, (_, new) in enumerate(pairs):
        n_kv = cu[j + 1] - cu[j]
        pos = range(n_kv - new, n_kv)
        if table is None:
            rows.append(torch.stack([cache[j, p] for p in pos]))
        else:
            rows.append(torch.stack([cache[int(table[j, p // page]), p % page] for p in pos]))
    if fmt == "thd":
        return torch.cat(rows).contiguous()
    sq = spec["sq"]
    shape = (len(pairs), sq) + tuple(cache.shape[2:])
    full = torch.zeros(shape, dtype=cache.dtype)
    for j, r in enumerate(rows):
        full[j, :r.shape[0]] = r
    return full.transpose(0, 1).contiguous() if fmt == "sbhd" else full


def _cache_steps(backends, res, ref, gen):
    """Cache steps through TE's own InferenceParams and FusedAttention."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.attention.dot_product_attention import utils as dpa_utils
    from transformer_engine.pytorch.cpp_extensions.fused_attn import FusedAttnBackend
    spec = res["spec"]
    paged = spec.get("paged")
    fmt = res["q_format"]
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[spec["dtype"]]
    with cache_host():
        ip = te.InferenceParams(
            max_batch_size=spec["b"], max_sequence_length=spec["skv"], num_heads_kv=spec["hg"],
            head_dim_k=spec["d_qk"], head_dim_v=spec["d_v"], dtype=dtype,
            is_paged=bool(paged), page_size=paged["page_size"] if paged else None,
            total_num_pages=paged["num_pages"] if paged else None, max_ctx_len=spec["sq"],
            qkv_format=fmt)
        ip.allocate_memory(1)
    mod = module.make_module(backends, res)
    out = {}
    for k, step in enumerate(spec["schedule"], 1):
        rk, inp = res["steps"][k - 1], ref[str(k)]["children"]["inputs"]
        pairs = step["step"]
        try:
            with cache_host():
                ip.pre_step(OrderedDict((int(s), int(n)) for s, n in pairs))
            node = _cache_call(backends, rk, inp, pairs, ip, mod, gen, dpa_utils,
                               FusedAttnBackend)
        except record.CaseError as e:
            raise record.CaseError(f"step {k}: {e}") from e
        out[str(k)] = record.group([], node)
    return out


def _cache_call(backends, rk, inp, pairs, ip, mod, gen, dpa_utils, FusedAttnBackend):
    """DotProductAttention's part of one cache step (dot_product_attention.py
    2.20.2:2532-2569, 2.19.0:1829-1866): the new K and V into the cache
    (InferenceParams.step), the layout of q against the cache
    (get_qkv_layout), then FusedAttention with the cache and the
    InferenceParams, recorded as fattn records a step."""
    spec = rk["spec"]
    q = _torch(inp["children"]["q"]).requires_grad_(True)
    new_k = _new_tokens(rk, inp, pairs, "k")
    new_v = _new_tokens(rk, inp, pairs, "v")
    with cache_host():
        k_cache, v_cache, cu_q, cu_kv, max_kv, qkv_format = ip.step(1, new_k, new_v,
                                                                    rk["q_format"])
    qkv_layout, q_, k_cache, v_cache, _, _ = dpa_utils.get_qkv_layout(
        q, k_cache, v_cache, qkv_format=qkv_format, inference_params=ip)
    bridge.last_forward = None
    bridge.default_gen = gen
    engine_calls.reset()
    try:
        result = mod(
            q_.as_subclass(module.HostTensor), k_cache.as_subclass(module.HostTensor),
            v_cache.as_subclass(module.HostTensor), qkv_layout=qkv_layout, cu_seqlens_q=cu_q,
            cu_seqlens_kv=cu_kv, max_seqlen_q=spec["sq"], max_seqlen_kv=max_kv,
            attn_mask_type=spec["mask"], window_size=tuple(rk["window"]),
            bottom_right_diagonal=rk["bottom_right_diagonal_arg"],
            fused_attention_backend=FusedAttnBackend["F16_arbitrary_seqlen"],
            core_attention_bias_type=spec["bias"], fast_zero_fill=bool(spec["fast_zero_fill"]),
            fp8=False, inference_params=ip)
    finally:
        bridge.default_gen = None
    flat = result[0] if isinstance(result, tuple) else result
    ctx = module.find_ctx(flat, backends.FusedAttnFunc)
    if ctx is None:
        raise record.CaseError("FusedAttention's output has no FusedAttnFunc node below it")
    out = flat.view(*flat.shape[:-1], q.shape[-2], spec["d_v"])
    # what FusedAttnFunc got: q, the cache (its first b rows, non-paged) and
    # the first b rows of the page table, cu_seqlens cut to b + 1
    b = spec["b"]
    t = {"q": q, "k": k_cache.detach(), "v": v_cache.detach(),
         "cu_seqlens_q": cu_q[:b + 1], "cu_seqlens_kv": cu_kv[:b + 1],
         "cu_seqlens_q_padded": cu_q[:b + 1], "cu_seqlens_kv_padded": cu_kv[:b + 1]}
    if ip.is_paged:
        table = ip.cache_manager.page_table[:b]
        t["page_table_k"], t["page_table_v"] = table, table
    return record.forward_record(backends, rk, t, gen, out, None, ctx)[0]
