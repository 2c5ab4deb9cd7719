#!/usr/bin/env python3
"""The MindSpore conformance suite (issue 31): every program in programs/ runs once under
MindSpore and once under mixprec (run_program.py), each in its own process, and the JSON facts
the two runs print are compared key by key. A difference passes only when expected.py lists it,
with its reason (the same list is docs/amp.md's "Where mixprec differs"); an entry of expected.py
that no longer matches anything fails too, so that the list stays true.

    run_suite.py [--mindspore-python PY] [--only SUBSTRING] [--json FILE] [--jobs N] [-v]

The mixprec side runs under this interpreter (with the module on PYTHONPATH, as CTest sets it);
the MindSpore side under --mindspore-python, default $MINDSPORE_PYTHON or
build/mindspore-venv/bin/python3 (made by scripts/setup_mindspore.sh). Without an interpreter
that imports mindspore the suite is not run: it says so and exits 77 (CTest: "Not Run", never
"Passed").
"""
import argparse
import concurrent.futures
import fnmatch
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77
sys.path.insert(0, HERE)
import expected  # noqa: E402


def default_mindspore_python():
    return os.environ.get("MINDSPORE_PYTHON") or os.path.join(
        os.environ.get("MIXPREC_BUILD_DIR", os.path.join(ROOT, "build")), "mindspore-venv", "bin", "python3")


def child_env(framework):
    env = dict(os.environ)
    env.update({"GLOG_v": "3", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"})
    if framework == "mindspore":
        env.pop("PYTHONPATH", None)  # the mixprec module must not shadow anything there
    return env


def run_one(python, framework, program, timeout):
    t0 = time.monotonic()
    try:
        # In a scratch directory: MindSpore writes rank_0/ (logs) and rewritten_network/ (O1's
        # rewritten source) into the working directory.
        with tempfile.TemporaryDirectory(prefix="mindspore-conformance-") as scratch:
            p = subprocess.run([python, os.path.join(HERE, "run_program.py"), framework, os.path.join(HERE, program)],
                               capture_output=True, text=True, timeout=timeout, env=child_env(framework),
                               cwd=scratch)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "seconds": timeout}
    seconds = time.monotonic() - t0
    lines = [l for l in p.stdout.splitlines() if l.startswith("FACTS ")]
    if p.returncode != 0 or len(lines) != 1:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
        return {"error": f"exit {p.returncode}, {len(lines)} FACTS lines\n{tail}", "seconds": seconds}
    out = json.loads(lines[0][len("FACTS "):])
    out["seconds"] = seconds
    return out


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        return math.isclose(a, b, rel_tol=2e-3, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


MISSING = "<absent>"


def matches(pattern, value):
    if pattern is expected.ANY:
        return True
    if isinstance(pattern, expected.OneOf):
        return any(same(p, value) for p in pattern.values)
    return same(pattern, value)


def find_expected(program, key, ms_value, mp_value):
    for i, e in enumerate(expected.DIFFERENCES):
        if not fnmatch.fnmatchcase(program, e["program"]):
            continue
        if not any(fnmatch.fnmatchcase(key, k) for k in e["keys"]):
            continue
        if matches(e.get("mindspore", expected.ANY), ms_value) and matches(e.get("mixprec", expected.ANY), mp_value):
            return i
    return None


def compare(program, ms, mp):
    """[(key, ms_value, mp_value, expected_index or None)] for every differing key, and the count
    of compared keys."""
    keys = sorted(set(ms["facts"]) | set(mp["facts"]))
    diffs = []
    for k in keys:
        a = ms["facts"].get(k, MISSING)
        b = mp["facts"].get(k, MISSING)
        if not same(a, b):
            diffs.append((k, a, b, find_expected(program, k, a, b)))
    return diffs, len(keys)


def short(v):
    s = json.dumps(v)
    return s if len(s) <= 70 else s[:67] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mindspore-python", default=default_mindspore_python())
    ap.add_argument("--only", default="", help="run only the programs whose file name contains this")
    ap.add_argument("--json", help="write every fact of both runs and the comparison to this file")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("-v", "--verbose", action="store_true", help="show the expected differences too")
    args = ap.parse_args()

    ms_python = args.mindspore_python
    probe = None
    if os.path.exists(ms_python):
        probe = subprocess.run([ms_python, "-c", "import mindspore; print(mindspore.__version__)"],
                               capture_output=True, text=True, env=child_env("mindspore"))
    if probe is None or probe.returncode != 0:
        why = f"{ms_python} does not exist" if probe is None else f"{ms_python} cannot import mindspore"
        print(f"NOT RUN: the MindSpore conformance suite needs MindSpore: {why}.\n"
              f"Make it with scripts/setup_mindspore.sh (a venv under build/, from PyPI), or pass "
              f"--mindspore-python / set MINDSPORE_PYTHON.")
        return SKIP
    ms_version = probe.stdout.strip().splitlines()[-1]
    try:
        import mixprec  # noqa: F401
    except ImportError as e:
        print(f"FAILED: this interpreter ({sys.executable}) cannot import mixprec: {e}; "
              f"put the module's directory (build/python) on PYTHONPATH")
        return 1

    programs = sorted(f for f in os.listdir(os.path.join(HERE, "programs"))
                      if f.endswith(".py") and args.only in f)
    jobs = [(p, fw) for p in programs for fw in ("mindspore", "mixprec")]
    pythons = {"mindspore": ms_python, "mixprec": sys.executable}
    results = {p: {} for p in programs}
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, pythons[fw], fw, os.path.join("programs", p), args.timeout): (p, fw)
                   for p, fw in jobs}
        for f in concurrent.futures.as_completed(futures):
            p, fw = futures[f]
            results[p][fw] = f.result()
    wall = time.monotonic() - t0

    print(f"MindSpore {ms_version} ({ms_python}) against mixprec ({sys.executable}); "
          f"{len(programs)} programs, {wall:.0f} s")
    used = set()
    n_facts = n_equal = n_expected = n_unexpected = n_broken = 0
    report = {"mindspore_version": ms_version, "programs": {}}
    for p in programs:
        ms, mp = results[p]["mindspore"], results[p]["mixprec"]
        entry = {"mindspore": ms, "mixprec": mp}
        report["programs"][p] = entry
        if "error" in ms or "error" in mp:
            n_broken += 1
            print(f"FAIL {p}: a run did not finish with its facts")
            for fw, r in (("mindspore", ms), ("mixprec", mp)):
                if "error" in r:
                    print(f"    {fw}: " + r["error"].replace("\n", "\n      "))
            continue
        diffs, count = compare(p, ms, mp)
        unexpected = [d for d in diffs if d[3] is None]
        used.update(d[3] for d in diffs if d[3] is not None)
        n_facts += count
        n_equal += count - len(diffs)
        n_expected += len(diffs) - len(unexpected)
        n_unexpected += len(unexpected)
        entry["differences"] = [{"key": k, "mindspore": a, "mixprec": b, "expected": i} for k, a, b, i in diffs]
        status = "FAIL" if unexpected else "ok  "
        print(f"{status} {p}: {count} facts, {count - len(diffs)} equal, {len(diffs) - len(unexpected)} expected "
              f"differences, {len(unexpected)} unexpected ({ms['seconds']:.1f} s / {mp['seconds']:.1f} s)")
        for k, a, b, i in diffs:
            if i is None or args.verbose:
                tag = "UNEXPECTED" if i is None else f"expected #{i} ({expected.DIFFERENCES[i]['id']})"
                print(f"    {tag} {k}: mindspore {short(a)}, mixprec {short(b)}")
                for fw, r in (("mindspore", ms), ("mixprec", mp)):
                    if k in r.get("messages", {}):
                        print(f"        {fw} says: {r['messages'][k][:200]}")
    stale = [i for i, e in enumerate(expected.DIFFERENCES)
             if i not in used and any(fnmatch.fnmatchcase(p, e["program"]) for p in programs)]
    for i in stale:
        print(f"FAIL expected.py #{i} ({expected.DIFFERENCES[i]['id']}) matched no difference: "
              f"it is fixed or the program changed; update expected.py and docs/amp.md")
    kinds = sorted({expected.DIFFERENCES[i]["id"] for i in used})
    print(f"\n{len(programs)} programs, {n_facts} compared facts: {n_equal} equal, {n_expected} expected "
          f"differences (in {len(kinds)} listed kinds), {n_unexpected} unexpected, {n_broken} programs broken, "
          f"{len(stale)} stale table entries")
    if args.json:
        report["summary"] = {"programs": len(programs), "facts": n_facts, "equal": n_equal,
                             "expected": n_expected, "unexpected": n_unexpected, "broken": n_broken,
                             "stale": [expected.DIFFERENCES[i]["id"] for i in stale], "kinds": kinds}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    failed = n_unexpected + n_broken + len(stale)
    print(f"{len(programs) - sum(1 for p in programs if any(d['expected'] is None for d in report['programs'][p].get('differences', [])) or 'differences' not in report['programs'][p])} passed, "
          f"{sum(1 for p in programs if any(d['expected'] is None for d in report['programs'][p].get('differences', [])) or 'differences' not in report['programs'][p])} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
