#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of `kvkey conformance` (docs/conformance.md): the runner passes the
C++ and Python testees, and catches testees that are wrong in one field.

Run by CTest (tools/CMakeLists.txt):
    KVKEY_TOOL=build/x/tools/kvkey KVKEY_SOURCE_DIR=. [KVKEY_PYTHONPATH=build/x/python] \\
        /usr/bin/python3 tools/tests/conformance_test.py
"""
import os
import re
import shlex
import subprocess
import sys
import unittest

TOOL = os.environ.get("KVKEY_TOOL", "")
SOURCE = os.environ.get("KVKEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHONPATH = os.environ.get("KVKEY_PYTHONPATH", "")
VECTORS = os.path.join(SOURCE, "tests", "vectors", "format-v3.json")
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
        self.assertEqual(counts(r.stdout), (int(CASES) + 16, 0))  # 16 = 4 namespaces + their 12 headers
        self.assertIn("seed 1", r.stderr)

    def test_vectors_alone(self):
        r = run(f"{shlex.quote(TOOL)} conformance-testee", "--vectors", VECTORS, "--cases", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(counts(r.stdout), (16, 0))

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
        # error naming the wrong field.
        for defect, shown in (("adapter", r"case \S+: (encoding: got|error: missing)"),
                              ("salt", r"case \S+: blocks\["),
                              ("extras", r"case \S+: blocks\["),
                              ("u64", r"case \S+: blocks_u64\[\d+\]: got \d+, want \d+"),
                              ("field", r'case \S+: error: got .*"field":"kv.block_size".*want .*"kv.head_dim"')):
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


if __name__ == "__main__":
    if not TOOL:
        sys.exit("set KVKEY_TOOL to the kvkey binary")
    unittest.main()
