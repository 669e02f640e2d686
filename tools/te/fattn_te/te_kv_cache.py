"""test_kv_cache.py as schedules of cache steps (tools/te/te-tests; docs/te.md,
"TE's tests as a matrix").

TE's test_kv_cache runs, per parameter combination, a Simulation of
requests (torch's CPU generator, reset_rng_states' seed 1234) and feeds
its steps to InferenceParams.pre_step and the model, one step at a time.
Here the test function itself runs, in pytest's order, on the host
(kvcache.host(): what it allocates on "cuda" lands on the CPU), with its
InferenceParams TE's own and TE's backend selection (the test's
get_available_attention_backends) deciding; only the models and their
inputs are stand-ins. A DotProductAttention the test builds for
FusedAttention is one case: its InferenceParams' sizes, and as its
schedule the step_dict of every pre_step the loop makes. The lengths are
therefore the Simulation's own draws, deterministic because the test
seeds the generator before drawing them; they depend on torch's CPU
sampling, whose version the provenance names.

The test function runs whole, including its parameter combinations for
other backends: it writes the shared ModelConfig (max_seqlen_kv rounded
up, FlashAttention's 256 restored only when that test finishes), so a
configuration's sizes are those the combinations before it left, as in
a pytest run of the file."""
import collections
import os

from . import kvcache, pytest_stub

MODULE_FILE = "tests/pytorch/attention/test_kv_cache.py"
# What a FusedAttention configuration of the test does that fattn's
# schedule does not express, by the parameter that makes it.
NOT_TRANSLATED = {
    "TransformerLayer": "module TransformerLayer: the attention inputs are its projections",
    "cuda_graph": "is_cuda_graph: the steps replay one CUDA graph captured with max_batch_size "
                  "sequences of max_ctx_len, padded inputs and max_seqlen_q = max_ctx_len; "
                  "fattn's cache steps are the calls FusedAttnFunc makes, not graph replays",
}


class _Model:
    """A layer of the test's model: what it is handed is what it returns
    (the query), so that the test's comparison of the full and the
    incremental outputs holds; in inference mode, its calls are counted."""

    def __init__(self, rec):
        self.rec = rec

    def __call__(self, *args, **kwargs):
        if kwargs.get("inference_params") is not None and self.rec.pending is not None:
            self.rec.pending["calls"] += 1
        return args[0]


class Recorder:
    """The test module's model and input builders replaced; InferenceParams
    TE's own, its pre_step dicts recorded."""

    def __init__(self, mod):
        import torch
        self.pending = None
        self.untranslated = collections.Counter()
        rec = self
        base = mod.InferenceParams

        class InferenceParams(base):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.fattn_args = dict(kwargs)
                self.fattn_steps = []
                rec.ip = self

            def pre_step(self, step_dict):
                self.fattn_steps.append([[int(s), int(n)] for s, n in step_dict.items()])
                return super().pre_step(step_dict)

        def get_model(module, config, dtype, backend="FusedAttention", qkv_format="bshd",
                      num_layers=1, mode="reference", is_fp8=False):
            if mode == "inference" and backend == "FusedAttention":
                if module != "DotProductAttention":
                    rec.untranslated["TransformerLayer"] += 1
                    raise pytest_stub.Skipped("te-tests: TransformerLayer is not translated")
                rec.pending = {"config": config, "dtype": dtype, "qkv_format": qkv_format,
                               "fp8": bool(is_fp8), "ip": rec.ip, "calls": 0}
            return [_Model(rec) for _ in range(num_layers)]

        def generate_args(module, config, dtype, qkv_format="bshd", mode="full_inputs"):
            # the values never matter (each layer returns its query): one
            # zero seen in the shapes the test slices
            n = config.total_requests if mode == "full_inputs" else config.batch_size
            s = config.max_seqlen_kv if mode == "full_inputs" else config.max_ctx_len
            heads = [config.num_heads, config.num_gqa_groups, config.num_gqa_groups]
            dims = [config.head_dim_qk, config.head_dim_qk, config.head_dim_v]
            return [torch.zeros(1, dtype=dtype).expand(n, s, h, d) for h, d in zip(heads, dims)]

        class Simulation(mod.Simulation):
            def step(self, dynamic_fill=True):
                # a run whose calls are not recorded (another backend) ends
                # its loop at once, through the test's own exit: what it
                # leaves behind (the ModelConfig) is what its full loop
                # would, which never fails on the stand-ins
                if rec.pending is None:
                    self.t, self.t_batch_size = self.last_arrival + 1, 0
                    return
                super().step(dynamic_fill)

        def make_graphed_callables(*args, **kwargs):
            if rec.pending is not None:
                rec.pending = None
                rec.untranslated["cuda_graph"] += 1
                raise pytest_stub.Skipped("te-tests: CUDA graphs are not translated")
            return args[0]

        self.ip = None
        mod.InferenceParams = InferenceParams
        mod.Simulation = Simulation
        mod.get_model = get_model
        mod.generate_args = generate_args
        mod.make_graphed_callables = make_graphed_callables


def call_of(p, deterministic):
    """A recorded simulation -> the FusedAttnFunc calls of one case: the
    InferenceParams the test built (its sizes are the cache's), the mask
    DotProductAttention hands FusedAttention for padding_causal with a
    cache, the steps the loop took."""
    import torch
    a, cfg = p["ip"].fattn_args, p["config"]
    paged = bool(a.get("is_paged"))
    return {"b": a["max_batch_size"], "h": cfg.num_heads, "hg": a["num_heads_kv"],
            "sq": a["max_ctx_len"], "skv": a["max_sequence_length"], "d_qk": a["head_dim_k"],
            "d_v": a["head_dim_v"],
            "dtype": {torch.float16: "float16", torch.bfloat16: "bfloat16"}[p["dtype"]],
            "layout": ("paged_kv_" if paged else "") + p["qkv_format"] + "_bshd_bshd",
            "mask": "padding_causal_bottom_right", "deterministic": bool(deterministic),
            "page_size": a["page_size"] if paged else None, "fp8": p["fp8"],
            "is_training": False, "pad_between_seqs": False,
            "steps": p["ip"].fattn_steps}


def _env_restored(fn):
    """The test sets NVTE_{FLASH,FUSED,UNFUSED}_ATTN for the process, as in
    a pytest run; the tool gives them back afterwards."""
    def run(*args, **kwargs):
        names = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
        saved = {n: os.environ.get(n) for n in names}
        try:
            return fn(*args, **kwargs)
        finally:
            for n, v in saved.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v
    return run


@_env_restored
def run_tests(mod, rec, label, deterministic):
    """Every combination of test_kv_cache, in pytest's order, on the host:
    [(call, test id, pass label)], and the counts."""
    out, counts = [], collections.Counter()
    fn = mod.test_kv_cache
    for tid, kwargs, skip in pytest_stub.expand(fn):
        test_id = "%s::test_kv_cache[%s]" % (MODULE_FILE, tid)
        if skip:
            counts["skipped (mark)"] += 1
            continue
        rec.pending, rec.ip = None, None
        with kvcache.host():
            passed = pytest_stub.run(fn, kwargs, counts)
        if not passed:
            continue
        if rec.pending is not None and rec.pending["calls"]:
            out.append((call_of(rec.pending, deterministic), test_id, label))
    return out, counts


def scaled_heads(c):
    """(h, hg) and a note: the heads scaled as the tier scales them (at most
    2 groups, the GQA ratio at most 2), at least b for a thd q (the rule
    FusedAttention's cu_seqlens cut imposes, docs/cases.md "Schedules").
    The batch, the lengths and head dims are the test's: the steps are
    the Simulation's."""
    b, h, hg = c["b"], c["h"], c["hg"]
    r = h // hg
    if r == 1:
        h2 = hg2 = min(h, 2)
    else:
        hg2 = min(hg, 2)
        h2 = hg2 * min(r, 2)
    if c["layout"].replace("paged_kv_", "").startswith("thd") and h2 < b:
        hg2 = hg2 * b // h2 if r > 1 else b
        h2 = b
    return h2, hg2


def longest(steps):
    """The longest sequence the steps build (pre_step adds each entry's new
    tokens to its sequence)."""
    total = collections.Counter()
    for pairs in steps:
        for seq, n in pairs:
            total[seq] += n
    return max(total.values())


def scaled_cache(c):
    """The cache's length: TE's, or cut to the smallest multiple of 64 (the
    test's own rounding, release_v2.19 :443) that still holds every
    sequence the steps build, so that the steps stay the Simulation's."""
    n = -(-longest(c["steps"]) // 64) * 64
    return min(c["skv"], n)


def spec_of_call(call):
    """The case spec (without id and seed) of a recorded simulation, and
    its shape note."""
    h, hg = scaled_heads(call)
    skv = scaled_cache(call)
    s = {"b": call["b"], "h": h, "hg": hg, "sq": call["sq"], "skv": skv,
         "d_qk": call["d_qk"], "d_v": call["d_v"], "dtype": call["dtype"],
         "layout": call["layout"], "mask": call["mask"], "is_training": False,
         "deterministic": call["deterministic"]}
    if call["page_size"]:
        s["paged"] = {"page_size": call["page_size"]}
    s["schedule"] = [{"step": pairs} for pairs in call["steps"]]
    note = "%d cache steps as the Simulation drew them (longest sequence %d); " % (
        len(call["steps"]), longest(call["steps"]))
    if (h, hg, skv) == (call["h"], call["hg"], call["skv"]):
        return s, note + "kept"
    return s, note + "scaled from h %d hg %d skv %d to h %d hg %d skv %d" % (
        call["h"], call["hg"], call["skv"], h, hg, skv)


def provenance(passes_note):
    """How the schedules were made, for the provenance file."""
    import torch
    return {"passes": passes_note,
            "lengths": "each case's steps are the step_dict of every InferenceParams.pre_step "
                       "test_kv_cache makes: its Simulation's draws (context lengths uniform, "
                       "generation lengths exponential, arrivals Poisson) from torch's CPU "
                       "generator after reset_rng_states() (seed 1234), as on a GPU run, "
                       "which draws them on the CPU too",
            "torch": torch.__version__,
            "sizes": "b, sq (max_ctx_len), skv (max_sequence_length), head dims and the page "
                     "size are the InferenceParams the test built, after the parameter "
                     "combinations before it wrote the shared ModelConfig as a pytest run "
                     "of the file does; heads scaled as the tier scales them (at least b "
                     "for a thd q), the cache cut to the smallest multiple of 64 holding "
                     "the longest sequence"}
