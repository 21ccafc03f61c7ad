#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of `kvkey conformance` (docs/conformance.md): the runner passes the
C++ and Python testees, and catches testees that are wrong in one field.

Run by CTest (tools/CMakeLists.txt):
    KVKEY_TOOL=build/x/tools/kvkey KVKEY_SOURCE_DIR=. [KVKEY_PYTHONPATH=build/x/python] \\
        /usr/bin/python3 tools/tests/conformance_test.py
"""
import json
import os
import re
import shlex
import subprocess
import sys
import unittest

TOOL = os.environ.get("KVKEY_TOOL", "")
SOURCE = os.environ.get("KVKEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHONPATH = os.environ.get("KVKEY_PYTHONPATH", "")
VECTORS = os.path.join(SOURCE, "tests", "vectors", "format-v4.json")
CASES = "400"


def run(testee, *args, env=None):
    cmd = [TOOL, "conformance", "--testee", testee, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def counts(out):
    m = re.search(r"^conformance: .*: (\d+) passed, (\d+) failed$", out, re.M)
    assert m, out
    return int(m.group(1)), int(m.group(2))


class RunnerTest(unittest.TestCase):
    def test_cpp_testee_passes_vectors_and_random_cases(self):
        r = run(f"{shlex.quote(TOOL)} conformance-testee", "--vectors", VECTORS, "--cases", CASES, "--seed", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # 39 = 4 namespaces + their 12 headers size-only, the 6 headers of the
        # plain and keyed minimal case with their payloads and as values, the splice,
        # the confidential namespace, its 3 values and 6 rejected values
        self.assertEqual(counts(r.stdout), (int(CASES) + 39, 0))
        self.assertIn("seed 1", r.stderr)

    def test_vectors_alone(self):
        r = run(f"{shlex.quote(TOOL)} conformance-testee", "--vectors", VECTORS, "--cases", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(counts(r.stdout), (39, 0))

    if PYTHONPATH:  # set when the build has the Python module (tools/CMakeLists.txt)
        def test_python_testee_passes(self):
            env = dict(os.environ, PYTHONPATH=PYTHONPATH)
            script = os.path.join(SOURCE, "tools", "conformance", "testee.py")
            testee = f"{shlex.quote(sys.executable)} {shlex.quote(script)}"
            r = run(testee, "--vectors", VECTORS, "--cases", CASES, "--seed", "2", env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(counts(r.stdout)[1], 0)

    def test_a_wrong_testee_fails_and_the_difference_is_shown(self):
        # Each defect of a real router: the adapter left out of the hash, the
        # salt or the extras ignored, the u64 projection little-endian, an
        # error naming the wrong field, payloads left unchecked.
        for defect, shown in (("adapter", r"case \S+: (encoding: got|error: missing)"),
                              ("salt", r"case \S+: blocks\["),
                              ("extras", r"case \S+: blocks\["),
                              ("u64", r"case \S+: blocks_u64\[\d+\]: got \d+, want \d+"),
                              ("field", r'case \S+: error: got .*"field":"kv.block_size".*want .*"kv.head_dim"'),
                              ("payload", r'case \S+: verdict: got .*"ok":true.*want .*"reason":"payload_mismatch"')):
            with self.subTest(defect=defect):
                r = run(f"{shlex.quote(TOOL)} conformance-testee --perturb {defect}", "--cases", "2000", "--seed", "3")
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                passed, failed = counts(r.stdout)
                self.assertGreater(failed, 0)
                self.assertGreater(passed, 0)
                self.assertRegex(r.stdout, shown)
                self.assertIn("rerun with --seed 3", r.stdout)

    def test_a_testee_that_stops_answering_fails(self):
        r = run("head -n 5 | " + f"{shlex.quote(TOOL)} conformance-testee", "--cases", "50", "--seed", "4")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(counts(r.stdout), (5, 45))
        self.assertIn("no response", r.stdout)

    def test_a_testee_that_prints_garbage_fails(self):
        r = run("cat", "--cases", "3", "--seed", "5")  # echoes the requests
        self.assertEqual(r.returncode, 1)
        self.assertEqual(counts(r.stdout), (0, 3))

    def test_the_runner_makes_its_cases_from_any_seed(self):
        # Making the cases must not depend on the seed being a lucky one (CI
        # draws a fresh seed per run). The testee `true` answers nothing, so
        # every case fails, but only after all of them were made and sent.
        for seed in range(1, 13):
            for mode in ([], ["--mutate"]):
                with self.subTest(seed=seed, mode=mode):
                    r = run("true", *mode, "--cases", "4000", "--seed", str(seed))
                    self.assertNotIn("unexpected failure", r.stderr)
                    self.assertEqual(counts(r.stdout), (0, 4000), r.stderr[-500:])

    def test_the_cpp_testee_answers_every_hostile_line(self):
        r = run(f"{shlex.quote(TOOL)} conformance-testee", "--mutate", "--cases", "1500", "--seed", "6")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(counts(r.stdout), (1500, 0))
        self.assertIn("1500 hostile cases", r.stderr)

    if PYTHONPATH:
        def test_the_python_testee_answers_every_hostile_line(self):
            env = dict(os.environ, PYTHONPATH=PYTHONPATH)
            script = os.path.join(SOURCE, "tools", "conformance", "testee.py")
            r = run(f"{shlex.quote(sys.executable)} {shlex.quote(script)}", "--mutate", "--cases", "1500",
                    "--seed", "7", env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(counts(r.stdout), (1500, 0))

    def test_hostile_lines_are_refused_as_the_protocol_says(self):
        deep = '{"id":' + "[" * 100000 + "]" * 100000 + "}"
        lines = [b"", b"\xff", b'{"id":1,"identity":{"tenant":"\\ud800"}}', b'{"id":1e400}', b'{"id":' + b"9" * 400 + b"}",
                 b'{"id":NaN}', deep.encode(), b'{"id":1} {}', b'{"id":1,"id":2}', b"\xef\xbb\xbf{}", b"[]", b'{"id":1}\x00x']
        r = subprocess.run([TOOL, "conformance-testee"], input=b"\n".join(lines) + b"\n", capture_output=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        answers = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual(len(answers), len(lines))
        for a in answers:
            self.assertEqual(a, {"id": None, "error": {"kind": "input_error", "field": "request",
                                                       "message": a["error"]["message"]}})
        # Valid but odd: unknown members (the first in byte order), a 31-deep id (32 levels in all).
        ok = [b'{"zz":1,"ab":2,"identity":{}}', b'{"id":' + b"[" * 31 + b"]" * 31 + b',"identity":{}}']
        r = subprocess.run([TOOL, "conformance-testee"], input=b"\n".join(ok), capture_output=True, timeout=60)
        answers = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([a["error"]["field"] for a in answers], ["ab", "tenant"])

    def test_a_testee_that_dies_or_hangs_fails_without_stopping_the_runner(self):
        for testee, why in (("head -c 100; exit 3", "not strict JSON"),
                            ("printf '{\"id\":0,\"id\":0}\\n'; exec cat >/dev/null", "not strict JSON"),
                            ("printf '%s\\n' \"$(printf '[%.0s' $(seq 1 3000))\"", "not strict JSON"),
                            ("read line; sleep 30", "no response within 2 s")):
            with self.subTest(testee=testee):
                r = run(testee, "--mutate", "--cases", "20", "--seed", "8", "--timeout", "2")
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertEqual(counts(r.stdout)[0], 0)
                self.assertIn(why, r.stdout)


if __name__ == "__main__":
    if not TOOL:
        sys.exit("set KVKEY_TOOL to the kvkey binary")
    unittest.main()
