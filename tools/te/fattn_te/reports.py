"""fattn-te verify's reports for CI: the JSON document (schema
fattn-te-verify/1) and JUnit XML, from the pairs' reports (verify._verdict)
(docs/te.md, "Verify for CI")."""
import sys
from xml.sax.saxutils import quoteattr, escape


def document(args, names, roots, pairs, errored, rc):
    """The whole verify as one JSON-able dict."""
    return {
        "schema": "fattn-te-verify/1",
        "backend": args.backend,
        "call": args.call,
        "te": [{"arg": a, "label": n} for a, n in zip(args.te, names)],
        "cases": args.cases, "filter": args.filter,
        "pairs": [{k: v for k, v in p.items() if k != "line"} | {"text": p["line"]}
                  for p in pairs],
        "errored": [{"te": n, "cases": e} for n, e in zip(names, errored)],
        "exit": rc,
    }


def _x(s):
    """XML text, control bytes as '?' (as fattn verify's JUnit writes)."""
    return escape("".join(c if c in "\n\t" or ord(c) >= 32 else "?" for c in str(s)))


def _a(s):
    return quoteattr("".join(c if ord(c) >= 32 else "?" for c in str(s)))


def junit(doc):
    """One <testsuite> per pair; in it one testcase per case (a failure for
    one that differs: its cause as the message, its differences as the
    text; an error for one that errored) and one named "pair" holding the
    verdict."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    suites = []
    total = fails = errs = 0
    for p in doc["pairs"]:
        name = f"{p['a']} -> {p['b']}"
        cases = []
        nf = ne = 0
        for cid in p["case_ids"]:
            cls = f"fattn_te.{p['a']}.{p['b']}.{cid}"
            f = p["failing"].get(cid)
            if f is None:
                cases.append(f'    <testcase classname={_a(cls)} name="case"/>')
                continue
            if f["errored"]:
                ne += 1
                cases.append(f'    <testcase classname={_a(cls)} name="case">\n'
                             f'      <error type="error" message={_a("errored in " + ", ".join(f["errored"]))}/>\n'
                             f'    </testcase>')
                continue
            nf += 1
            lines = [f"{d['path']}: {d['what']}" for d in f["differences"]]
            msg = f["cause"]["text"] if f.get("cause") else f"{len(lines)} differences"
            cases.append(f'    <testcase classname={_a(cls)} name="case">\n'
                         f'      <failure type="different" message={_a(msg)}>'
                         f'{_x(chr(10).join(lines))}</failure>\n    </testcase>')
        verdict_cls = f"fattn_te.{p['a']}.{p['b']}"
        pv = ('    <testcase classname=%s name="pair"><system-out>%s</system-out></testcase>'
              % (_a(verdict_cls), _x(p["text"])))
        cases.insert(0, pv)
        total += len(cases)
        fails += nf
        errs += ne
        suites.append(f'  <testsuite name={_a(name)} tests="{len(cases)}" failures="{nf}" '
                      f'errors="{ne}" skipped="0">\n' + "\n".join(cases) + "\n  </testsuite>")
    out.append(f'<testsuites name="fattn-te verify" tests="{total}" failures="{fails}" '
               f'errors="{errs}">')
    out += suites
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def write(path, text, stdout):
    """text to path, replaced atomically and never through a link
    (guard.write_text, as fattn-te's other files), or to stdout for '-'."""
    if path == "-":
        stdout.write(text)
        stdout.flush()
        return
    from . import guard
    guard.write_text(path, text)
    print(f"fattn-te verify: wrote {path}", file=sys.stderr)
