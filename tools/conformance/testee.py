#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python binding's conformance testee (docs/conformance.md): one JSON
request per line on stdin, one JSON response per line on stdout.

    kvkey conformance --testee 'python3 tools/conformance/testee.py'
"""

import json
import math
import os
import sys
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple

import kvkey

U32 = 2**32 - 1
U64 = 2**64 - 1
MAX_DEPTH = 32  # objects and arrays in a line, the request object included
REQUEST_MEMBERS = ("id", "identity", "identity_file", "single_tenant", "secret_hex", "confidential", "tokens",
                   "salt_hex", "extras", "verify", "open")
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "vectors",
                      "identity-schema.json")
DTYPES = {name: d for name, d in kvkey.KvDtype.__members__.items() if name != "unset"}


class Refusal(Exception):
    """A request the protocol refuses: the error object of the response."""

    def __init__(self, kind: str, field: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.field, self.message = kind, field, message


def bad(field: str, message: str) -> NoReturn:
    raise Refusal("input_error", field, message)


class Signed(int):
    """An integer written with a minus sign ("-0" included): never an unsigned value."""


def is_uint(v: Any, limit: int) -> bool:
    return type(v) is int and 0 <= v <= limit


class Section:
    """One object of the identity: absent and null members keep the C++
    defaults; every error names the member's dotted path."""

    def __init__(self, v: Any, path: str, keys: Tuple[str, ...]) -> None:
        if not isinstance(v, dict):
            bad(path, "expected an object")
        self.v, self.path = v, path
        unknown = [k for k in v if k not in keys]
        if unknown:  # the first in byte order, whatever order the line has
            bad(self.field(min(unknown, key=lambda k: k.encode("utf-8"))), "unknown key")

    def field(self, k: str) -> str:
        return k if self.path == "identity" else f"{self.path}.{k}"

    def get(self, k: str) -> Any:
        return self.v.get(k)

    def read(self, k: str, kw: Dict[str, Any], ok: Callable[[Any], bool], message: str,
             convert: Callable[[Any], Any] = lambda v: v) -> None:
        """kw[k] = convert(member k) when the member is present and passes ok."""
        v = self.get(k)
        if v is not None:
            if not ok(v):
                bad(self.field(k), message)
            kw[k] = convert(v)

    def text(self, k: str, kw: Dict[str, Any]) -> None:
        self.read(k, kw, lambda v: isinstance(v, str), "expected a string")

    def uint(self, k: str, kw: Dict[str, Any], limit: int = U32) -> None:
        self.read(k, kw, lambda v: is_uint(v, limit), "expected an unsigned integer in range")

    def u64(self, k: str, kw: Dict[str, Any]) -> None:
        self.uint(k, kw, U64)

    def flag(self, k: str, kw: Dict[str, Any]) -> None:
        self.read(k, kw, lambda v: isinstance(v, bool), "expected true or false")

    def dtype(self, k: str, kw: Dict[str, Any]) -> None:
        self.read(k, kw, lambda v: isinstance(v, str) and v in DTYPES, "expected a dtype name", DTYPES.__getitem__)

    def digest(self, k: str, kw: Dict[str, Any]) -> None:
        self.read(k, kw, lambda v: isinstance(v, str) and len(from_hex(v) or b"") == 32, "expected 64 hex digits",
                  bytes.fromhex)


def from_hex(s: str) -> Optional[bytes]:
    if len(s) % 2 or any(c not in "0123456789abcdefABCDEF" for c in s):
        return None
    return bytes.fromhex(s)


def hex_member(m: Dict[str, Any], k: str, field: str) -> Optional[bytes]:
    v = m.get(k)
    if v is None:
        return None
    b = from_hex(v) if isinstance(v, str) else None
    if b is None:
        bad(field, "expected hex digits (an even number)")
    return b


# The members of each object of the identity and how each is read (a reader
# method of Section, or the path of a nested object), in the field table's
# order: from the identity schema (docs/conformance.md, "The identity schema").
READERS = {"string": "text", "u32": "uint", "u64": "u64", "bool": "flag", "dtype": "dtype", "digest": "digest"}


def load_fields() -> Dict[str, Dict[str, str]]:
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    fields: Dict[str, Dict[str, str]] = {p["path"]: {} for p in schema["parts"]}
    for f in schema["fields"]:
        parent = f["path"].rpartition(".")[0]
        fields[parent][f["key"]] = f["path"] if f["type"] == "object" else READERS[f["type"]]
    return fields


FIELDS = load_fields()
CLASSES: Dict[str, Any] = {"model": kvkey.Model, "kv": kvkey.Kv, "kv.quant": kvkey.Quant, "shard": kvkey.Shard}


def read_section(v: Any, path: str) -> Dict[str, Any]:
    s = Section(v, path, tuple(FIELDS[path]))
    kw: Dict[str, Any] = {}
    for k, how in FIELDS[path].items():
        if how in FIELDS:
            if s.get(k) is not None:
                kw[k] = CLASSES[how](**read_section(s.get(k), how))
        else:
            getattr(s, how)(k, kw)
    return kw


def decode_identity(v: Any) -> Tuple[kvkey.Identity, bool]:
    """The request's `identity`: keys, then policy, then the members in table order."""
    top = Section(v, "identity", ("policy", *FIELDS[""]))
    policy: Dict[str, Any] = {}
    top.text("policy", policy)
    if policy.get("policy", "required") not in ("required", "single_tenant"):
        bad("policy", 'expected "required" or "single_tenant"')
    kw: Dict[str, Any] = {}
    for name, how in FIELDS[""].items():
        if how == "adapter":
            if top.get(name) is not None:
                a = read_section(top.get(name), name)
                kw[name] = kvkey.Adapter(a.get("name", ""), a.get("weights_fingerprint", bytes(32)))
        elif how in FIELDS:
            if top.get(name) is not None:
                kw[name] = CLASSES[name](**read_section(top.get(name), name))
        else:
            getattr(top, how)(name, kw)
    return kvkey.Identity(**kw), policy.get("policy") == "single_tenant"


def read_identity_file(text: Any) -> Tuple[kvkey.Identity, bool]:
    """The request's `identity_file`, read as a router reads it: kvkey.Identity.from_json."""
    if not isinstance(text, str):
        bad("identity_file", "expected the text of an identity file (a string)")
    try:
        identity = kvkey.Identity.from_json(text)
    except kvkey.InputError as e:
        raise Refusal("input_error", e.field, str(e)) from None
    # The policy is the namespace's; the reader accepted the text, so it is JSON.
    return identity, json.loads(text.lstrip("\ufeff")).get("policy") == "single_tenant"


def answer(req: Dict[str, Any]) -> Dict[str, Any]:
    unknown = [k for k in req if k not in REQUEST_MEMBERS]
    if unknown:
        bad(min(unknown, key=lambda k: k.encode("utf-8")), "unknown member")
    if ("identity" in req) == ("identity_file" in req):
        bad("identity", "give identity or identity_file (one of them)")
    if "identity_file" in req:
        identity, single = read_identity_file(req["identity_file"])
    else:
        if not isinstance(req["identity"], dict):
            bad("identity", "expected an object")
        identity, single = decode_identity(req["identity"])
    st = req.get("single_tenant")
    if st is not None:
        if not isinstance(st, bool):
            bad("single_tenant", "expected true or false")
        single = single or st
    secret = hex_member(req, "secret_hex", "secret_hex")
    confidential = req.get("confidential")
    if confidential is None:
        confidential = False
    if not isinstance(confidential, bool):
        bad("confidential", "expected true or false")
    tokens = req.get("tokens")
    if tokens is None:
        tokens = []
    if not isinstance(tokens, list):
        bad("tokens", "expected an array of token ids")
    if not all(is_uint(t, U32) for t in tokens):
        bad("tokens", "token ids are integers in [0, 2^32)")
    salt = hex_member(req, "salt_hex", "salt_hex") or None
    extras: List[Tuple[int, int, bytes]] = []
    raw_extras = req.get("extras")
    if raw_extras is not None:
        if not isinstance(raw_extras, list):
            bad("extras", "expected an array")
        for x in raw_extras:
            if not isinstance(x, dict):
                bad("extras", "expected objects")
            if not is_uint(x.get("token_begin"), U64) or not is_uint(x.get("token_end"), U64):
                bad("extras", "token_begin and token_end are unsigned integers")
            extras.append((x["token_begin"], x["token_end"], hex_member(x, "key_hex", "extras") or b""))
    verify = req.get("verify")
    if verify is not None:
        if not isinstance(verify, dict):
            bad("verify", "expected an object")
        header = hex_member(verify, "header_hex", "verify.header_hex") or b""
        if not is_uint(verify.get("block_index"), U64):
            bad("verify.block_index", "expected an unsigned integer")
        payload = hex_member(verify, "payload_hex", "verify.payload_hex")
        if payload is not None:  # the bytes: the whole check
            if verify.get("payload_size") is not None:
                bad("verify.payload_size", "give payload_size or payload_hex, not both")
        elif not is_uint(verify.get("payload_size"), U64):
            bad("verify.payload_size", "expected an unsigned integer")
    opened = req.get("open")
    if opened is not None:
        if not isinstance(opened, dict):
            bad("open", "expected an object")
        if verify is not None:
            bad("open", "give verify or open, not both")
        value = hex_member(opened, "value_hex", "open.value_hex") or b""
        if not is_uint(opened.get("block_index"), U64):
            bad("open.block_index", "expected an unsigned integer")

    try:
        identity.validated(single_tenant=single)  # the identity is named before the secret
        tenant_secret = kvkey.TenantSecret(secret) if secret is not None else None
        ns = kvkey.KeyNamespace(identity, single_tenant=single, payload_check="size_only", secret=tenant_secret,
                                confidential=confidential)
        # Payloads and values are checked as an engine serving them does.
        full = kvkey.KeyNamespace(identity, single_tenant=single, secret=tenant_secret, confidential=confidential)
    except kvkey.IdentityError as e:
        raise Refusal("identity_error", e.field, str(e)) from None
    try:
        blocks = ns.block_hashes(tokens, salt=salt, extras=extras or None)
    except kvkey.InputError as e:  # the token ids were checked: an extra key
        raise Refusal("input_error", "extras", str(e)) from None
    out: Dict[str, Any] = {
        "encoding": ns.encoding.hex(),
        "root": ns.root.hex(),
        "prefix": ns.key_prefix,
        "blocks": [b.hex() for b in blocks],
        "blocks_u64": [kvkey.u64_projection(b) for b in blocks],
        "keys": [ns.store_key(b) for b in blocks],
    }
    if verify is not None:
        if verify["block_index"] >= len(blocks):
            bad("verify.block_index", f"there are {len(blocks)} blocks")
        block = blocks[verify["block_index"]]
        v = full.verify(header, block, payload) if payload is not None else \
            ns.verify(header, block, verify["payload_size"])
        out["verdict"] = {"ok": v.ok, "reason": v.reason, "field": v.field}
    if opened is not None:
        if opened["block_index"] >= len(blocks):
            bad("open.block_index", f"there are {len(blocks)} blocks")
        v = full.open_value(value, blocks[opened["block_index"]]).verdict
        out["verdict"] = {"ok": v.ok, "reason": v.reason, "field": v.field}
    return out


class NotARequest(Exception):
    """The line is not a valid request line (docs/conformance.md, "Lines that are not requests")."""


def too_deep(text: str) -> bool:
    """Objects and arrays nested deeper than MAX_DEPTH, counted before any parser recurses."""
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in "]}":
            depth -= 1
    return False


def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise NotARequest("duplicate key")
    return out


def finite_float(s: str) -> float:
    f = float(s)
    if math.isinf(f):
        raise NotARequest("number beyond a double")
    return f


def exact_int(s: str) -> int:
    if len(s) > 300 and math.isinf(float(s)):  # also before int() meets Python's digit limit
        raise NotARequest("number beyond a double")
    return Signed(s) if s.startswith("-") else int(s)


def not_json(s: str) -> Any:
    raise NotARequest(s + " is not JSON")


def check_strings(v: Any) -> None:
    """No string (object keys included) holds a lone surrogate: it has no UTF-8 form."""
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
        elif isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise NotARequest("a lone surrogate") from None


def parse_line(line: bytes) -> Dict[str, Any]:
    if line.startswith(b"\xef\xbb\xbf"):
        raise NotARequest("a byte order mark")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise NotARequest("not UTF-8") from None
    if too_deep(text):
        raise NotARequest(f"nested deeper than {MAX_DEPTH} levels")
    try:
        req = json.loads(text, parse_int=exact_int, parse_float=finite_float, parse_constant=not_json,
                         object_pairs_hook=no_duplicates)
    except ValueError as e:  # JSONDecodeError
        raise NotARequest(f"not JSON: {e}") from None
    check_strings(req)
    if not isinstance(req, dict):
        raise NotARequest("not a JSON object")
    return req


def respond(line: bytes) -> Dict[str, Any]:
    try:
        req = parse_line(line)
    except NotARequest as e:
        return {"id": None, "error": {"kind": "input_error", "field": "request", "message": str(e)}}
    try:
        out = answer(req)
    except Refusal as e:
        out = {"error": {"kind": e.kind, "field": e.field, "message": e.message}}
    out["id"] = req.get("id")
    return out


def main() -> None:
    out = sys.stdout
    for line in sys.stdin.buffer:  # every line, whatever its bytes, gets one answer
        try:
            response = respond(line[:-1] if line.endswith(b"\n") else line)
        except Exception as e:  # pylint: disable=broad-except  # a bug: still one line, and the next
            response = {"id": None, "error": {"kind": "internal_error", "field": "", "message": repr(e)}}
        out.write(json.dumps(response, ensure_ascii=True, allow_nan=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
