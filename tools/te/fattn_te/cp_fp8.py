"""FP8 on a context-parallel rank (docs/te.md, "Context parallelism"):
each rank's FP8 state built as TE's own test_attention_with_cp builds it
(run_attention_with_cp.py release_v2.19 :299-305, :522-525): a
DotProductAttention whose fp8_meta and quantizers TE's own
init_fp8_metadata makes inside TE's `autocast(recipe=..., fp8_dpa=True,
amax_reduction_group=<the CP group>)`, registered for the delayed
recipe's reduction as DotProductAttention's prepare_forward registers it
(module/base.py 2.20.2:1632), then handed to FusedAttention with the CP
arguments. The amax reduction over the CP group is TE's own:

- delayed scaling: leaving the autocast runs
  FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=True)
  (quantization.py:656-712 in both releases): torch.distributed.all_reduce
  MAX over the autocast's group (:645-653, gloo on the host), then
  tex.fused_amax_and_scale_update_after_reduction (the shim's, on libfattn,
  bridge_state.py);
- current scaling: FusedAttention marks every current-scaling quantizer
  with_amax_reduction over the CP group (backends.py 2.19.0:2255-2262,
  2.20.2:2514-2521) and TE's C++ quantize all-reduces the amax before it
  computes the scale (quantizer.cpp release_v2.19:1015-1021): the shim's
  tex.quantize does that (bridge_fp8.quantize).

Recorded per rank (`ranks/<r>/fp8/`): the forward amaxes the rank's own
steps left in the recipe state before the reduction (`amax_fwd_local`,
row 0 of the history) and the state after it (`scale_fwd`,
`amax_history_fwd`, `scale_bwd`, `amax_history_bwd`), so that the
reduction shows: after it every rank holds the largest of the ranks'
local amaxes."""
import contextlib

import torch

from . import fp8, kvcache, record, schedule

FWD_N = 9  # DotProductAttention's num_gemms 3 (dot_product_attention.py 2.20.2:1364)


def recipe(spec):
    """The autocast recipe of TE's test (run_attention_with_cp.py :299-305):
    DelayedScaling or Float8CurrentScaling with fp8_dpa on (fp8_mha off:
    FusedAttention is handed q, k, v in the nominal dtype unless the case's
    input_fp8 asks for Float8Tensors)."""
    from transformer_engine.common import recipe as R
    f = spec["fp8"]
    if f["recipe"] == "delayed":
        # reduce_amax: the spec's (TE's default True), which FusedAttention
        # requires under CP (backends.py 2.19.0:2250-2254, 2.20.2:2509-2513)
        return R.DelayedScaling(fp8_dpa=True, fp8_mha=False,
                                reduce_amax=bool(f.get("reduce_amax", True)))
    if f["recipe"] == "current":
        return R.Float8CurrentScaling(fp8_dpa=True, fp8_mha=False)
    raise ValueError(f"context parallelism with FP8: recipe {f['recipe']!r} is not "
                     f"delayed or current")


def _harness_scales(dpa):
    """The harness's scales (fp8.SCALES) in the delayed recipe state's
    slots, as the one-process FP8 cases and schedule.Fp8Module set them
    (TE starts them at 1): under DelayedScaling the state holds all nine
    forward / six backward quantizers; under Float8CurrentScaling it is
    the delayed half of [CS, DS] (S and dP: forward slots 6-8, backward
    4-5, dot_product_attention.py 2.20.2:1436-1483)."""
    fwd, bwd = dpa.fp8_meta["scaling_fwd"], dpa.fp8_meta["scaling_bwd"]
    off_f = FWD_N - fwd.scale.numel()
    off_b = 6 - bwd.scale.numel()
    with torch.no_grad():
        for name, i in fp8.FWD_SLOTS.items():
            if i >= off_f:
                fwd.scale[i - off_f] = fp8.SCALES[name]
        for name, i in fp8.BWD_SLOTS.items():
            if i >= off_b:
                bwd.scale[i - off_b] = fp8.SCALES[name]
    for q in dpa.quantizers["scaling_fwd"] + dpa.quantizers["scaling_bwd"]:
        if type(q).__name__ == "Float8CurrentScalingQuantizer":
            # no state in TE; what fattn records for one (bridge_fp8.cs_state),
            # from the harness's table as fp8.make_quantizers starts it
            from . import bridge_fp8
            bridge_fp8.cs_state[id(q)] = [q, fp8.SCALES["QKV"], 0.0]


class RankFp8:
    """One rank's DotProductAttention FP8 state for one CP case: enter()
    inside TE's autocast, args() for FusedAttention, leave() exits the
    autocast (the delayed recipe's reduction over the group) and returns
    the record."""

    def __init__(self, res, group):
        import transformer_engine.pytorch as te
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager, autocast
        spec = res["spec"]
        self.spec = spec
        FP8GlobalStateManager.reset()
        with schedule.on_host():
            self.dpa = te.DotProductAttention(
                num_attention_heads=spec["h"], kv_channels=(spec["d_qk"], spec["d_v"]),
                num_gqa_groups=spec["hg"], layer_number=1)
        self.autocast = autocast(enabled=True, recipe=recipe(spec),
                                 amax_reduction_group=group)
        self.local = None

    def enter(self):
        from transformer_engine.pytorch.quantization import (
            FP8GlobalStateManager, _has_delayed_scaling_state)
        self.autocast.__enter__()
        # DotProductAttention.forward's prepare_forward (module/base.py
        # 2.20.2:1597-1632): init_fp8_metadata(num_gemms=3), then the
        # delayed state into the global buffer its autocast reduces
        from . import bridge
        # on the host TE's recipe states allocate on the host (cp_shim.STANDINS);
        # on a GPU runner on the rank's GPU, as TE does
        host = kvcache.host() if bridge.engine().device == "cpu" else contextlib.nullcontext()
        with schedule.on_host(), host:
            self.dpa.init_fp8_metadata(num_gemms=3)
        _harness_scales(self.dpa)
        if self.dpa.fp8 and _has_delayed_scaling_state(self.dpa.fp8_meta):
            FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(self.dpa.fp8_meta)

    def args(self):
        """The FP8 arguments DotProductAttention passes FusedAttention
        (2.20.2 :3021-3059): fp8 = DPA.fp8 and its recipe's fp8_dpa, its
        fp8_meta and quantizers."""
        f = self.spec["fp8"]
        return {"fp8": bool(self.dpa.fp8 and self.dpa.fp8_meta["recipe"].fp8_dpa),
                "fp8_meta": self.dpa.fp8_meta, "quantizers": self.dpa.quantizers,
                "fp8_output": bool(f.get("output_fp8")),
                "bf16_backward": bool(f.get("bf16_backward"))}

    def leave(self, ok=True):
        """Leaves TE's autocast; returns the rank's `fp8` record (None when
        the call failed: the autocast is left without reducing)."""
        meta = self.dpa.fp8_meta
        if ok and "scaling_fwd" in meta:
            self.local = meta["scaling_fwd"].amax_history[0].detach().clone()
        if ok:
            self.autocast.__exit__(None, None, None)
        else:
            with contextlib.suppress(Exception):
                self.autocast.__exit__(RuntimeError, None, None)
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager
        FP8GlobalStateManager.reset()
        if not ok or self.local is None:
            return None
        kids = {"amax_fwd_local": record.dataset(self.local)}
        for n, key, attr in (("scale_fwd", "scaling_fwd", "scale"),
                             ("amax_history_fwd", "scaling_fwd", "amax_history"),
                             ("scale_bwd", "scaling_bwd", "scale"),
                             ("amax_history_bwd", "scaling_bwd", "amax_history")):
            kids[n] = record.dataset(getattr(meta[key], attr).detach().float())
        attrs = [("recipe", type(meta["global_recipe"]).__name__, None),
                 ("dpa_recipe", type(meta["recipe"]).__name__, None)]
        return record.group(attrs, kids)
