"""The torch.cuda.* calls TE's Python makes on the CPU path, each replaced
by the smallest thing that lets the CPU run through (docs/te.md lists them)."""

def apply_before_import():
    pass

def apply_after_import(backends):
    pass
