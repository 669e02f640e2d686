"""Why a pair of run files differs, not only whether: each case's counted
differences in run order and its earliest cause, and the contrast of the
failing cases with the passing ones. The same rules `fattn verify` applies
(harness/check/cause.h, harness/check/contrast.h; docs/verify.md "The
earliest cause", "The contrast"), over `fattn diff --json` entries."""
import re

# run order (cause.h's fh_verify_state)
STATES = ["case", "inputs", "engine_call/forward", "forward", "returned", "save_ctx",
          "engine_call/backward", "backward", "other"]
_GROUPS = [("engine_call/forward", 2), ("engine_call/backward", 6), ("engine_call", 2),
           ("inputs", 1), ("forward", 3), ("returned", 4), ("save_ctx", 5), ("backward", 7)]
_CASE = re.compile(r"^/cases/([^/@]+)(.*)$")


def split_path(path):
    """/cases/ID/rest -> (ID, rest below the case: "backward/dq", "@spec")."""
    m = _CASE.match(path)
    if not m:
        return None, path
    rest = m.group(2)
    return m.group(1), rest[1:] if rest.startswith("/") else rest


def step_of(rel):
    """k of a schedule step's "steps/<k>/..." (0: none) and the rest."""
    m = re.match(r"^steps/(\d+)(?:/(.*))?$", rel)
    if m and int(m.group(1)) > 0:
        return int(m.group(1)), m.group(2) or ""
    return 0, rel


def state_of(rel):
    """The state index of a path below the case (cause.c's rule)."""
    _, rel = step_of(rel)
    if rel.startswith("@"):
        return 0
    for g, s in _GROUPS:
        if rel == g or rel.startswith(g + "/") or rel.startswith(g + "@") or \
                rel.startswith(g + "."):
            return s
    return len(STATES) - 1


def order_key(rel, entry, seq):
    """By step, state in run order, tensors before attributes, then as found."""
    tensor = entry.get("kind") in ("dataset", "digest")
    step, _ = step_of(rel)
    return (step, state_of(rel), 0 if tensor else 1, seq)


def states_in(names):
    """The state indices a case holds, from the names of its groups below the
    case ("inputs", "engine_call/forward", ...)."""
    return {s for g, s in _GROUPS if g in names and g != "engine_call"}


def diff_text(rel, e, a_name, b_name, what):
    """"<rel>: <a_name> <a>, <b_name> <b>" for an attribute of another value
    (absent on one side: "absent"), else "<rel>: <what>"."""
    if e.get("kind") == "attribute" and e["status"] in ("value", "missing_in_a",
                                                         "missing_in_b"):
        a = e.get("a", "absent" if e["status"] == "missing_in_a" else "?")
        b = e.get("b", "absent" if e["status"] == "missing_in_b" else "?")
        return f"{rel}: {a_name} {a}, {b_name} {b}"
    return f"{rel}: {what}"


def case_cause(items, present, a_name, b_name, what_of, shown=2, then_shown=4):
    """The cause of one case: items [(rel, entry)] in listing order (sorted
    by order_key), present the states both files hold. Returns a dict:
    state, equal_before, first [diff texts], then [paths], text."""
    if not items:
        return None
    step0, _ = step_of(items[0][0])
    s0 = state_of(items[0][0])
    first = [(r, e) for r, e in items if state_of(r) == s0 and step_of(r)[0] == step0]
    later = [r for r, e in items if not (state_of(r) == s0 and step_of(r)[0] == step0)]
    equal = [STATES[s] for s in sorted(present) if s < s0] if step0 == 0 else []
    texts = [diff_text(r, e, a_name, b_name, what_of(e)) for r, e in first]
    line = ""
    if equal:
        line += ", ".join(equal) + " equal; "
    if step0 > 1:
        line += "steps/1 equal; " if step0 == 2 else f"steps/1 to steps/{step0 - 1} equal; "
    line += "; ".join(texts[:shown])
    if len(texts) > shown:
        line += f" (and {len(texts) - shown} more there)"
    if later:
        line += "; then " + ", ".join(later[:then_shown])
        if len(later) > then_shown:
            line += f" and {len(later) - then_shown} more"
    return {"state": (f"steps/{step0}/" if step0 else "") + STATES[s0], "step": step0,
            "equal_before": equal, "first": texts, "then": later, "text": line}


# ---- the contrast (contrast.h's rule) -----------------------------------------------

VALUES_SHOWN = 8


def _values(name, vals):
    vals = sorted(vals)
    if len(vals) == 1:
        return f"{name} {vals[0]}"
    shown = ", ".join(vals[:VALUES_SHOWN])
    more = f", and {len(vals) - VALUES_SHOWN} more" if len(vals) > VALUES_SHOWN else ""
    return f"{name} in {{{shown}{more}}}"


def contrast(features, failing, passing):
    """The contrast line of failing and passing case ids, features: id ->
    {feature: value} (`fattn cases --resolved --json`'s "features"). None
    when fewer than two fail or none passes."""
    failing = [c for c in failing if c in features]
    passing = [c for c in passing if c in features]
    if len(failing) < 2 or not passing:
        return None
    # fattn lists each case's features in the order of its table (FH_FEATURES,
    # harness/model/case_features.h), which is also the contrast's tie-break:
    # read the names and their order from there, so that none is left out
    keys = [k for k in features[failing[0]] if all(k in features[c] for c in failing + passing)]
    sets = {k: {features[c][k] for c in failing} for k in keys}

    def misses(k1, k2=None):
        return sum(1 for c in passing if features[c][k1] in sets[k1] and
                   (k2 is None or features[c][k2] in sets[k2]))

    best = min(((misses(k), i, k) for i, k in enumerate(keys) if misses(k) < len(passing)),
               default=None)
    out = {"failing": len(failing), "passing": len(passing), "features": []}
    if best is None:
        out["text"] = (f"contrast: no feature value is shared by all {len(failing)} failing "
                       f"cases and missing in a passing one ({len(passing)} passing)")
        return out
    m1, _, k1 = best
    chosen, m = [k1], m1
    if m1:
        second = min(((misses(k1, k), i, k) for i, k in enumerate(keys) if k != k1),
                     default=None)
        if second and second[0] < m1:
            chosen.append(second[2])
            m = second[0]
    text = "contrast: the %d failing cases all have %s" % (
        len(failing), " and ".join(_values(k, sets[k]) for k in chosen))
    if m:
        text += f"; so do {m} of the {len(passing)} passing cases"
    else:
        text += "; none of the %d passing cases ha%s %s" % (
            len(passing), "s" if len(passing) == 1 else "ve", "both" if len(chosen) > 1 else "that")
    only = [c for c in passing if features[c][k1] not in sets[k1]]
    if only:
        text += "; no case with %s fails (%d case%s)" % (
            _values(k1, {features[c][k1] for c in only}), len(only), "" if len(only) == 1 else "s")
    out.update(text=text, features=chosen, passing_with_them=m)
    return out
