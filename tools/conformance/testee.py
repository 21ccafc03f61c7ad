#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python binding's conformance testee (docs/conformance.md): one JSON
request per line on stdin, one JSON response per line on stdout.

    kvkey conformance --testee 'python3 tools/conformance/testee.py'
"""

import json
import sys
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple

import kvkey

U32 = 2**32 - 1
U64 = 2**64 - 1
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
        for k in v:
            if k not in keys:
                bad(self.field(k), "unknown key")

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
# method of Section, or the name of a nested object).
FIELDS: Dict[str, Dict[str, str]] = {
    "model": {"name": "text", "revision": "text", "weights_epoch": "u64", "weights_fingerprint": "digest",
              "positional_fingerprint": "digest"},
    "kv": {"dtype": "dtype", "quant": "kv.quant", "block_size": "uint", "num_layers": "uint", "num_kv_heads": "uint",
           "head_dim": "uint", "layout": "text", "mla": "flag"},
    "kv.quant": {"scheme": "text", "group_size": "uint", "scale_dtype": "dtype", "zero_point": "flag",
                 "scales_fingerprint": "digest"},
    "shard": {"tp_size": "uint", "tp_rank": "uint", "pp_size": "uint", "pp_rank": "uint"},
    "adapter": {"name": "text", "weights_fingerprint": "digest"},
}
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
    top = Section(v, "identity", ("tenant", "policy", *FIELDS))
    kw: Dict[str, Any] = {}
    top.text("tenant", kw)
    policy: Dict[str, Any] = {}
    top.text("policy", policy)
    if policy.get("policy", "required") not in ("required", "single_tenant"):
        bad("policy", 'expected "required" or "single_tenant"')
    for name in ("model", "kv", "shard"):
        if top.get(name) is not None:
            kw[name] = CLASSES[name](**read_section(top.get(name), name))
    if top.get("adapter") is not None:
        a = read_section(top.get("adapter"), "adapter")
        kw["adapter"] = kvkey.Adapter(a.get("name", ""), a.get("weights_fingerprint", bytes(32)))
    return kvkey.Identity(**kw), policy.get("policy") == "single_tenant"


def answer(req: Dict[str, Any]) -> Dict[str, Any]:
    if not isinstance(req.get("identity"), dict):
        bad("identity", "expected an object")
    identity, single = decode_identity(req["identity"])
    st = req.get("single_tenant")
    if st is not None:
        if not isinstance(st, bool):
            bad("single_tenant", "expected true or false")
        single = single or st
    secret = hex_member(req, "secret_hex", "secret_hex")
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
        for k in ("block_index", "payload_size"):
            if not is_uint(verify.get(k), U64):
                bad("verify." + k, "expected an unsigned integer")

    try:
        identity.validated(single_tenant=single)  # the identity is named before the secret
        ns = kvkey.KeyNamespace(identity, single_tenant=single, payload_check="size_only",
                                secret=kvkey.TenantSecret(secret) if secret is not None else None)
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
        v = ns.verify(header, blocks[verify["block_index"]], verify["payload_size"])
        out["verdict"] = {"ok": v.ok, "reason": v.reason, "field": v.field}
    return out


def respond(line: str) -> Dict[str, Any]:
    try:
        req = json.loads(line, parse_int=lambda s: Signed(s) if s.startswith("-") else int(s))
    except ValueError:
        req = None
    if not isinstance(req, dict):
        return {"id": None, "error": {"kind": "input_error", "field": "request", "message": "not a JSON object"}}
    try:
        out = answer(req)
    except Refusal as e:
        out = {"error": {"kind": e.kind, "field": e.field, "message": e.message}}
    out["id"] = req.get("id")
    return out


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(respond(line), ensure_ascii=True) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
