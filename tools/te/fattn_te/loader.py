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


class _SourceTreeDist:
    """importlib.metadata's view of a TE source tree that is not installed:
    transformer_engine/__init__.py:138 asks for the distribution's version.
    Served as build_tools/VERSION.txt gives it (TE's own version file), else
    0+source."""

    @staticmethod
    def install(root):
        import importlib.metadata as md
        if any(n.startswith("transformer_engine-") and n.endswith(".dist-info")
               for n in os.listdir(root)):
            return
        vf = os.path.join(root, "build_tools", "VERSION.txt")
        version = open(vf, encoding="utf-8").read().strip() if os.path.isfile(vf) else "0+source"

        class Dist(md.Distribution):
            def read_text(self, filename):
                if filename == "METADATA":
                    return f"Metadata-Version: 2.1\nName: transformer_engine\nVersion: {version}\n"
                return None

            def locate_file(self, path):
                return os.path.join(root, path)

        class Finder:
            @staticmethod
            def find_spec(*_args, **_kwargs):
                return None

            @staticmethod
            def find_distributions(context=md.DistributionFinder.Context()):
                name = (context.name or "").replace("-", "_").lower()
                return iter([Dist()] if name in ("", "transformer_engine") else [])

        sys.meta_path.append(Finder)


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
    _SourceTreeDist.install(root)
    import importlib
    import importlib.util
    # transformer_engine/__init__.py imports .pytorch, whose __init__
    # (2.19.0 pytorch/__init__.py:13,18) calls load_framework_extension,
    # which looks for the compiled extension (and, in a source tree, for an
    # installed distribution): the package object is made first, its
    # `common` imported and the call replaced by a no-op (the shim is
    # already in sys.modules), and only then does the package's own
    # __init__ run.
    init = os.path.join(root, "transformer_engine", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "transformer_engine", init,
        submodule_search_locations=[os.path.join(root, "transformer_engine")])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["transformer_engine"] = pkg
    te_common = importlib.import_module("transformer_engine.common")
    te_common.load_framework_extension = lambda framework: None
    spec.loader.exec_module(pkg)
    return importlib.import_module(BACKENDS)
