#!/usr/bin/python3
"""Every GPU test skips alike where no CUDA device is usable (issue 22, point 7).

ctest lists the tests labelled gpu (so a new one is covered the day it is added); each runs with
CUDA_VISIBLE_DEVICES="" (no device visible: the same on a machine with GPUs as on one without a
driver) and must exit 77 with exactly one line of output,

    SKIP <binary>: no usable CUDA device (<why>)     or   ...: no usable CUDA device: <why>

and carry ctest's SKIP_RETURN_CODE 77, so that it is reported as skipped rather than passed or
failed. A GPU test binary that forgets tests/xt_test_cuda.h fails here (it passes trivially, fails,
or says something else), on the CPU-only CI too. A gpu test run through an interpreter (a script,
whose skip may have other reasons first, such as goldens not recorded yet) must exit 77 with one
line "SKIP...: <why>" as well.

usage: test_gpu_skip.py CTEST BUILD_DIR     exit 0 pass, 1 fail, 77 skip (no gpu test built)"""
import json
import os
import re
import subprocess
import sys

CTEST, BUILD = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


listing = subprocess.run([CTEST, "--show-only=json-v1", "-L", "^gpu$"], cwd=BUILD, capture_output=True, text=True,
                         timeout=120)
if listing.returncode != 0:
    print(f"ctest --show-only failed: {listing.stderr.strip()}")
    sys.exit(1)
tests = json.loads(listing.stdout)["tests"]
if not tests:
    print("skip: no test labelled gpu in this build (CUDA off)")
    sys.exit(77)

env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
for t in tests:
    name, cmd = t["name"], t.get("command") or []
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    check(str(props.get("SKIP_RETURN_CODE")) == "77", f"{name}: SKIP_RETURN_CODE is {props.get('SKIP_RETURN_CODE')}")
    if not check(cmd and os.path.isfile(cmd[0]), f"{name}: not built ({cmd[:1]})"):
        continue
    try:
        p = subprocess.run(cmd, cwd=t.get("cwd") or BUILD, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"{name}: still running after 120 s with no device visible")
        continue
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    binary = os.path.basename(cmd[0]) == name  # xt_add_test: the executable is named after the test
    want = re.compile(r"^SKIP " + re.escape(name) + r": no usable CUDA device( \(|: )\S.*$" if binary else
                      r"^SKIP( \S+)?: \S.*$")
    ok = check(p.returncode == 77, f"{name}: exit {p.returncode}, want 77")
    ok &= check(len(lines) == 1 and want.match(lines[0]) is not None, f"{name}: output {lines[:4]!r} !~ {want.pattern}")
    if ok:
        print(f"ok   {name}: {lines[0]}")

print(f"{len(tests)} gpu tests, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
