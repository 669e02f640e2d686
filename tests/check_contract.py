#!/usr/bin/env python3
"""docs/contract.md names every command, flag and spec key the code has.

usage: check_contract.py FATTN docs/contract.md

The commands come from `fattn --help`, each command's flags from its own
`--help` synopsis (the lines up to the first blank one), the spec keys from
the parser's own message for an unknown key. Each must appear in backticks:
a flag in its command's section (`### \\`fattn CMD\\``), a key anywhere under
"## Case-spec keys". Output is TAP; the first tests run the extractors on
synthetic text, so that a parser that finds nothing cannot pass."""
import os
import re
import subprocess
import sys
import tempfile

results = []


def check(name, ok, why=""):
    results.append((name, ok, why))


def commands_of(top_help):
    out, on = [], False
    for line in top_help.splitlines():
        if line.startswith("commands:"):
            on = True
            continue
        if on:
            m = re.match(r"  ([a-z][a-z-]*)\s", line)
            if not m:
                break
            out.append(m.group(1))
    return out


def flags_of(usage):
    synopsis = usage.split("\n\n", 1)[0]
    return sorted(set(re.findall(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z-]*)", synopsis)))


def sections(doc):
    """'### `fattn CMD`' -> its text; '## Case-spec keys' -> 'KEYS'."""
    out, cur = {}, None
    for line in doc.splitlines():
        m = re.match(r"### `fattn ([a-z-]+)`", line)
        if m:
            cur = m.group(1)
            out[cur] = ""
            continue
        if line.startswith("## "):
            cur = "KEYS" if line.startswith("## Case-spec keys") else None
            if cur:
                out[cur] = ""
            continue
        if cur:
            out[cur] += line + "\n"
    return out


def keys_of(message):
    m = re.search(r"\(keys: ([a-z0-9_ ]+)\)", message)
    return m.group(1).split() if m else []


# the extractors on known text first
check("extractor: commands", commands_of("x\ncommands:\n  run    r\n  diff   d\n\nexit") ==
      ["run", "diff"])
check("extractor: flags", flags_of("usage: fattn x [-k S] [--a-b F] -o O\n\n  --hidden") ==
      ["--a-b", "-k", "-o"])
check("extractor: sections", sections("## Commands\n### `fattn run`\n`--x`\n## Case-spec keys\n"
                                      "`id`\n## Run\n`no`\n") ==
      {"run": "`--x`\n", "KEYS": "`id`\n"})
check("extractor: keys", keys_of("key 'q': unknown key (keys: a b_c d)") == ["a", "b_c", "d"])

fattn, doc_path = sys.argv[1], sys.argv[2]
doc = open(doc_path, encoding="utf-8").read()
sec = sections(doc)


def run(*args):
    p = subprocess.run([fattn] + list(args), capture_output=True, text=True)
    return p.stdout + p.stderr


cmds = commands_of(run("--help"))
check("fattn --help lists commands", len(cmds) >= 8, repr(cmds))
for cmd in cmds:
    check("command %s has a section" % cmd, cmd in sec)
    text = sec.get(cmd, "")
    flags = flags_of(run(cmd, "--help"))
    for f in flags:
        check("%s %s documented" % (cmd, f), "`%s`" % f in text or "`%s " % f in text)

with tempfile.TemporaryDirectory() as d:
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as fh:
        fh.write('[{"id":"x","b":1,"h":1,"sq":2,"d_qk":8,"no_such_key":1}]')
    keys = keys_of(run("cases", "--cases", bad))
check("the parser lists its keys", len(keys) >= 28, repr(keys))
for k in keys:
    check("spec key %s documented" % k, "`%s`" % k in sec.get("KEYS", ""))

print("1..%d" % len(results))
failed = 0
for i, (name, ok, why) in enumerate(results, 1):
    print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, (" # " + why) if why and not ok
                            else ""))
    failed += not ok
print("%d passed, %d failed" % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
