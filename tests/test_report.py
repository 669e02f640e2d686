#!/usr/bin/python3
"""End-to-end test of `fattn report` in a real browser (docs/report.md).

usage: test_report.py FATTN_EXE XXH128_EXE SHOT_DIR [MUTANT_EXE...]

A run file of `fattn run` and a copy with one tensor changed in a known
block (h5py, the digest made to match with XXH128_EXE, so that diff sees a
different tensor, not a corrupt one) make a failing diff; its report is
rendered by headless Chromium (Debian's `chromium`): the test reads the DOM
Chromium built (--dump-dom) for the verdict, the case grid and the
difference map over the changed block, and saves a screenshot as
SHOT_DIR/report-diff.png. A verify JSON report (a self-test mutant's, when
one is given, so that a case differs) is rendered the same way.

Hostile inputs (docs/reliability.md "Report"): a run file and a verify JSON
with markup in every string field are rendered with scripts enabled; the
markup's effects (a retitled page, an element it would create) must be
absent from Chromium's DOM and its text present as text. Specs with markup,
results outside the four, a goldens file libhdf5 crashes on, a FIFO and
outputs that are inputs are refused or reported, never obeyed. Exit 0
passed, 1 failed, 77 skipped (no chromium, no h5py), saying why.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FATTN, XXH, SHOT_DIR = sys.argv[1], sys.argv[2], sys.argv[3]
MUTANTS = sys.argv[4:]

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("SKIP: h5py/numpy not installed (Debian python3-h5py): %s" % e)
    sys.exit(77)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    print("SKIP: no chromium on PATH (Debian package chromium; tools/install-deps.sh "
          "installs it): the report is not rendered")
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="fattn-report-")
ENV = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
failures = []


def check(ok, what):
    print(("ok - " if ok else "FAIL - ") + what)
    if not ok:
        failures.append(what)


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, env=ENV, cwd=TMP)


def browser(page, *extra):
    """Chromium's DOM of page (file), after layout."""
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + os.path.join(TMP, "chromium-profile"), *extra,
            "file://" + os.path.abspath(page)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def dom_of(page):
    p = browser(page, "--dump-dom")
    check(p.returncode == 0 and "<html" in p.stdout,
          "chromium renders %s (rc %d%s)" % (os.path.basename(page), p.returncode,
                                            "" if p.returncode == 0 else ": " + p.stderr[-300:]))
    return p.stdout


def screenshot(page, out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    p = browser(page, "--screenshot=" + out, "--window-size=1100,1500",
                "--hide-scrollbars")
    ok = p.returncode == 0 and os.path.exists(out) and os.path.getsize(out) > 10000
    with open(out, "rb") if os.path.exists(out) else open(os.devnull, "rb") as f:
        ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
    check(ok, "chromium saves a screenshot %s" % out)


def redigest(ds):
    data = np.ascontiguousarray(ds[()]).tobytes()
    d = subprocess.run([XXH], input=data, capture_output=True, check=True).stdout
    ds.attrs.modify("digest", d.decode().strip())


CASE = "mask.causal.sq_gt_skv.f16"
TENSOR = "cases/%s/forward/out" % CASE
# the changed block: sequence positions 8..13 of batch 1, head 0, every d
ROWS, BATCH, HEAD = range(8, 14), 1, 0


def make_runs():
    p = run(FATTN, "run", "--filter", "mask.causal*", "-o", "a.h5")
    check(p.returncode == 0, "fattn run writes a.h5 (%s)" % p.stderr.strip())
    a, b = os.path.join(TMP, "a.h5"), os.path.join(TMP, "b.h5")
    shutil.copy(a, b)
    with h5py.File(b, "r+") as f:
        ds = f[TENSOR]
        raw = ds[()].view(np.uint16).copy()  # sbhd: [s, b, h, d]
        for s in ROWS:
            raw[s, BATCH, HEAD, :] ^= 0x0001  # one ULP away, sign kept
        ds[...] = raw.view(ds.dtype)
        redigest(ds)
        shape = raw.shape
    return a, b, shape


def test_diff_report():
    a, b, shape = make_runs()
    p = run(FATTN, "diff", a, b)
    check(p.returncode == 1 and "out" in p.stdout, "fattn diff sees the changed tensor")
    page = os.path.join(TMP, "diff.html")
    p = run(FATTN, "report", a, b, "-o", page)
    check(p.returncode == 0 and "report: wrote" in p.stdout,
          "fattn report A B writes the page (%s)" % p.stderr.strip())
    html = open(page).read()
    check("http://" not in html.replace("http://www.w3.org/2000/svg", "") and
          "https://" not in html and "<script" not in html and "<link" not in html,
          "the page loads nothing and runs no script")
    dom = dom_of(page)
    check(re.search(r'id="verdict"[^>]*>DIFFERENT: 1 difference<', dom) is not None,
          "the verdict says one difference")
    check('id="grid"' in dom and '<th>FP8</th>' in dom, "the DOM has the case grid, FP8 column")
    chips = re.findall(r'<a class="chip r-(\w+)" href="#([^"]+)"', dom)
    n = len(run(FATTN, "cases", "--filter", "mask.causal*").stdout.splitlines())
    check(n >= 2 and len(chips) == n and sum(r == "different" for r, _ in chips) == 1,
          "the grid has the %d cases, one different (%s)" % (n, chips))
    check(all(('id="%s"' % h) in dom for _, h in chips), "every square links to its details")
    block = len(ROWS) * shape[3]
    m = re.search(r'<h3 class="mono">/%s</h3>(.*?)</div>\s*</div>' % re.escape(TENSOR), dom,
                  re.S)
    check(m is not None, "the changed tensor has its section")
    sec = m.group(1) if m else ""
    maps = re.findall(r'<div class="mono">([^<]*)</div>\s*<svg class="diffmap"(.*?)</svg>', sec,
                      re.S)
    check(len(maps) == 1 and ("axis 1 = %d, axis 2 = %d (%d differing)" % (BATCH, HEAD, block))
          == maps[0][0].strip() if maps else False,
          "one difference map, the changed batch and head, %d elements (%s)"
          % (block, [x[0] for x in maps]))
    rects = re.findall(r'<rect x="(\d+)" y="(\d+)" width="(\d+)"', maps[0][1]) if maps else []
    cells = rects  # the background rect has no x
    px = int(cells[0][2]) if cells else 1
    rows = sorted({int(y) // px for _, y, _ in cells})
    check(rows == list(ROWS) and len(cells) == block,
          "the map marks exactly the changed rows %s (got %s)" % (list(ROWS), rows))
    check('class="histogram"' in sec and ">%d</text>" % block in sec,
          "the ULP histogram counts %d elements at 1 ULP" % block)
    first = re.findall(r"<tr><td class=\"mono\">\[([\d,]+)\]</td>", sec)
    check(first[:1] == ["8,1,0,0"], "the first differing element is [8,1,0,0] (%s)" % first[:2])
    check('class="provenance"' in dom, "provenance of both sides")
    screenshot(page, os.path.join(SHOT_DIR, "report-diff.png"))


def test_verify_report():
    exe = next((m for m in MUTANTS if m.endswith("window_unnormalised")), FATTN)
    js = os.path.join(TMP, "verify.json")
    p = run(exe, "verify", "--filter", "mask.causal*", "--json", js)
    check(p.returncode in (0, 1) and os.path.exists(js), "verify writes its JSON (%s)"
          % p.stderr.strip()[-200:])
    page = os.path.join(TMP, "verify.html")
    p = run(FATTN, "report", js, "-o", page)
    check(p.returncode == 0, "fattn report VERIFY.json writes the page (%s)" % p.stderr.strip())
    dom = dom_of(page)
    rep = json.load(open(js))
    chips = re.findall(r'<a class="chip r-(\w+)" href="#([^"]+)"', dom)
    want = sorted(c["result"] for c in rep["cases"])
    check(sorted(r for r, _ in chips) == want, "the grid colours each case by its result %s"
          % want)
    check(all(('id="%s"' % h) in dom for _, h in chips), "every square links to its details")
    check(rep["verdict"] in dom, "the verdict is shown")
    check("at git_rev %s" % rep["git_rev"] in dom and 'class="provenance"' in dom,
          "provenance of both sides: the run's revision and the goldens file's attributes")
    if exe != FATTN:
        check("different" in want, "the mutant's report has a different case")
        bad = [c for c in rep["cases"] if c["result"] == "different"]
        check(bad and dom.count('class="cause"') == len(bad) and
              "save_ctx@window_size: legacy" in dom,
              "each differing case's details start with its earliest cause, values included")
        check(not rep.get("contrast") or 'id="contrast"' in dom,
              "the contrast of the failing cases is under the verdict")


def test_errors():
    bad = os.path.join(TMP, "bad.json")
    with open(bad, "w") as f:
        f.write('{"schema": "other"}')
    for args, what in [((bad, "-o", "x.html"), "not a fattn verify JSON report"),
                       ((bad,), "-o REPORT.html is required"),
                       ((bad, "-o", bad), "bad.json"),
                       (("a.h5", "a.h5", "a.h5", "-o", "x.html"), "too many inputs")]:
        p = run(FATTN, "report", *args)
        check(p.returncode == 2 and what in p.stderr and not os.path.exists(
            os.path.join(TMP, "x.html")), "report %s: exit 2, %r (%s)" % (args, what,
                                                                       p.stderr.strip()))


# Markup that acts if it lands unescaped anywhere: as text (the script, the
# image's handler), inside a double- or single-quoted attribute (the quotes
# end it, the handler is then an attribute of the element). Its effects are
# built from pieces, so that they show in the DOM only if the script ran.
PAYLOAD = ("\"'><script>document.title='PW'+'NED'</script>"
           "<img src=x onerror=\"document.body.appendChild(document.createElement('x-'+'pwned'))\">"
           "<svg onload=\"document.title='PW'+'NED'\"></svg>\x1b]0;t\x07")
BAD_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "bad")


def check_inert(page, what):
    """page renders with no effect of PAYLOAD and shows its text."""
    html = open(page, encoding="utf-8", errors="replace").read()
    check("<script" not in html and "<img" not in html and "<svg onload" not in html and
          "\x1b" not in html, "%s: the page holds the markup only escaped" % what)
    dom = dom_of(page)
    check("PWNED" not in dom and "x-pwned" not in dom,
          "%s: no script ran in Chromium (no retitle, no element made)" % what)
    check("&lt;script&gt;document.title='PW'+'NED'&lt;/script&gt;" in dom,
          "%s: the markup shows as text" % what)


def test_hostile_runs():
    a = os.path.join(TMP, "a.h5")
    h = os.path.join(TMP, "hostile.h5")
    shutil.copy(a, h)
    with h5py.File(h, "r+") as f:
        for k in list(f.attrs):  # root provenance: covered by no digest
            if isinstance(f.attrs[k], (str, bytes)) and k != "schema":
                f.attrs.modify(k, PAYLOAD)
    page = os.path.join(TMP, "hostile-runs.html")
    p = run(FATTN, "report", h, a, "-o", page)
    check(p.returncode == 0, "report of a run file with markup in its provenance: exit 0 (%s)"
          % p.stderr.strip()[-300:])
    if p.returncode == 0:
        check_inert(page, "hostile provenance")
    # a spec's strings with markup: refused as inspect refuses them
    for key, value in [("layout", PAYLOAD), ("bias", PAYLOAD), ("softmax", PAYLOAD),
                       ("mask", "x\" onmouseover=\"alert(1)")]:
        bad = os.path.join(TMP, "spec-%s.h5" % key)
        shutil.copy(a, bad)
        with h5py.File(bad, "r+") as f:
            c = f["cases/%s" % CASE]
            spec = json.loads(c.attrs["spec"])
            spec[key] = value
            c.attrs.modify("spec", json.dumps(spec))
            del c.attrs["attrs_digest"]  # an absent digest: the spec alone must stop it
        out = os.path.join(TMP, "spec.html")
        p = run(FATTN, "report", a, bad, "-o", out)
        check(p.returncode == 2 and CASE in p.stderr and "spec" in p.stderr and
              not os.path.exists(out),
              "a spec with markup in %s: exit 2 naming the case, no page (%s)"
              % (key, p.stderr.strip()[-200:]))
        pi = run(FATTN, "inspect", bad)
        check(pi.returncode == 2, "inspect refuses the same file")


def hostile_verify_json(js):
    rep = json.load(open(js))
    for k, v in list(rep.items()):
        if isinstance(v, str) and k != "schema":
            rep[k] = PAYLOAD
    for c in rep["cases"]:
        c["first"] = [{"path": PAYLOAD, "why": PAYLOAD}]
        c["differences"] = 1
        for side in ("legacy", "split"):
            c[side] = {"status": PAYLOAD, "message": PAYLOAD}
    return rep


def test_hostile_verify():
    js = os.path.join(TMP, "verify.json")
    rep = hostile_verify_json(js)
    hj = os.path.join(TMP, "hostile-verify.json")
    json.dump(rep, open(hj, "w"))
    page = os.path.join(TMP, "hostile-verify.html")
    p = run(FATTN, "report", hj, "-o", page)
    check(p.returncode == 0, "report of a verify JSON with markup in every string: exit 0 (%s)"
          % p.stderr.strip()[-300:])
    if p.returncode == 0:
        check_inert(page, "hostile verify JSON")
    # a result outside the four goes into a class name and a title: refused
    rep["cases"][0]["result"] = PAYLOAD
    json.dump(rep, open(hj, "w"))
    out = os.path.join(TMP, "result.html")
    p = run(FATTN, "report", hj, "-o", out)
    check(p.returncode == 2 and "result is not one of" in p.stderr and not os.path.exists(out),
          "a case result with markup: exit 2, no page (%s)" % p.stderr.strip()[-200:])
    # the goldens file it names: read in the isolated child, a crash is a line
    rep = json.load(open(js))
    crash = os.path.join(BAD_DATA, "hdf5-upstream-global-heap-overflow.h5")
    # (under AddressSanitizer the child ends by ASan's report, exit 1)
    for goldens, what in [(crash, "HDF5 library failed reading|failed in the child"),
                          (os.path.join(TMP, "a.h5"), None)]:
        rep["goldens"] = goldens
        json.dump(rep, open(hj, "w"))
        p = run(FATTN, "report", hj, "-o", page)
        html = open(page).read() if p.returncode == 0 else ""
        if what:
            check(p.returncode == 0 and "cannot be read here" in html and
                  re.search(what, html) is not None,
                  "goldens libhdf5 crashes on: exit 0, the page says why (%s)"
                  % p.stderr.strip()[-200:])
        else:
            check(p.returncode == 0 and 'class="provenance"' in html,
                  "goldens that are a run file: its provenance is shown")
    # outputs that are inputs: the goldens file, the --cases file
    p = run(FATTN, "report", hj, "-o", rep["goldens"])
    check(p.returncode == 2 and "goldens" in p.stderr,
          "-o naming the goldens file the JSON names: exit 2 (%s)" % p.stderr.strip())
    cases = os.path.join(TMP, "cases.json")
    with open(cases, "w") as f:
        f.write("[]")
    p = run(FATTN, "report", hj, "--cases", cases, "-o", cases)
    check(p.returncode == 2 and "is an input" in p.stderr and open(cases).read() == "[]",
          "-o naming the --cases file: exit 2, the file untouched (%s)" % p.stderr.strip())
    fifo = os.path.join(TMP, "fifo.json")
    os.mkfifo(fifo)
    try:
        p = subprocess.run([FATTN, "report", fifo, "-o", page], capture_output=True, text=True,
                           env=ENV, cwd=TMP, timeout=30)
        check(p.returncode == 2 and "regular file" in p.stderr,
              "a FIFO as VERIFY.json: exit 2 at once (%s)" % p.stderr.strip())
    except subprocess.TimeoutExpired:
        check(False, "a FIFO as VERIFY.json: exit 2 at once (it blocked)")


def test_fp8_legend():
    p = run(FATTN, "run", "--filter", "fp8.ds.*", "-o", "fp8.h5")
    check(p.returncode == 0, "fattn run writes the FP8 cases (%s)" % p.stderr.strip()[-200:])
    n = len(run(FATTN, "cases", "--filter", "fp8.ds.*").stdout.splitlines())
    page = os.path.join(TMP, "fp8.html")
    p = run(FATTN, "report", "fp8.h5", "fp8.h5", "-o", page)
    dom = dom_of(page) if p.returncode == 0 else ""
    m = re.search(r"<tr><th>layout</th><th>mask</th>(.*?)</tr>", dom)
    cols = re.findall(r"<th>([^<]*)</th>", m.group(1)) if m else []
    rows = re.findall(r"<tr><td.*?</tr>", dom.split('id="grid"', 1)[-1].split("</table>")[0])
    in_fp8 = sum(len(re.findall(r'class="chip', re.findall(r"<td>.*?</td>", r)[-1]))
                 for r in rows if re.findall(r"<td>.*?</td>", r))
    check(n > 0 and cols[-1:] == ["FP8"] and in_fp8 == n and
          ("FP8: %d cases" % n) in dom and "does not model FP8" not in dom,
          "the FP8 column holds the %d FP8 cases and the legend says so (%d in it)" % (n, in_fp8))


def test_bounded():
    """Many differing tensors: the page draws a bounded number and says
    which command lists the rest; the grid stays whole."""
    p = run(FATTN, "run", "--filter", "mask.*", "-o", "many-a.h5")
    check(p.returncode == 0, "fattn run writes many-a.h5 (%s)" % p.stderr.strip()[-200:])
    a, b = os.path.join(TMP, "many-a.h5"), os.path.join(TMP, "many-b.h5")
    shutil.copy(a, b)
    changed = []
    with h5py.File(b, "r+") as f:
        for cid in f["cases"]:
            for t in ("forward/out", "backward/dq", "backward/dk", "backward/dv"):
                if t in f["cases"][cid]:
                    ds = f["cases"][cid][t]
                    raw = ds[()].view(np.uint16).copy()
                    raw.flat[0] ^= 1
                    ds[...] = raw.view(ds.dtype)
                    redigest(ds)
                    changed.append("/cases/%s/%s" % (cid, t))
    page = os.path.join(TMP, "many.html")
    p = run(FATTN, "report", a, b, "-o", page)
    html = open(page).read() if p.returncode == 0 else ""
    drawn = html.count('<svg class="diffmap"') and html.count('<div class="tensor">')
    check(len(changed) > 8 and drawn == 8 and 'id="bounded"' in html and
          ("%d more differing tensors not drawn" % (len(changed) - 8)) in html and
          "fattn diff %s %s</code> lists them all" % (a, b) in html,
          "%d differing tensors: 8 drawn, the rest named with the command that lists them "
          "(%d drawn)" % (len(changed), drawn))
    n = len(run(FATTN, "cases", "--filter", "mask.*").stdout.splitlines())
    chips = re.findall(r'<a class="chip r-(\w+)"', html)
    check(len(chips) == n and all(c == "different" for c in chips),
          "the grid still shows all %d cases as different" % n)


try:
    test_diff_report()
    test_bounded()
    test_verify_report()
    test_errors()
    test_hostile_runs()
    test_hostile_verify()
    test_fp8_legend()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
