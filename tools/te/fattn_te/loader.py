"""Import TransformerEngine's Python from an unpacked wheel or a source tree
without its compiled parts (docs/te.md, "How TE is imported")."""
import os
import sys

BACKENDS = "transformer_engine.pytorch.attention.dot_product_attention.backends"


class TEImportError(Exception):
    pass


def te_package_dir(te_root):
    """The directory holding transformer_engine/ (a wheel's root, or a
    source tree's root, where TE keeps the package at the top)."""
    root = os.path.abspath(te_root)
    if not os.path.isfile(os.path.join(root, "transformer_engine", "pytorch", "attention",
                                       "dot_product_attention", "backends.py")):
        raise TEImportError(
            f"{te_root}: no transformer_engine/pytorch/attention/dot_product_attention/"
            "backends.py below it (not an unpacked TE wheel or source tree)")
    return root


def import_backends(te_root, module=None):
    """TE's backends module, imported from te_root with fattn's shim as
    transformer_engine_torch. One TE per process: a second root is refused."""
    root = te_package_dir(te_root)
    loaded = sys.modules.get("transformer_engine")
    if loaded is not None:
        have = os.path.dirname(os.path.dirname(os.path.abspath(loaded.__file__)))
        if have != root:
            raise TEImportError(f"TE from {have} is already imported; one TE per process")
        return sys.modules[BACKENDS]
    from . import shim
    if module is None:
        module = shim.make_module()
    sys.modules["transformer_engine_torch"] = module
    # transformer_engine/common/__init__.py loads TE's shared libraries at
    # import unless it is being built (the variable makes it define its
    # functions only).
    os.environ["NVTE_PROJECT_BUILDING"] = "1"
    sys.path.insert(0, root)
    import transformer_engine.common as te_common
    # pytorch/__init__.py:13,18 (2.19.0) looks for the compiled extension's
    # file; the shim is already in sys.modules.
    te_common.load_framework_extension = lambda framework: None
    import importlib
    backends = importlib.import_module(BACKENDS)
    return backends
