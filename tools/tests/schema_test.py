#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of the identity schema (docs/conformance.md, "The identity schema"):
tests/vectors/identity-schema.json is what `kvkey schema` prints, and its
validation order is the library's, checked with identities that break two of
its rules at once.

Run by CTest (tools/CMakeLists.txt):
    KVKEY_TOOL=build/x/tools/kvkey KVKEY_SOURCE_DIR=. /usr/bin/python3 tools/tests/schema_test.py
"""
import copy
import itertools
import json
import os
import subprocess
import sys
import unittest

TOOL = os.environ.get("KVKEY_TOOL", "")
SOURCE = os.environ.get("KVKEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMA = os.path.join(SOURCE, "tests", "vectors", "identity-schema.json")
FIELDS = os.path.join(SOURCE, "tests", "data", "identity_fields.txt")

DELETE = object()

# A valid identity every rule is broken from (4 heads, 4 layers, an adapter).
BASE = {
    "tenant": "team-a",
    "model": {"name": "m", "revision": "r"},
    "kv": {"dtype": "fp16", "block_size": 16, "num_layers": 4, "num_kv_heads": 4, "head_dim": 64, "layout": "l"},
    "adapter": {"name": "a", "weights_fingerprint": "00" * 32},
}

# How to break each rule of the schema's validation order through the protocol:
# (dotted path, value) pairs; "@" marks a member of the request itself. A rule
# missing here cannot be broken by a request (kv.quant.scale_dtype holds a
# dtype name, so an unknown one is a decoding error).
BREAK = {
    ("tenant", "empty"): [("policy", "single_tenant"), ("tenant", "t")],
    ("tenant", "tenant"): [("tenant", "-t")],
    ("model.name", "text"): [("model.name", "")],
    ("model.revision", "identifier"): [("model.revision", "a b")],
    ("kv.dtype", "dtype"): [("kv.dtype", DELETE)],
    ("kv.quant.scheme", "scheme"): [("kv.quant.scheme", "Per_Token")],
    ("kv.block_size", "positive"): [("kv.block_size", 0)],
    ("kv.num_layers", "positive"): [("kv.num_layers", 0)],
    ("kv.num_kv_heads", "positive"): [("kv.num_kv_heads", 0)],
    ("kv.head_dim", "positive"): [("kv.head_dim", 0)],
    ("kv.layout", "identifier"): [("kv.layout", "")],
    ("adapter.name", "text"): [("adapter.name", "a\u200bb")],
    ("kv.quant.group_size", "default"): [("kv.quant.scheme", "none"), ("kv.quant.group_size", 8)],
    ("kv.quant.scale_dtype", "default"): [("kv.quant.scheme", "none"), ("kv.quant.scale_dtype", "bf16")],
    ("kv.quant.zero_point", "default"): [("kv.quant.scheme", "none"), ("kv.quant.zero_point", True)],
    ("kv.quant.scales_fingerprint", "default"): [("kv.quant.scheme", "none"),
                                                 ("kv.quant.scales_fingerprint", "11" * 32)],
    ("shard.tp_size", "positive"): [("shard.tp_size", 0)],
    ("shard.pp_size", "positive"): [("shard.pp_size", 0)],
    ("shard.tp_rank", "below"): [("shard.tp_rank", 9)],
    ("shard.pp_rank", "below"): [("shard.pp_rank", 9)],
    ("shard.tp_size", "splits_heads"): [("shard.tp_size", 3)],
    ("shard.pp_size", "divides"): [("shard.pp_size", 3)],
    ("tenant_secret", "secret_length"): [("@secret_hex", "00" * 31)],
    ("confidential", "keyed"): [("@confidential", True)],
}

# Values of the identity file's `confidential` member, each JSON type once.
CONFIDENTIAL_VALUES = [True, False, None, "true", "false", 1, 0, 1.5, [], [True], {}]
SCHEMA_TYPES = {"bool": bool, "string": str, "object": dict}


def apply(request, changes):
    for path, value in changes:
        at = request if path.startswith("@") else request["identity"]
        keys = path.lstrip("@").split(".")
        for k in keys[:-1]:
            at = at.setdefault(k, {})
        if value is DELETE:
            at.pop(keys[-1], None)
        else:
            at[keys[-1]] = value


def testee(requests):
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    r = subprocess.run([TOOL, "conformance-testee"], input=lines, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


class SchemaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([TOOL, "schema"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        cls.printed = r.stdout
        with open(SCHEMA, encoding="utf-8") as f:
            cls.committed = f.read()
        cls.schema = json.loads(cls.printed)

    def test_the_committed_schema_is_what_the_table_exports(self):
        # On a change of kvkey::Fields: build/x/tools/kvkey schema > tests/vectors/identity-schema.json
        self.assertEqual(self.committed, self.printed,
                         "tests/vectors/identity-schema.json differs from `kvkey schema`: regenerate it")

    def test_the_salient_fields_are_the_committed_list_in_encoding_order(self):
        with open(FIELDS, encoding="utf-8") as f:
            want = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        encoded = sorted((f for f in self.schema["fields"] if f["encoding_index"] is not None),
                         key=lambda f: f["encoding_index"])
        self.assertEqual([f["path"] for f in encoded], want)
        self.assertEqual([f["encoding_index"] for f in encoded], list(range(len(want))))

    def test_every_part_lists_its_fields(self):
        by_path = {f["path"]: f for f in self.schema["fields"]}
        for part in self.schema["parts"]:
            for key in part["members"]:
                path = f"{part['path']}.{key}" if part["path"] else key
                self.assertEqual(by_path[path]["part"], part["name"], path)
        self.assertEqual(sum(len(p["members"]) for p in self.schema["parts"]), len(by_path))

    def test_every_rule_of_the_validation_order_is_refused_on_its_field(self):
        steps = [(s["field"], s["rule"]) for s in self.schema["validation"]]
        self.assertEqual(len(steps), len(set(steps)))
        requests, want = [], []
        for step in steps:
            if step in BREAK:
                r = {"id": len(requests), "identity": copy.deepcopy(BASE)}
                apply(r, BREAK[step])
                requests.append(r)
                want.append(step[0])
        got = [a.get("error", {}).get("field") for a in testee(requests)]
        self.assertEqual(got, want)
        # Every rule but the optional dtype's (a name, decoded first) can be broken by a request.
        self.assertEqual(sorted(set(steps) - set(BREAK)), [("kv.quant.scale_dtype", "dtype")])

    def test_two_broken_rules_are_refused_on_the_first_in_the_validation_order(self):
        steps = [(s["field"], s["rule"]) for s in self.schema["validation"] if (s["field"], s["rule"]) in BREAK]
        requests, want = [], []
        for first, second in itertools.combinations(steps, 2):
            paths = [{p for p, _ in BREAK[s]} for s in (first, second)]
            if paths[0] & paths[1] or first[0] == second[0]:
                continue  # the two defects change the same member: not two defects
            r = {"id": len(requests), "identity": copy.deepcopy(BASE)}
            apply(r, BREAK[second])
            apply(r, BREAK[first])
            requests.append(r)
            want.append((first, second, first[0]))
        self.assertGreater(len(requests), 150)
        answers = testee(requests)
        wrong = [(w, a.get("error")) for w, a in zip(want, answers) if a.get("error", {}).get("field") != w[2]]
        self.assertEqual(wrong, [])

    def test_the_identity_file_reader_takes_confidential_exactly_as_the_schema_says(self):
        entry = self.schema["confidential"]
        self.assertEqual(entry["key"], "confidential")
        keyed = [s for s in self.schema["validation"] if s["field"] == "confidential"]
        self.assertEqual(keyed, [{"field": "confidential", "rule": entry["rule"], "when": {"namespace": "plain"}}])
        python_type = SCHEMA_TYPES[entry["type"]]
        requests, want = [], []
        for value, secret in itertools.product(CONFIDENTIAL_VALUES, (None, "07" * 32)):
            text = json.dumps(dict(BASE, confidential=value))
            r = {"id": len(requests), "identity_file": text}
            if secret:
                r["secret_hex"] = secret
            requests.append(r)
            # What the schema says: the type (bool is no int here), null as absent, then the keyed rule.
            typed = (type(value) is python_type) or (value is None and entry["nullable"])
            effective = entry["default"] if value is None else value
            ok = typed and not (effective is True and secret is None)
            want.append((value, secret, None if ok else "confidential"))
        answers = testee(requests)
        got = [(v, s, a.get("error", {}).get("field")) for (v, s, _), a in zip(want, answers)]
        self.assertEqual(got, want)
        # An accepted value reaches the namespace: a keyed one is confidential ("kvk4/<tenant>/c<id>/")
        # exactly when the file says true.
        for (value, secret, refused), a in zip(want, answers):
            if secret and not refused:
                self.assertEqual(a["prefix"].split("/")[2][0], "c" if value is True else "k", (value, a["prefix"]))

if __name__ == "__main__":
    if not TOOL:
        sys.exit("set KVKEY_TOOL to the kvkey binary")
    unittest.main()
