// SPDX-License-Identifier: Apache-2.0
// The C++ library's answer to one conformance request (docs/conformance.md):
// the request decoded with field-named input errors, then the identity, the
// chain, the store keys and the header verdict as kvkey computes them.
#include <kvkey/hmac.hpp>
#include <kvkey/identity_file.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cli/conformance.hpp"

namespace kvkey_tool::conformance {

namespace {

/// A request the protocol refuses: kind "input_error" or "identity_error".
struct Refusal {
  std::string kind;
  std::string field;
  std::string message;
};

[[noreturn]] void refuse_input(std::string field, std::string message) {
  throw Refusal{"input_error", std::move(field), std::move(message)};
}

// A hex digit's value (either case), or -1.
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]);
    const int lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

/// An unsigned JSON integer no larger than max; nullopt for anything else
/// (negative, fractional, too large, not a number).
std::optional<std::uint64_t> unsigned_value(const Json& v, std::uint64_t max) {
  if (!v.is_number_unsigned()) return std::nullopt;  // "-0" is signed: refused, as by every testee
  const auto n = v.get<std::uint64_t>();
  if (n > max) return std::nullopt;
  return n;
}

struct Request {
  kvkey::Identity identity;
  kvkey::Policy policy{kvkey::TenantPolicy::required, kvkey::PayloadCheck::size_only};
  std::optional<std::string> secret;
  std::vector<std::uint32_t> tokens;
  kvkey::HashOptions options;
  struct Verify {
    std::string header;
    std::uint64_t block_index = 0;
    std::uint64_t payload_size = 0;
    std::optional<std::string> payload;  ///< the bytes: checked with them, under PayloadCheck::required
  };
  std::optional<Verify> verify;
  struct Open {
    std::string value;
    std::uint64_t block_index = 0;
  };
  std::optional<Open> open;  ///< a whole stored value (open_value, PayloadCheck::required)
};

// The request's identity: its `identity` object, or the text of an identity
// file in `identity_file` read as a router reads it (docs/conformance.md).
void decode_identity(const Json& j, Request& r) {
  const auto id = j.find("identity");
  const auto file = j.find("identity_file");
  const bool has_id = id != j.end();
  const bool has_file = file != j.end();
  if (has_id == has_file) refuse_input("identity", "give identity or identity_file (one of them)");
  kvkey::IdentityFile read;
  try {
    if (has_id) {
      if (!id->is_object()) refuse_input("identity", "expected an object");
      read = kvkey::identity_from_json(*id, kvkey::IdentityJson::partial);
    } else {
      if (!file->is_string()) refuse_input("identity_file", "expected the text of an identity file (a string)");
      read = kvkey::parse_identity_file(file->get_ref<const std::string&>());
    }
  } catch (const kvkey::input_error& e) {
    refuse_input(e.field(), e.detail());
  }
  r.identity = std::move(read.identity);
  r.policy.tenant = read.policy.tenant;
  r.policy.confidential = read.policy.confidential;
}

// The members a request may have (docs/conformance.md, "Request").
void check_members(const Json& j) {
  static const std::vector<std::string> known = {"id",         "identity",     "identity_file", "single_tenant",
                                                 "secret_hex", "confidential", "tokens",        "salt_hex",
                                                 "extras",     "verify",       "open"};
  for (const auto& item : j.items()) {  // nlohmann::json keeps keys in byte order: the first is the smallest
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) refuse_input(item.key(), "unknown member");
  }
}

std::string hex_member(const Json& j, const char* key, const std::string& field) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  const auto bytes = it->is_string() ? from_hex(it->get<std::string>()) : std::nullopt;
  if (!bytes) refuse_input(field, "expected hex digits (an even number)");
  return *bytes;
}

Request decode(const Json& j) {
  Request r;
  check_members(j);
  decode_identity(j, r);
  if (const auto st = j.find("single_tenant"); st != j.end() && !st->is_null()) {
    if (!st->is_boolean()) refuse_input("single_tenant", "expected true or false");
    if (st->get<bool>()) r.policy.tenant = kvkey::TenantPolicy::single_tenant;
  }
  if (const auto s = j.find("secret_hex"); s != j.end() && !s->is_null())
    r.secret = hex_member(j, "secret_hex", "secret_hex");
  if (const auto c = j.find("confidential"); c != j.end() && !c->is_null()) {  // format v4: AES-256-GCM values
    if (!c->is_boolean()) refuse_input("confidential", "expected true or false");
    if (c->get<bool>()) r.policy.confidential = true;  // as single_tenant: adds to the identity file's
  }
  if (const auto t = j.find("tokens"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) refuse_input("tokens", "expected an array of token ids");
    r.tokens.reserve(t->size());
    for (const Json& v : *t) {
      const auto n = unsigned_value(v, std::numeric_limits<std::uint32_t>::max());
      if (!n) refuse_input("tokens", "token ids are integers in [0, 2^32)");
      r.tokens.push_back(static_cast<std::uint32_t>(*n));
    }
  }
  r.options.salt = hex_member(j, "salt_hex", "salt_hex");
  if (const auto e = j.find("extras"); e != j.end() && !e->is_null()) {
    if (!e->is_array()) refuse_input("extras", "expected an array");
    for (const Json& x : *e) {
      if (!x.is_object()) refuse_input("extras", "expected objects");
      kvkey::ExtraKey k;
      const auto num = [&x](const char* key) {
        const auto it = x.find(key);
        const auto n = it == x.end() ? std::nullopt : unsigned_value(*it, std::numeric_limits<std::uint64_t>::max());
        if (!n) refuse_input("extras", std::string(key) + ": expected an unsigned integer");
        return *n;
      };
      k.token_begin = num("token_begin");
      k.token_end = num("token_end");
      k.key = hex_member(x, "key_hex", "extras");
      r.options.extras.push_back(std::move(k));
    }
  }
  if (const auto v = j.find("verify"); v != j.end() && !v->is_null()) {
    if (!v->is_object()) refuse_input("verify", "expected an object");
    Request::Verify ver;
    ver.header = hex_member(*v, "header_hex", "verify.header_hex");
    const auto num = [&v](const char* key) {
      const auto it = v->find(key);
      const auto n = it == v->end() ? std::nullopt : unsigned_value(*it, std::numeric_limits<std::uint64_t>::max());
      if (!n) refuse_input(std::string("verify.") + key, "expected an unsigned integer");
      return *n;
    };
    ver.block_index = num("block_index");
    if (const auto p = v->find("payload_hex"); p != v->end() && !p->is_null()) {
      ver.payload = hex_member(*v, "payload_hex", "verify.payload_hex");
      if (const auto n = v->find("payload_size"); n != v->end() && !n->is_null())
        refuse_input("verify.payload_size", "give payload_size or payload_hex, not both");
    } else {
      ver.payload_size = num("payload_size");
    }
    r.verify = std::move(ver);
  }
  if (const auto o = j.find("open"); o != j.end() && !o->is_null()) {
    if (!o->is_object()) refuse_input("open", "expected an object");
    if (r.verify) refuse_input("open", "give verify or open, not both");
    Request::Open op;
    op.value = hex_member(*o, "value_hex", "open.value_hex");
    const auto it = o->find("block_index");
    const auto n = it == o->end() ? std::nullopt : unsigned_value(*it, std::numeric_limits<std::uint64_t>::max());
    if (!n) refuse_input("open.block_index", "expected an unsigned integer");
    op.block_index = *n;
    r.open = std::move(op);
  }
  return r;
}

// ---- deliberate defects (docs/conformance.md, "Testing the runner") ----------

void perturb_request(Request& r, const std::string& perturb) {
  if (perturb.empty()) return;
  if (perturb == "adapter") {
    r.identity.adapter.reset();  // a router that leaves the adapter out of the hash
  } else if (perturb == "salt") {
    r.options.salt.clear();
  } else if (perturb == "extras") {
    r.options.extras.clear();
  } else if (perturb != "u64" && perturb != "field" && perturb != "payload") {
    throw kvkey::input_error("unknown --perturb " + perturb + " (known: adapter, salt, extras, u64, field, payload)");
  }
}

Json verdict_json(const kvkey::Verdict& v) {
  return {{"ok", v.ok()}, {"reason", std::string(kvkey::to_string(v.reason))}, {"field", v.field}};
}

// ns: the request's namespace under PayloadCheck::size_only (the size-only
// verify); full: the same under PayloadCheck::required (payloads, values).
template <class Ns>
Json outputs(const Ns& ns, const Ns& full, const Request& r, const std::string& perturb) {
  Json out;
  std::vector<kvkey::Digest> blocks;
  try {
    blocks = ns.block_hashes(r.tokens.data(), r.tokens.size(), r.options);
  } catch (const kvkey::input_error& e) {  // the token ids were checked: an extra key
    throw Refusal{"input_error", "extras", e.what()};
  }
  out["encoding"] = hex(std::string_view(reinterpret_cast<const char*>(ns.encoding().data()), ns.encoding().size()));
  out["root"] = ns.root().hex();
  out["prefix"] = ns.key_prefix();
  out["blocks"] = Json::array();
  out["blocks_u64"] = Json::array();
  out["keys"] = Json::array();
  for (const kvkey::Digest& b : blocks) {
    out["blocks"].push_back(b.hex());
    std::uint64_t u = kvkey::u64_projection(b);
    if (perturb == "u64") {  // little-endian instead of big-endian
      std::uint64_t le = 0;
      for (std::size_t i = 0; i < 8; ++i) le |= std::uint64_t{b[i]} << (8 * i);
      u = le;
    }
    out["blocks_u64"].push_back(u);
    out["keys"].push_back(ns.store_key(b));
  }
  if (r.verify) {
    if (r.verify->block_index >= blocks.size()) {
      refuse_input("verify.block_index", "there are " + std::to_string(blocks.size()) + " blocks");
    }
    const auto& h = r.verify->header;
    const auto* header = reinterpret_cast<const std::uint8_t*>(h.data());
    const kvkey::Digest& block = blocks[r.verify->block_index];
    if (!r.verify->payload) {
      out["verdict"] = verdict_json(ns.verify(header, h.size(), block, r.verify->payload_size));
    } else if (perturb == "payload") {  // a reader that leaves the bytes unchecked: size-only
      out["verdict"] = verdict_json(ns.verify(header, h.size(), block, r.verify->payload->size()));
    } else {
      const std::string& p = *r.verify->payload;
      out["verdict"] = verdict_json(full.verify(header, h.size(), block, kvkey::Payload(p.data(), p.size())));
    }
  }
  if (r.open) {
    if (r.open->block_index >= blocks.size()) {
      refuse_input("open.block_index", "there are " + std::to_string(blocks.size()) + " blocks");
    }
    const auto& v = r.open->value;
    const auto* value = reinterpret_cast<const std::uint8_t*>(v.data());
    const kvkey::Digest& block = blocks[r.open->block_index];
    if (perturb == "payload" && v.size() >= kvkey::envelope_size) {  // the bytes unchecked
      out["verdict"] = verdict_json(ns.verify(value, kvkey::envelope_size, block, v.size() - kvkey::envelope_size));
    } else {
      out["verdict"] = verdict_json(full.open_value(value, v.size(), block).verdict);
    }
  }
  return out;
}

Json evaluate(Request r, const std::string& perturb) {
  perturb_request(r, perturb);
  try {
    (void)kvkey::validated(r.identity, r.policy);  // the identity is named before the secret
    kvkey::Policy full = r.policy;
    full.payload = kvkey::PayloadCheck::required;
    if (r.secret) {
      const kvkey::TenantSecret secret(std::move(*r.secret));
      return outputs(kvkey::KeyNamespace<kvkey::HmacSha256>(r.identity, secret, r.policy),
                     kvkey::KeyNamespace<kvkey::HmacSha256>(r.identity, secret, full), r, perturb);
    }
    return outputs(kvkey::KeyNamespace<>(r.identity, r.policy), kvkey::KeyNamespace<>(r.identity, full), r, perturb);
  } catch (const kvkey::identity_error& e) {
    std::string field = e.field();
    if (perturb == "field" && field == "kv.head_dim") field = "kv.block_size";
    throw Refusal{"identity_error", field, e.what()};
  }
}

}  // namespace

std::string hex(std::string_view bytes) {
  return fmt::format("{:02x}", fmt::join(reinterpret_cast<const unsigned char*>(bytes.data()),
                                         reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size()), ""));
}

Json respond(const Json& request, const std::string& perturb) {
  Json response;
  const auto id = request.is_object() ? request.find("id") : request.end();
  response["id"] = request.is_object() && id != request.end() ? *id : Json(nullptr);
  try {
    if (!request.is_object()) refuse_input("request", "expected a JSON object");
    response.update(evaluate(decode(request), perturb));
  } catch (const Refusal& e) {
    response["error"] = {{"kind", e.kind}, {"field", e.field}, {"message", e.message}};
  }
  return response;
}

Json respond_line(std::string_view line, const std::string& perturb) {
  Json request;
  std::string why;
  try {
    if (line.substr(0, 3) == "\xef\xbb\xbf") {
      why = "a byte order mark";  // nlohmann would skip it: the protocol does not
    } else {
      // Strict: UTF-8, one JSON text, no lone surrogate, no number beyond a double,
      // at most 32 levels, no duplicate key (docs/conformance.md, "Lines that are not requests").
      request = kvkey::parse_strict_json<Json>(line, max_request_depth);
      if (!request.is_object()) why = "expected a JSON object";
    }
  } catch (const kvkey::input_error& e) {
    why = e.field().empty() ? e.detail() : e.field() + ": " + e.detail();
  }
  if (!why.empty()) {
    return {{"id", nullptr}, {"error", {{"kind", "input_error"}, {"field", "request"}, {"message", why}}}};
  }
  return respond(request, perturb);
}

namespace {
template <class Ns>
std::string seal_with(const Ns& ns, const Request& r, std::size_t block_index, const std::string* payload,
                      std::uint64_t payload_size) {
  const auto blocks = ns.block_hashes(r.tokens.data(), r.tokens.size(), r.options);
  const kvkey::Digest& block = blocks.at(block_index);
  if (ns.confidential()) {  // the whole value: the header, then the ciphertext
    const std::string empty;
    const std::string& p = payload != nullptr ? *payload : empty;
    const auto v = ns.seal_value(block, kvkey::Payload(p.data(), p.size()));
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }
  const kvkey::Envelope e = payload != nullptr ? ns.seal(block, kvkey::Payload(payload->data(), payload->size()))
                                               : ns.seal(block, payload_size);
  return std::string(reinterpret_cast<const char*>(e.data()), e.size());
}
}  // namespace

std::string seal(const Json& writer, std::size_t block_index, const std::string* payload, std::uint64_t payload_size) {
  Request r;
  try {
    r = decode(Json::parse(writer.dump()));  // as a testee reads it: integers unsigned
  } catch (const Refusal& e) {
    throw kvkey::input_error("seal: " + e.field + ": " + e.message);
  }
  if (r.secret) {
    return seal_with(kvkey::KeyNamespace<kvkey::HmacSha256>(r.identity, kvkey::TenantSecret(*r.secret), r.policy), r,
                     block_index, payload, payload_size);
  }
  return seal_with(kvkey::KeyNamespace<>(r.identity, r.policy), r, block_index, payload, payload_size);
}

}  // namespace kvkey_tool::conformance
