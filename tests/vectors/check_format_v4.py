#!/usr/bin/env python3
"""Recomputes the format v4 parts of tests/vectors/format-v4.json from docs/format.md
with Python's hashlib and hmac and the `cryptography` package (Debian:
python3-cryptography) only, without kvkey: the confidential values (HKDF-SHA-256,
AES-256-GCM with the header as associated data), their rejected variants, and the
shared scope's transition. Exits non-zero naming the first difference.

    python3 tests/vectors/check_format_v4.py [tests/vectors/format-v4.json]
"""

import hashlib
import hmac
import json
import os
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    sys.exit("check_format_v4: " + msg)


def payload(block, size):
    return bytes((j + 31 * block) % 251 for j in range(size))


def sha256(m):
    return hashlib.sha256(m).digest()


def hmac_sha256(key, m):
    return hmac.new(key, m, hashlib.sha256).digest()


def with_tenant(encoding, tenant):
    """The identity encoding (section 1) with another tenant: tag, version, str(tenant), rest."""
    (n,) = struct.unpack_from("<I", encoding, 10)
    t = tenant.encode()
    return encoding[:10] + struct.pack("<I", len(t)) + t + encoding[14 + n:]


def block_message(parent, tokens):
    return b"B" + parent + b"".join(struct.pack("<I", t) for t in tokens) + struct.pack("<I", 0)


def object_hash(h, block, s):
    return h(b"O" + block + struct.pack("<4I", *s))


def confidential_open(secret, root, value):
    """docs/format.md, "Mode aes256_gcm": the plaintext, or None when the tag fails."""
    nonce = value[80:96]
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"kvkey v4 confidential",
               info=b"C" + root + nonce[:4]).derive(secret)
    aad = value[:96] + bytes(16) + value[112:1024]
    try:
        return AESGCM(key).decrypt(nonce[4:], value[1024:] + value[96:112], aad)
    except InvalidTag:
        return None


def check_confidential(doc):
    c = doc["confidential"]
    case = next(x for x in doc["cases"] if x["name"] == c["case"])
    secret = bytes.fromhex(c["secret_hex"])
    encoding = bytes.fromhex(case["encoding"])
    if encoding[8:10] != b"\x04\x00":
        fail("the identity encoding is not format version 4")
    root = hmac_sha256(secret, encoding)
    if root.hex() != c["root"]:
        fail("confidential root")
    sid = hmac_sha256(secret, b"I")[:8]
    tenant = case["identity"]["tenant"]
    if c["secret_prefix"] != "kvk4/%s/c%s/" % (tenant, sid.hex()):
        fail("confidential secret prefix " + c["secret_prefix"])
    size = case["payload_size"]
    parent = root
    tokens = doc["tokens"]["values"]
    bs = case["identity"]["kv.block_size"]
    for i, value_hex in enumerate(c["values"]):
        value = bytes.fromhex(value_hex)
        parent = hmac_sha256(secret, block_message(parent, tokens[i * bs:(i + 1) * bs]))
        if parent.hex() != c["blocks"][i]:
            fail("confidential block %d" % i)
        key = c["key_prefix"] + object_hash(lambda m: hmac_sha256(secret, m), parent, case["slice"]).hex()
        if key != c["keys"][i]:
            fail("confidential key %d" % i)
        if len(value) != 1024 + size:
            fail("value %d has %d bytes" % (i, len(value)))
        if (value[:8] != b"KVKEYENV" or value[8:10] != b"\x04\x00" or value[16:48] != parent
                or struct.unpack_from("<Q", value, 48)[0] != size or value[72] != 2 or value[73] != 3
                or value[112:120] != sid or value[120:120 + len(encoding)] != encoding):
            fail("value %d: header fields" % i)
        plain = confidential_open(secret, root, value)
        if plain != payload(i, size):
            fail("value %d does not open to its payload" % i)
        if value[1024:] == plain:
            fail("value %d is stored in the clear" % i)
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"kvkey v4 confidential",
                       info=b"C" + root + value[80:84]).derive(secret)
        if derived.hex() != c["derived_keys"][i]:
            fail("derived key %d" % i)
    for r in c["rejected"]:
        value = bytes.fromhex(r["value_hex"])
        reader = bytes.fromhex(r.get("reader_secret_hex", c["secret_hex"]))
        reader_root = hmac_sha256(reader, encoding)
        header_ok = value[112:120] == hmac_sha256(reader, b"I")[:8] and value[16:48].hex() == c["blocks"][0]
        if header_ok and confidential_open(reader, reader_root, value) is not None:
            fail("rejected value opens: " + r["what"])
        if r["verdict"]["reason"] == "ok":
            fail("rejected value has verdict ok: " + r["what"])


def check_scope(doc):
    s = doc["scope"]
    case = next(x for x in doc["cases"] if x["name"] == s["case"])
    encoding = bytes.fromhex(case["encoding"])
    scope_enc = with_tenant(encoding, "_scope." + s["scope"]["name"])
    if scope_enc.hex() != s["scope"]["encoding"]:
        fail("scope encoding")
    scope_root = sha256(scope_enc)
    if scope_root.hex() != s["scope"]["root"]:
        fail("scope root")
    bs = case["identity"]["kv.block_size"]
    k = s["scope_tokens"] // bs
    tokens = doc["tokens"]["values"]
    seen = []
    for t in s["tenants"]:
        troot = sha256(with_tenant(encoding, t["tenant"]))
        if troot.hex() != t["root"]:
            fail("tenant root " + t["tenant"])
        parent = scope_root
        want = []
        for i in range(len(t["blocks"])):
            if i == k:
                parent = sha256(b"T" + troot + parent)
                if parent.hex() != t["transition_parent"]:
                    fail("transition parent of " + t["tenant"])
            parent = sha256(block_message(parent, tokens[i * bs:(i + 1) * bs]))
            want.append(parent.hex())
            owner = "_scope." + s["scope"]["name"] if i < k else t["tenant"]
            key = "kvk4/%s/p/m/e0/%s" % (owner, object_hash(sha256, parent, case["slice"]).hex())
            if key != t["keys"][i]:
                fail("scope key %d of %s" % (i, t["tenant"]))
        if want != t["blocks"]:
            fail("scoped block hashes of " + t["tenant"])
        seen.append(want)
    if seen[0][:k] != seen[1][:k] or any(a == b for a, b in zip(seen[0][k:], seen[1][k:])):
        fail("the tenants must share exactly the scope's blocks")
    r = s["rejected"]
    value = bytes.fromhex(r["value_hex"])
    if value[16:48].hex() == r["read_as_block"] or r["verdict"]["reason"] == "ok":
        fail("the spliced private block must not be the reader's")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "format-v4.json")
    with open(path) as f:
        doc = json.load(f)
    if doc["format_version"] != 4:
        fail("format_version is %r" % doc["format_version"])
    check_confidential(doc)
    check_scope(doc)
    print("check_format_v4: %s: confidential values, rejections and the scope transition reproduced" % path)


if __name__ == "__main__":
    main()
