"""Suite `te`: every per-case error says who raised it (tools/te/fattn_te/
blame.py). Prints one line per probe: the kind blame gives and the start of
its reason; then what `fattn-te run` does with an error of fattn-te's own
(its exit status, whether -o was written).

Usage: check_blame.py TOOLS_TE_DIR OUT_DIR"""
import os
import sys

sys.path.insert(0, sys.argv[1])
from fattn_te import blame, cli, contract, record  # noqa: E402


def raised(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 -- the probe's exception is the data
        return e
    raise AssertionError("no exception")


def in_file(path, src):
    """An exception raised by code compiled as `path` (a frame of that file)."""
    ns = {}
    exec(compile(src, path, "exec"), ns)  # noqa: S102 -- a fixed probe
    return raised(ns["f"])


def show(e):
    who, why = blame.classify(e)
    print(who, why[:60])


# TE's own code, below its own line; torch called from TE blames TE's line
show(in_file("/x/transformer_engine/pytorch/attention/m.py", "def f():\n    raise ValueError('te')"))
show(in_file("/x/transformer_engine/pytorch/m.py",
             "import torch\ndef f():\n    torch.zeros(2) + torch.zeros(3)"))
# TE's hand-off (the contract) and TE's state as the recorder reads it
show(raised(lambda: (_ for _ in ()).throw(contract.HandoffError("fused_attn_fwd", "Q", "x", "y"))))
show(raised(lambda: (_ for _ in ()).throw(record.CaseError("TE's ctx for backward: x is None"))))
# fattn-te's own: an exception inside the recorder
show(raised(lambda: record.dataset(None)))
# autograd refusing what FusedAttnFunc.backward returned: TE's, at its return line
bw = blame.BackwardReturn(object)
bw.line = "transformer_engine/pytorch/attention/dot_product_attention/backends.py:1234"
blame.last_backward = bw
show(raised(lambda: (_ for _ in ()).throw(RuntimeError(
    "Function FusedAttnFuncBackward returned an invalid gradient at index 0"))))
blame.last_backward = None
show(raised(lambda: (_ for _ in ()).throw(RuntimeError(
    "Function FusedAttnFuncBackward returned an invalid gradient at index 0"))))

# fattn-te's own error in a case stops `fattn-te run`: exit 2, nothing written
out = os.path.join(sys.argv[2], "tool.h5")
record.run_case = lambda *a, **k: record.dataset(None)
rc = cli.main(["run", "--te", "2.20.2", "--filter", "layout.sb3hd.causal.f16", "-o", out])
print("run", rc, "written" if os.path.exists(out) else "nothing written")
