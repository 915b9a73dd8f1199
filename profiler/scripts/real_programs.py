#!/usr/bin/env python3
"""Real programs under `crossmod profile --trace PATTERN`: same exit status, same output?

    profiler/scripts/real_programs.py [--build DIR] [--policies full,budget] [--trace '*'] [NAME...]

Runs each case below (or the NAMEs given) once alone and once per policy under
`DIR/crossmod profile --quiet --policy P --trace PATTERN`, and compares the exit status and
the md5 of stdout with the plain run's. A case whose program is not installed is skipped.
Prints one line per run (OK, or what differs, with the report's function count and first
note) and exits 1 if any run differed. Inputs are files of this repository (the build's
own binary as data) and two small sources (SOURCES: a Tcl and a Java program) written into
the temporary folder, the only place it writes.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(build, work):
    blob = os.path.join(build, "crossmod")
    return {
        "xz": ["sh", "-c", f"head -c 8000000 {blob} | xz -T2 -3 | xz -d | md5sum"],
        "zstd": ["sh", "-c", f"head -c 8000000 {blob} | zstd -q -T2 -5 | zstd -q -d | md5sum"],
        "bzip2": ["sh", "-c", f"head -c 2000000 {blob} | bzip2 | bzip2 -d | md5sum"],
        "openssl": ["openssl", "dgst", "-sha256", blob],
        "gpg": ["gpg", "--batch", "--print-md", "SHA256", blob],
        "tar": ["sh", "-c", f"tar -C {ROOT} -cf - profiler | md5sum"],
        "git": ["git", "-C", ROOT, "log", "--oneline", "-n", "200", "--stat"],
        "find": ["find", os.path.join(ROOT, "profiler"), "-name", "*.cpp"],
        "grep": ["grep", "-rc", "crossmod", os.path.join(ROOT, "profiler", "src")],
        "sort": ["sh", "-c", f"seq 1 400000 | sort -R --random-source={blob} | sort -n | md5sum"],
        "awk": ["awk", "BEGIN{s=0; for(i=0;i<2000000;i++) s+=i%7; print s}"],
        "perl": ["perl", "-e", 'sub f { my $d = shift; return $d ? f($d-1) : die "x\\n" } my $n = 0; '
                 'for my $i (1..20000) { eval { f($i % 200) }; $n++ if $@ } print "$n\\n"'],
        "python3-threads": ["/usr/bin/python3", "-c",
                            "import threading, hashlib; r = []; ts = [threading.Thread(target=lambda i=i: "
                            "r.append(hashlib.sha256(str(i).encode() * 10000).hexdigest())) for i in range(16)]; "
                            "[t.start() for t in ts]; [t.join() for t in ts]; print(len(r))"],
        "python3-asyncio": ["/usr/bin/python3", "-c",
                            "import asyncio\nasync def f(i):\n await asyncio.sleep(0)\n return i * i\n"
                            "async def m():\n print(sum(await asyncio.gather(*[f(i) for i in range(20000)])))\n"
                            "asyncio.run(m())"],
        "sqlite3": ["sqlite3", ":memory:", "with recursive c(x) as (select 1 union all select x + 1 from c "
                    "where x < 200000) select count(*), sum(x % 7) from c;"],
        "node": ["node", "-e", "let s = 0; for (let i = 0; i < 3e6; i++) s += Math.sqrt(i); console.log(s.toFixed(2))"],
        "g++": ["g++", "-O2", "-fsyntax-only", os.path.join(ROOT, "profiler", "tests", "mt_prog.cpp")],
        "clang": ["clang", "-fsyntax-only", os.path.join(ROOT, "profiler", "tests", "mt_prog.cpp")],
        "tclsh": ["tclsh", os.path.join(work, "fib.tcl")],
        # HotSpot: the launcher compiles the file and runs it (4 threads, a caught NPE).
        "java": ["java", os.path.join(work, "Fib.java")],
    }


# Inputs of the cases above that are not files of this repository.
SOURCES = {
    "fib.tcl": "proc fib {n} { if {$n < 2} { return $n }; expr {[fib [expr {$n - 1}]] + [fib [expr {$n - 2}]]} }\n"
               "puts [fib 20]\n",
    "Fib.java": "public class Fib {\n"
                "  static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n"
                "  public static void main(String[] a) throws Exception {\n"
                "    Thread[] ts = new Thread[4]; final long[] r = new long[4];\n"
                "    for (int i = 0; i < 4; i++) { final int k = i; ts[i] = new Thread(() -> { r[k] = fib(22 + k); }); ts[i].start(); }\n"
                "    long s = 0; for (int i = 0; i < 4; i++) { ts[i].join(); s += r[i]; }\n"
                "    try { Object o = null; o.hashCode(); } catch (NullPointerException e) { s++; }\n"
                "    System.out.println(s);\n"
                "  }\n"
                "}\n",
}


def run(cmd, timeout=600):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, hashlib.md5(p.stdout).hexdigest(), time.monotonic() - t0, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--policies", default="full,budget")
    ap.add_argument("--trace", default="*")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    names = a.names or list(cases(a.build, ""))
    unknown = [n for n in names if n not in cases(a.build, "")]
    if unknown:
        print(f"real_programs.py: unknown case {unknown[0]} (cases: {', '.join(cases(a.build, ''))})", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in SOURCES.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        all_cases = cases(a.build, tmp)
        for name in names:
            cmd = all_cases[name]
            if shutil.which(cmd[0]) is None:
                print(f"{name:16} skipped: {cmd[0]} is not installed")
                continue
            rc, digest, _, _ = run(cmd)
            for policy in a.policies.split(","):
                out = os.path.join(tmp, f"{name}-{policy}")
                prc, pdigest, secs, err = run([os.path.join(a.build, "crossmod"), "profile", "--quiet", "--policy",
                                               policy, "--trace", a.trace, "--out", out, "--", *cmd])
                what = []
                if prc != rc:
                    what.append(f"exit {prc}, alone {rc}")
                if pdigest != digest:
                    what.append("output differs")
                funcs, note = "?", ""
                try:
                    with open(os.path.join(out, "profile.json")) as f:
                        j = json.load(f)
                    funcs = len(j["functions"])
                    note = j["notes"][0] if what and j["notes"] else ""
                except (OSError, ValueError, KeyError):
                    what.append("no report")
                bad += bool(what)
                tail = err.decode(errors="replace").strip().splitlines()[-1:] if what else []
                print(f"{name:16} {policy:8} {'; '.join(what) or 'OK':28} {secs:6.1f} s  {funcs} functions"
                      + (f"  [{note}]" if note else "") + (f"  stderr: {tail[0]}" if tail else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
