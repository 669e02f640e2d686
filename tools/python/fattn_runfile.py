"""Run files (docs/run-files.md) for Python tools: read them, write them
through fattn's own writer, and resolve case specs the way fattn does.

  load_tree(path, max_bytes)  a run file as a plain tree, every digest checked;
                              refused unread when its datasets declare more
                              than max_bytes (default: half the memory)
  write_tree(path, root)      that tree written by `fattn write-tree` (the C
                              writer: sorted order, timestamps off, libver
                              bounds, atomic replace), so that a Python tool
                              writes the same format byte for byte rules
  resolved_cases(spec_path)   `fattn cases --resolved --json`: every spec with
                              its defaults filled and what fattn derives from it
  digest(data)                fattn's digest string of bytes or an array

Reading needs h5py and numpy only; writing and resolving need a fattn build
(find_fattn: $FATTN, else build*/harness/fattn under the source tree, else
`fattn` on PATH). Digests: the xxhash module when installed, else libxxhash
through ctypes, else the plain XXH3-128 below, so that reading works on a
machine where neither is installed.
"""
import ctypes
import ctypes.util
import glob
import json
import os
import shutil
import struct
import subprocess
import tempfile

SCHEMA = "fattn-run/1"
DIGEST_PREFIX = "xxh3-128:"
MANIFEST_SCHEMA = "fattn-tree/1"


class InputError(Exception):
    """A bad input (a tool exits 2); the message names the file, case and cause."""


# --------------------------------------------------------------------------
# fattn itself
# --------------------------------------------------------------------------

def source_root():
    """The source tree this module lives in (tools/python/ or deeper)."""
    d = os.path.dirname(os.path.abspath(__file__))
    while d != os.path.dirname(d):
        if os.path.isfile(os.path.join(d, "meson.build")) and \
                os.path.isdir(os.path.join(d, "harness")):
            return d
        d = os.path.dirname(d)
    return None


def find_fattn(explicit=None):
    """The fattn executable: `explicit`, $FATTN, the newest build*/harness/fattn
    of the source tree, or `fattn` on PATH (InputError when there is none)."""
    for c in (explicit, os.environ.get("FATTN")):
        if c:
            if not os.access(c, os.X_OK):
                raise InputError("%s: not an executable fattn" % c)
            return c
    root = source_root()
    if root:
        found = [p for p in glob.glob(os.path.join(root, "build*", "harness", "fattn"))
                 if os.access(p, os.X_OK)]
        if found:
            return max(found, key=os.path.getmtime)
    p = shutil.which("fattn")
    if p:
        return p
    raise InputError("no fattn executable: build it (meson compile -C build) or set FATTN")


def _run_fattn(fattn, args):
    p = subprocess.run([find_fattn(fattn)] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        msg = p.stderr.strip().splitlines()
        raise InputError(msg[-1] if msg else "fattn %s: exit %d" % (args[0], p.returncode))
    return p.stdout


def resolved_cases(spec_path=None, fattn=None):
    """Every case of a spec file (None: the default matrix) as fattn resolves
    it (docs/cases.md "The resolved model"): a list of dicts with "id",
    "spec" (the canonical spec, every default filled), the resolved window,
    bottom_right_diagonal, attn_scale, formats, sequence tables and tensor
    shapes, or "error" for a case TE refuses. A spec file fattn's parser
    refuses is an InputError with its message (file, case, key)."""
    args = ["cases", "--resolved", "--json"]
    if spec_path is not None:
        args += ["--cases", spec_path]
    return json.loads(_run_fattn(fattn, args))


def resolve_specs(specs, fattn=None):
    """resolved_cases for a list of spec objects (e.g. read from run files)."""
    fd, tmp = tempfile.mkstemp(prefix="fattn-specs-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(specs, f)
        return resolved_cases(tmp, fattn)
    finally:
        os.unlink(tmp)


# --------------------------------------------------------------------------
# Digests: XXH3-128, canonical (big-endian), as harness/files/digest.c writes them
# (for reading: verifying a file needs no fattn build)
# --------------------------------------------------------------------------

M64 = (1 << 64) - 1
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
PMX1, PMX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25
# The default 192-byte secret of the XXH3 specification.
SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")


def _r64(b, i):
    return int.from_bytes(b[i:i + 8], "little")


def _r32(b, i):
    return int.from_bytes(b[i:i + 4], "little")


def _avalanche64(h):  # XXH64's final mix
    h ^= h >> 33
    h = (h * P64_2) & M64
    h ^= h >> 29
    h = (h * P64_3) & M64
    return h ^ (h >> 32)


def _avalanche3(h):
    h ^= h >> 37
    h = (h * PMX1) & M64
    return h ^ (h >> 32)


def _fold(a, b):  # 64x64 -> 128 multiply, halves xor-ed
    p = a * b
    return (p ^ (p >> 64)) & M64


def _mix16(data, i, s):
    return _fold(_r64(data, i) ^ _r64(SECRET, s), _r64(data, i + 8) ^ _r64(SECRET, s + 8))


def _mix32(lo, hi, data, i1, i2, s):
    lo = (lo + _mix16(data, i1, s)) & M64
    lo ^= (_r64(data, i2) + _r64(data, i2 + 8)) & M64
    hi = (hi + _mix16(data, i2, s + 16)) & M64
    hi ^= (_r64(data, i1) + _r64(data, i1 + 8)) & M64
    return lo, hi


def _final_mid(lo, hi, n):
    low = _avalanche3((lo + hi) & M64)
    high = (lo * P64_1 + hi * P64_4 + n * P64_2) & M64
    return low, (-_avalanche3(high)) & M64


def _xxh3_long(data, np):
    """Inputs over 240 bytes: 8 lanes accumulated over 64-byte stripes."""
    n = len(data)
    acc = np.array([P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1], dtype=np.uint64)
    key = np.frombuffer(SECRET, dtype="<u8")
    # stripe k of a block reads the secret from byte 8k: lane keys of 16 stripes
    keys = np.stack([np.frombuffer(SECRET[8 * k:8 * k + 64], dtype="<u8") for k in range(16)])
    lo32 = np.uint64(0xFFFFFFFF)
    swap = [1, 0, 3, 2, 5, 4, 7, 6]

    def accumulate(stripes, k):  # additions commute: a whole block at once
        nonlocal acc
        vals = stripes.astype(np.uint64)
        dk = vals ^ k
        prod = (dk & lo32) * (dk >> np.uint64(32))
        with np.errstate(over="ignore"):
            acc = acc + vals[:, swap].sum(axis=0, dtype=np.uint64) + prod.sum(axis=0,
                                                                           dtype=np.uint64)

    words = np.frombuffer(data, dtype="<u8", count=(n // 8))
    nb_blocks = (n - 1) // 1024
    scramble = key[16:24]  # the secret's last 64 bytes
    for blk in range(nb_blocks):
        accumulate(words[blk * 128:(blk + 1) * 128].reshape(16, 8), keys)
        with np.errstate(over="ignore"):
            acc = ((acc ^ (acc >> np.uint64(47))) ^ scramble) * np.uint64(P32_1)
    stripes = ((n - 1) - 1024 * nb_blocks) // 64
    if stripes:
        start = nb_blocks * 128
        accumulate(words[start:start + 8 * stripes].reshape(stripes, 8), keys[:stripes])
    last = np.frombuffer(data[n - 64:], dtype="<u8").reshape(1, 8)
    accumulate(last, np.frombuffer(SECRET[192 - 64 - 7:192 - 7], dtype="<u8"))
    a = [int(x) for x in acc]

    def merge(s, start):
        r = start
        for i in range(4):
            r = (r + _fold(a[2 * i] ^ _r64(SECRET, s + 16 * i),
                           a[2 * i + 1] ^ _r64(SECRET, s + 16 * i + 8))) & M64
        return _avalanche3(r)

    low = merge(11, (n * P64_1) & M64)
    high = merge(192 - 64 - 11, ~(n * P64_2) & M64)
    return low, high


def xxh3_128_plain(data):
    """XXH3-128 with seed 0 and the default secret: (low64, high64)."""
    import numpy as np
    data = bytes(data)
    n = len(data)
    if n == 0:
        return (_avalanche64(_r64(SECRET, 64) ^ _r64(SECRET, 72)),
                _avalanche64(_r64(SECRET, 80) ^ _r64(SECRET, 88)))
    if n <= 3:
        c = (data[0] << 16) | (data[n >> 1] << 24) | data[n - 1] | (n << 8)
        sw = int.from_bytes(c.to_bytes(4, "little"), "big")
        ch = ((sw << 13) | (sw >> 19)) & 0xFFFFFFFF
        low = _avalanche64(c ^ (_r32(SECRET, 0) ^ _r32(SECRET, 4)))
        high = _avalanche64(ch ^ (_r32(SECRET, 8) ^ _r32(SECRET, 12)))
        return low, high
    if n <= 8:
        x = _r32(data, 0) + (_r32(data, n - 4) << 32)
        keyed = x ^ (_r64(SECRET, 16) ^ _r64(SECRET, 24))
        p = keyed * ((P64_1 + (n << 2)) & M64)
        lo, hi = p & M64, p >> 64
        hi = (hi + (lo << 1)) & M64
        lo ^= hi >> 3
        lo ^= lo >> 35
        lo = (lo * PMX2) & M64
        lo ^= lo >> 28
        return lo, _avalanche3(hi)
    if n <= 16:
        flo = _r64(SECRET, 32) ^ _r64(SECRET, 40)
        fhi = _r64(SECRET, 48) ^ _r64(SECRET, 56)
        ilo, ihi = _r64(data, 0), _r64(data, n - 8)
        p = (ilo ^ ihi ^ flo) * P64_1
        lo, hi = p & M64, p >> 64
        lo = (lo + ((n - 1) << 54)) & M64
        ihi ^= fhi
        hi = (hi + ihi + (ihi & 0xFFFFFFFF) * (P32_2 - 1)) & M64
        lo ^= int.from_bytes(hi.to_bytes(8, "little"), "big")
        q = lo * P64_2
        low, high = q & M64, ((q >> 64) + hi * P64_2) & M64
        return _avalanche3(low), _avalanche3(high)
    if n <= 128:
        lo, hi = (n * P64_1) & M64, 0
        for k in (3, 2, 1):
            if n > 32 * k:
                lo, hi = _mix32(lo, hi, data, 16 * k, n - 16 * (k + 1), 32 * k)
        lo, hi = _mix32(lo, hi, data, 0, n - 16, 0)
        return _final_mid(lo, hi, n)
    if n <= 240:
        lo, hi = (n * P64_1) & M64, 0
        for i in range(4):
            lo, hi = _mix32(lo, hi, data, 32 * i, 32 * i + 16, 32 * i)
        lo, hi = _avalanche3(lo), _avalanche3(hi)
        for i in range(4, n // 32):
            lo, hi = _mix32(lo, hi, data, 32 * i, 32 * i + 16, 3 + 32 * (i - 4))
        lo, hi = _mix32(lo, hi, data, n - 16, n - 32, 136 - 17 - 16)
        return _final_mid(lo, hi, n)
    return _xxh3_long(data, np)


def _libxxhash():
    """libxxhash's XXH3_128bits through ctypes, or None."""
    class H128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]
    for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_128bits
        except (OSError, AttributeError):
            continue
        fn.restype = H128
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

        def h(data, fn=fn):
            b = bytes(data)
            r = fn(b, len(b))
            return r.low64, r.high64
        return h
    return None


def _pick_hasher():
    try:
        import xxhash

        def h(data):
            v = xxhash.xxh3_128_intdigest(bytes(data))
            return v & M64, v >> 64
        return h, "xxhash"
    except ImportError:
        pass
    lib = _libxxhash()
    if lib is not None:
        return lib, "libxxhash"
    return xxh3_128_plain, "plain"


_HASHER = None


def digest(data):
    """fattn's digest string of a byte string (or a C-ordered numpy array)."""
    global _HASHER
    if _HASHER is None:
        _HASHER = _pick_hasher()
    if hasattr(data, "tobytes"):
        data = data.tobytes()
    low, high = _HASHER[0](data)
    return DIGEST_PREFIX + "%016x%016x" % (high, low)


# --------------------------------------------------------------------------
# Run files: reading (h5py), writing (fattn write-tree)
# --------------------------------------------------------------------------

STORAGE = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "float8_e4m3fn": "|u1",
           "float8_e5m2": "|u1", "uint8": "|u1", "int32": "<i4", "int64": "<i8"}


def _h5():
    import h5py
    import numpy as np
    return h5py, np


def default_max_bytes():
    """load_tree's default bound: half the machine's memory, as fattn's own
    `--max-memory` default (harness/cli/cmd_run.c); 4 GiB when unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 4 << 30


# HDF5 filters whose output is bounded by the dataset's declared shape (the
# library checks every chunk's size): deflate (gzip), shuffle, fletcher32,
# szip, nbit, scaleoffset, and h5py's lzf. Any other filter is a plugin
# loaded from HDF5_PLUGIN_PATH, code outside that bound: refused.
KNOWN_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
                 6: "scaleoffset", 32000: "lzf"}


def _declared_bytes(obj):
    """A dataset's size once read: its declared shape times its item size,
    from metadata (nothing is read or inflated)."""
    n = obj.dtype.itemsize
    for d in obj.shape or ():
        n *= int(d)
    return n


def _filters(obj):
    """The filter ids of a dataset's pipeline (empty when contiguous)."""
    dcpl = obj.id.get_create_plist()
    return [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]


def _bound(f, path, limit):
    """load_tree's estimate of an open file, from its structure only (no
    attribute value, no data): InputError when it exceeds `limit`, naming
    the dataset that took it over or the parts; else the most text its
    attributes may hold (the file's bytes beside its datasets' storage)."""
    import h5py
    seen = {"data": 0, "stored": 0, "objects": 0, "attrs": 0}

    def walk(obj, where):
        seen["objects"] += 1
        seen["attrs"] += len(obj.attrs)  # a count: no value is read
        if isinstance(obj, h5py.Dataset):
            try:
                ids = _filters(obj)
                stored = obj.id.get_storage_size()
            except (OSError, TypeError, ValueError) as e:
                raise InputError("%s: %s: unreadable storage properties: %s" % (path, where, e))
            unknown = [i for i in ids if i not in KNOWN_FILTERS]
            if unknown:
                raise InputError("%s: %s: HDF5 filter %d is not one whose output is "
                                 "bounded by the declared shape: refused"
                                 % (path, where, unknown[0]))
            n = _declared_bytes(obj)
            seen["data"] += n
            seen["stored"] += min(stored, n)
            if seen["data"] > limit:
                raise InputError("%s: %s: declares %d bytes (%s), %d in all so far: over "
                                 "the limit of %d bytes: refused before reading"
                                 % (path, where, n, "filtered: " + "+".join(
                                     KNOWN_FILTERS[i] for i in ids) if ids else "contiguous",
                                    seen["data"], limit))
            return
        for name in sorted(obj):
            child = obj.get(name, getlink=True)
            if isinstance(child, h5py.HardLink):
                walk(obj[name], where.rstrip("/") + "/" + name)

    walk(f, "/")
    text = max(0, f.id.get_filesize() - seen["stored"])
    need = (seen["data"] + ATTR_TEXT_COPIES * text + NODE_COST * seen["objects"]
            + ATTR_COST * seen["attrs"])
    if need > limit:
        raise InputError("%s: reading it whole holds an estimated %d bytes (datasets %d, "
                         "attribute text up to %d, %d objects and attributes): over the limit "
                         "of %d bytes: refused before reading"
                         % (path, need, seen["data"], text, seen["objects"] + seen["attrs"],
                            limit))
    return text


# What a node and an attribute of the tree cost besides their text and data,
# and how many copies of an attribute's text exist while it is read (libhdf5's
# heap collection and conversion buffer, h5py's array, the Python string):
# fattn's own estimate (harness/files/h5estimate.c) counts alike.
NODE_COST, ATTR_COST, ATTR_TEXT_COPIES = 512, 160, 4


def load_tree(path, max_bytes=None):
    """A run file as a plain tree: {"attrs": [(name, value, dtype)], "children":
    {name: node}} for groups, {"attrs", "data", "dtype"} for datasets; every
    dataset's dtype attribute and digest checked (a corrupt input is exit 2).

    The tree holds every dataset and attribute, so before any of them is read
    the file is estimated from its structure alone (as fattn's --max-memory
    does, docs/reliability.md "Memory"): the sizes its datasets declare
    (shape times item size), its attributes' text up to the bytes the file
    holds beside its datasets' storage (the text is stored there, so a 300 MB
    attribute counts 300 MB), a cost per object and attribute. The file is
    refused (InputError naming file, dataset or parts, and sizes) when that
    exceeds `max_bytes` (default_max_bytes(), as fattn's --max-memory): a
    gzip dataset of 1 MB declaring 2 GB is refused unread instead of
    inflated; attributes holding more text than the file has room for
    (shared heap objects) are refused as they are read. A dataset with a
    filter outside KNOWN_FILTERS is refused (its output is not bounded by the
    declared shape)."""
    h5py, np = _h5()
    limit = default_max_bytes() if max_bytes is None else max_bytes
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        raise InputError("%s: not a readable HDF5 file: %s" % (path, e))
    with f:
        text_max = _bound(f, path, limit)
        text_read = [0]
        schema = f.attrs.get("schema")
        if isinstance(schema, bytes):
            schema = schema.decode()
        if schema != SCHEMA:
            raise InputError("%s: schema is %r, not %r (not a fattn run file)"
                             % (path, schema, SCHEMA))
        if "cases" not in f or not isinstance(f["cases"], h5py.Group):
            raise InputError("%s: no /cases group" % path)

        def attrs_of(obj, where):
            out = []
            for name in sorted(obj.attrs):
                try:
                    val = obj.attrs[name]
                    dt = obj.attrs.get_id(name).dtype
                except (OSError, TypeError, ValueError) as e:
                    raise InputError("%s: %s@%s: unreadable attribute: %s" % (path, where,
                                                                              name, e))
                if isinstance(val, (str, bytes)):
                    text_read[0] += len(val)
                    if text_read[0] > text_max:
                        raise InputError(
                            "%s: %s@%s: the attributes hold more text (%d bytes so far) than "
                            "the file has room for beside its datasets (%d bytes): shared or "
                            "overlapping heap objects, refused"
                            % (path, where, name, text_read[0], text_max))
                out.append((name, val, dt))
            return out

        def walk(obj, where):
            if isinstance(obj, h5py.Dataset):
                attrs = dict((n, v) for n, v, _ in attrs_of(obj, where))
                dt = attrs.get("dtype")
                if isinstance(dt, bytes):
                    dt = dt.decode()
                if dt not in STORAGE or np.dtype(STORAGE[dt]) != obj.dtype.newbyteorder("<"):
                    raise InputError("%s: %s: dtype attribute %r does not fit its storage %s"
                                     % (path, where, dt, obj.dtype))
                try:
                    data = np.ascontiguousarray(obj[()])
                except (OSError, TypeError, ValueError) as e:
                    raise InputError("%s: %s: unreadable data: %s" % (path, where, e))
                stored = attrs.get("digest")
                if isinstance(stored, bytes):
                    stored = stored.decode()
                if stored != digest(data):
                    raise InputError("%s: %s: corrupt dataset (stored digest %s, data %s)"
                                     % (path, where, stored, digest(data)))
                return {"attrs": attrs_of(obj, where), "data": data, "dtype": dt}
            node = {"attrs": attrs_of(obj, where), "children": {}}
            for name in sorted(obj):
                child = obj.get(name, getlink=True)
                if not isinstance(child, h5py.HardLink):
                    raise InputError("%s: %s/%s: a link other than a hard link" % (path, where,
                                                                                   name))
                node["children"][name] = walk(obj[name], where.rstrip("/") + "/" + name)
            return node
        root = walk(f, "/")
        root["root_attrs"] = dict((n, v) for n, v, _ in root["attrs"])
    return root


def attr_value(node, name, default=None):
    for n, v, _ in node["attrs"]:
        if n == name:
            return v.decode() if isinstance(v, bytes) else v
    return default


def set_attr(node, name, value, dtype=None):
    """Replace or add an attribute, keeping the list sorted by name."""
    attrs = [a for a in node["attrs"] if a[0] != name]
    attrs.append((name, value, dtype))
    node["attrs"] = sorted(attrs, key=lambda a: a[0])


def del_attr(node, name):
    node["attrs"] = [a for a in node["attrs"] if a[0] != name]


def copy_tree(node):
    """A copy of a tree whose lists can be edited (data arrays are shared)."""
    if "children" not in node:
        return {"attrs": list(node["attrs"]), "data": node["data"], "dtype": node["dtype"]}
    return {"attrs": list(node["attrs"]),
            "children": {k: copy_tree(c) for k, c in node["children"].items()}}


def target_dir(path):
    """The directory of an output file; refuses to rename over anything but a
    regular file (`-o /dev/null` must not replace the device)."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise InputError("%s: exists and is not a regular file" % path)
    return os.path.dirname(os.path.abspath(path))


def _manifest_attr(h5py, np, name, value, dt):
    """An attribute (name, value, h5py dtype or None) as a manifest entry:
    the kinds fattn writes (string, int64, uint8, float32, int64[2])."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) or (dt is not None and h5py.check_string_dtype(dt)):
        return {"name": name, "kind": "string", "value": str(value)}
    arr = np.asarray(value, dtype=dt)
    if arr.dtype == np.float32 and arr.shape == ():
        bits = struct.unpack("<I", arr.astype("<f4").tobytes())[0]
        return {"name": name, "kind": "float32", "bits": bits}
    if arr.dtype == np.uint8 and arr.shape == ():
        return {"name": name, "kind": "uint8", "value": int(arr)}
    if arr.dtype == np.int64 and arr.shape == ():
        return {"name": name, "kind": "int64", "value": int(arr)}
    if arr.dtype == np.int64 and arr.shape == (2,):
        return {"name": name, "kind": "int64_pair", "value": [int(x) for x in arr]}
    raise InputError("attribute %s: %s %s is not a kind fattn writes" % (name, arr.dtype,
                                                                         arr.shape))


def _manifest_node(h5py, np, node, blob):
    attrs = [_manifest_attr(h5py, np, n, v, dt) for n, v, dt in node["attrs"]]
    if "children" not in node:
        data = np.ascontiguousarray(node["data"], dtype=np.dtype(STORAGE[node["dtype"]]))
        raw = data.tobytes()
        entry = {"attrs": [a for a in attrs if a["name"] not in ("dtype", "digest")],
                 "dtype": node["dtype"], "shape": list(data.shape),
                 "offset": blob.tell(), "nbytes": len(raw)}
        blob.write(raw)
        return entry
    return {"attrs": attrs, "children": {k: _manifest_node(h5py, np, c, blob)
                                         for k, c in sorted(node["children"].items())}}


def write_tree(path, root, fattn=None):
    """Write a tree (load_tree's form; attributes (name, value, h5py dtype or
    None)) through fattn's writer: `fattn write-tree` builds it with the
    harness's tree and writes it as every run file is written (sorted order,
    no timestamps, libver V18..V110, dtype and digest on every dataset, a
    temporary name, fsync, rename, directory fsync)."""
    h5py, np = _h5()
    target_dir(path)
    work = tempfile.mkdtemp(prefix="fattn-tree-")
    try:
        with open(os.path.join(work, "data.bin"), "wb") as blob:
            manifest = {"schema": MANIFEST_SCHEMA, "root": _manifest_node(h5py, np, root, blob)}
        with open(os.path.join(work, "tree.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        _run_fattn(fattn, ["write-tree", os.path.join(work, "tree.json"),
                           os.path.join(work, "data.bin"), "-o", path])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def atomic_write_text(path, text):
    """Replace a text file atomically (temporary name, fsync, rename, fsync
    of the directory), as fattn replaces its outputs."""
    d = target_dir(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
