"""The torch.cuda.* calls TE's Python makes on the CPU path, each replaced
by the smallest thing that lets it run through without a GPU (docs/te.md,
"Patches", lists them). Applied only when fattn runs on the CPU engine."""
import sys

APPLIED = []


def _rebind(name, orig, repl):
    """Replace function `orig` wherever a TE module bound it by name."""
    n = 0
    for mname, mod in list(sys.modules.items()):
        if mname.startswith("transformer_engine") and getattr(mod, name, None) is orig:
            setattr(mod, name, repl)
            n += 1
    return n


def apply_cpu():
    """TE 2.19.0 backends.py:1448 (2.20.2 backends.py:1606, _fused_attn_forward_impl) asks
    FP8GlobalStateManager.get_fp8_recipe() even on the f16 path; its default
    recipe probes the device (quantization.py:164, utils.py:89
    torch.cuda.current_device()). On the CPU the device is fattn's reference
    platform, sm_90 (docs/frontends.md, the support table)."""
    if APPLIED:
        return
    import transformer_engine.pytorch.utils as te_utils
    orig = te_utils.get_device_compute_capability

    def sm90():
        return (9, 0)

    n = _rebind("get_device_compute_capability", orig, sm90)
    APPLIED.append(("get_device_compute_capability", n))
