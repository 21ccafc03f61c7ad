// SPDX-License-Identifier: Apache-2.0
// The conformance runner's requests (docs/conformance.md): random ones that
// span every identity field, namespace kind, chain input and header defect,
// and those that replay the committed vectors.
#include <kvkey/errors.hpp>
#include <kvkey/identity.hpp>
#include <kvkey/key_namespace.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/conformance.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool::conformance {

namespace {

constexpr std::uint64_t u32_max = 0xffffffffu;

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t below(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }
  std::uint64_t range(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T, std::size_t N>
  const T& pick(const std::array<T, N>& a) {
    return a[below(N)];
  }

  std::string bytes(std::size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(below(256));
    return s;
  }
  std::string digest_hex() { return hex(bytes(32)); }
  std::string from(std::string_view alphabet, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s.push_back(alphabet[below(alphabet.size())]);
    return s;
  }
  /// A length in [1, max]: often short, sometimes the longest allowed.
  std::size_t length(std::size_t max) {
    if (chance(0.15)) return max;
    return chance(0.6) ? range(1, std::min<std::size_t>(max, 12)) : range(1, max);
  }

  /// Free text (model and adapter names) of at most max bytes, whole UTF-8
  /// characters: ASCII (with '/', '@', '%' and space, which the store key
  /// escapes), 2-, 3- and 4-byte characters and the allowed neighbours of
  /// every range kvkey::is_unsafe_code_point refuses. full: exactly max bytes.
  std::string text(std::size_t max, bool full) {
    static constexpr std::array<std::string_view, 14> pieces = {
        "Q", "w", "7", "-", ".", "_", "/", " ", "@", "%", "\xc3\xa9", "\xce\xa9", "\xe6\xa8\xa1", "\xf0\x9f\xa6\x99"};
    // U+007E U+00A0 U+061B U+061D U+200A U+2010 U+2027 U+202F U+205F U+2070
    // U+FEFE U+FF00 U+FFF8 U+FFFC: one step outside an unsafe range.
    static constexpr std::array<std::uint32_t, 14> edges = {0x7e,   0xa0,   0x61b,  0x61d,  0x200a, 0x2010, 0x2027,
                                                            0x202f, 0x205f, 0x2070, 0xfefe, 0xff00, 0xfff8, 0xfffc};
    const std::size_t want = full ? max : length(max);
    std::string s;
    while (s.size() < want) {
      const std::string p = chance(0.2) ? utf8(pick(edges)) : std::string(pick(pieces));
      if (s.size() + p.size() > want) {
        s.push_back('m');
        continue;
      }
      s.append(p);
    }
    return s;
  }
  /// A code point kvkey::is_unsafe_code_point refuses, from every one of its
  /// ranges: often an end of the range, else one inside it.
  std::string unsafe_char() {
    static constexpr std::array<std::array<std::uint32_t, 2>, 8> ranges = {{{0x00, 0x1f},
                                                                            {0x7f, 0x9f},
                                                                            {0x61c, 0x61c},
                                                                            {0x200b, 0x200f},
                                                                            {0x2028, 0x202e},
                                                                            {0x2060, 0x206f},
                                                                            {0xfeff, 0xfeff},
                                                                            {0xfff9, 0xfffb}}};
    const auto& r = pick(ranges);
    const std::uint64_t k = below(3);
    return utf8(static_cast<std::uint32_t>(k == 0 ? r[0] : k == 1 ? r[1] : range(r[0], r[1])));
  }
  static std::string utf8(std::uint32_t cp) {
    std::string s;
    const auto put = [&s](std::uint32_t b) { s.push_back(static_cast<char>(b)); };
    if (cp < 0x80) {
      put(cp);
    } else if (cp < 0x800) {
      put(0xc0 | cp >> 6);
      put(0x80 | (cp & 0x3f));
    } else {
      put(0xe0 | cp >> 12);
      put(0x80 | (cp >> 6 & 0x3f));
      put(0x80 | (cp & 0x3f));
    }
    return s;
  }
  std::string tenant() {
    static constexpr std::string_view alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const std::size_t n = length(kvkey::limits::tenant);
    return from(alnum, 1) + from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", n - 1);
  }
  std::string printable(std::size_t max) {
    std::string s;
    const std::size_t n = length(max);
    for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(range(0x21, 0x7e)));
    return s;
  }
  std::string dtype() { return std::string(kvkey::to_string(kvkey::all_dtypes()[below(kvkey::kv_dtype_count)])); }

 private:
  std::mt19937_64 rng_;
};

std::vector<std::uint32_t> divisors(std::uint32_t n) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

Json valid_identity(Gen& g, bool single_tenant) {
  Json id;
  if (!single_tenant) id["tenant"] = g.tenant();
  Json model = {{"name", g.text(kvkey::limits::model_name, g.chance(0.1))},
                {"revision", g.printable(kvkey::limits::revision)}};
  const std::uint64_t epoch_kind = g.below(4);
  model["weights_epoch"] = epoch_kind == 0   ? 0
                           : epoch_kind == 1 ? g.below(100)
                           : epoch_kind == 2 ? ~std::uint64_t{0}
                                             : g.below(~std::uint64_t{0});
  if (g.chance(0.4)) model["weights_fingerprint"] = g.digest_hex();
  if (g.chance(0.4)) model["positional_fingerprint"] = g.digest_hex();
  id["model"] = model;

  Json kv;
  kv["dtype"] = g.dtype();
  if (g.chance(0.4)) {
    Json q = {{"scheme", g.from("abcdefghijklmnopqrstuvwxyz0123456789._-", g.length(kvkey::limits::quant_scheme))}};
    if (q["scheme"] == "none") q["scheme"] = "nonf";
    q["group_size"] = g.chance(0.5) ? g.pick(std::array<std::uint64_t, 4>{0, 32, 64, 128}) : g.below(u32_max + 1);
    if (g.chance(0.6)) q["scale_dtype"] = g.dtype();
    q["zero_point"] = g.chance(0.5);
    if (g.chance(0.4)) q["scales_fingerprint"] = g.digest_hex();
    kv["quant"] = q;
  } else if (g.chance(0.3)) {
    kv["quant"] = {{"scheme", "none"}};
  }
  const std::uint64_t bs_kind = g.below(5);
  kv["block_size"] = bs_kind == 0   ? g.range(1, 4)
                     : bs_kind == 1 ? 16
                     : bs_kind == 2 ? 64
                     : bs_kind == 3 ? g.range(1, 300)
                                    : 256 + g.below(3);
  const bool mla = g.chance(0.2);
  const std::uint32_t layers = static_cast<std::uint32_t>(g.pick(std::array<std::uint64_t, 6>{1, 2, 24, 27, 28, 61}));
  const std::uint32_t heads =
      mla ? 1 : static_cast<std::uint32_t>(g.pick(std::array<std::uint64_t, 6>{1, 2, 4, 8, 12, 32}));
  kv["num_layers"] = layers;
  kv["num_kv_heads"] = heads;
  kv["head_dim"] = mla ? 576 : g.pick(std::array<std::uint64_t, 4>{1, 64, 128, 256});
  kv["layout"] = g.printable(kvkey::limits::layout);
  if (mla || g.chance(0.3)) kv["mla"] = mla;
  id["kv"] = kv;

  if (g.chance(0.6)) {
    // tp: a divisor of the heads, or a multiple of them (replicas); pp: a divisor of the layers.
    std::vector<std::uint32_t> tps = divisors(heads);
    for (std::uint32_t m : {2u, 4u}) tps.push_back(heads * m);
    const std::uint32_t tp = mla ? static_cast<std::uint32_t>(g.range(1, 8)) : tps[g.below(tps.size())];
    const std::vector<std::uint32_t> pps = divisors(layers);
    const std::uint32_t pp = pps[g.below(pps.size())];
    id["shard"] = {{"tp_size", tp}, {"tp_rank", g.below(tp)}, {"pp_size", pp}, {"pp_rank", g.below(pp)}};
  }
  if (g.chance(0.3))
    id["adapter"] = {{"name", g.text(kvkey::limits::adapter_name, g.chance(0.1))},
                     {"weights_fingerprint", g.digest_hex()}};
  if (single_tenant) id["policy"] = "single_tenant";
  return id;
}

// One defect that makes a valid request invalid. The oracle names the field.
void break_request(Gen& g, Json& r) {
  Json& id = r["identity"];
  Json& kv = id["kv"];
  const bool single = id.value("policy", "") == "single_tenant";
  switch (g.below(30)) {
    case 0: id["tenant"] = single ? "t" : ""; break;
    case 1: id["tenant"] = g.chance(0.5) ? "-x" : "a/b"; break;
    case 2: id["tenant"] = std::string(kvkey::limits::tenant + 1, 'a'); break;
    case 3: id["model"]["name"] = g.chance(0.5) ? "" : std::string(kvkey::limits::model_name + 1, 'n'); break;
    case 4: {
      // An unsafe code point between two pieces of valid text, in whichever name there is.
      const std::string name = g.text(40, false) + g.unsafe_char() + (g.chance(0.5) ? g.text(40, false) : "");
      if (id.contains("adapter") && g.chance(0.5)) {
        id["adapter"]["name"] = name;
      } else {
        id["model"]["name"] = name;
      }
      break;
    }
    case 5:
      id["model"]["revision"] = g.pick(std::array<std::string, 4>{"", "a b", "r\xc3\xa9", std::string(129, 'r')});
      break;
    case 6: kv.erase("dtype"); break;
    case 7:
      kv["quant"] = {{"scheme", g.pick(std::array<std::string, 3>{"", "Per_Token", std::string(33, 'q')})}};
      break;
    case 8: kv["quant"] = {{"scheme", "none"}, {"group_size", g.range(1, 128)}}; break;
    case 9: kv["quant"] = {{"scheme", "none"}, {"scale_dtype", g.dtype()}}; break;
    case 10: kv["quant"] = {{"scheme", "none"}, {"zero_point", true}}; break;
    case 11: kv["quant"] = {{"scheme", "none"}, {"scales_fingerprint", g.digest_hex()}}; break;
    case 12: kv[g.pick(std::array<std::string, 4>{"block_size", "head_dim", "num_layers", "num_kv_heads"})] = 0; break;
    case 13: kv["layout"] = g.pick(std::array<std::string, 3>{"", "a b", std::string(65, 'l')}); break;
    case 14:
      id["adapter"] = {{"name", g.pick(std::array<std::string, 3>{"", "x\n", std::string(129, 'a')})},
                       {"weights_fingerprint", g.digest_hex()}};
      break;
    case 15: id["shard"] = {{"tp_size", 0}}; break;
    case 16: id["shard"] = {{"tp_size", 2}, {"tp_rank", 2}}; break;
    case 17: id["shard"] = {{"pp_size", 0}}; break;
    case 18: id["shard"] = {{"pp_size", 1}, {"pp_rank", 1}}; break;
    case 19: kv["mla"] = false, kv["num_kv_heads"] = 12, id["shard"] = {{"tp_size", 8}}; break;  // 8 does not divide 12
    case 20: kv["mla"] = false, kv["num_kv_heads"] = 4, id["shard"] = {{"tp_size", 6}}; break;   // not a multiple of 4
    case 21: kv["num_layers"] = 27, id["shard"] = {{"pp_size", 2}}; break;
    case 22: r["secret_hex"] = hex(g.bytes(g.chance(0.5) ? 31 : 257)); break;
    // input errors
    case 23: {  // a token id out of range, negative or not an integer
      const std::uint64_t k = g.below(3);
      r["tokens"].push_back(k == 0 ? Json(u32_max + 1) : k == 1 ? Json(-1) : Json(1.0));
      break;
    }
    case 24: kv["dtype"] = g.pick(std::array<std::string, 3>{"fp17", "unset", "FP16"}); break;
    case 25:
      id["model"]["weights_fingerprint"] = g.chance(0.5) ? std::string(63, 'a') : std::string(63, 'a') + "g";
      break;
    case 26: kv[g.chance(0.5) ? "blocksize" : "block_size"] = g.chance(0.5) ? Json("64") : Json(64); break;
    case 27: kv["num_layers"] = u32_max + 1; break;
    case 28: r["salt_hex"] = "abc"; break;
    default: r["extras"] = Json::array({{{"token_begin", 5}, {"token_end", 5}, {"key_hex", "00"}}}); break;
  }
}

Json valid_request(Gen& g, std::uint64_t id) {
  Json r;
  r["id"] = id;
  const bool single = g.chance(0.2);
  r["identity"] = valid_identity(g, single);
  if (single && g.chance(0.5)) {  // the policy as the request's flag instead of the identity's key
    r["identity"].erase("policy");
    r["single_tenant"] = true;
  }
  if (g.chance(0.3)) r["secret_hex"] = hex(g.bytes(g.chance(0.2) ? g.range(32, 256) : 32));
  const std::uint64_t bs = r["identity"]["kv"]["block_size"];
  const std::uint64_t blocks = std::min<std::uint64_t>(g.below(5), 1200 / bs);
  const std::uint64_t count = blocks * bs + (g.chance(0.5) ? g.below(bs) : 0);
  Json tokens = Json::array();
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t kind = g.below(10);
    tokens.push_back(kind == 0 ? 0 : kind == 1 ? u32_max : kind < 5 ? g.below(152064) : g.below(u32_max + 1));
  }
  r["tokens"] = tokens;
  if (g.chance(0.3)) r["salt_hex"] = g.chance(0.1) ? std::string() : hex(g.bytes(g.range(1, 40)));
  if (g.chance(0.3)) {
    Json extras = Json::array();
    for (std::uint64_t i = 0, n = g.range(1, 4); i < n; ++i) {
      const std::uint64_t begin = g.below(count + 8);
      extras.push_back(
          {{"token_begin", begin}, {"token_end", begin + g.range(1, 2 * bs)}, {"key_hex", hex(g.bytes(g.below(20)))}});
    }
    if (g.chance(0.2)) extras.push_back(extras.front());  // duplicates are allowed and count twice
    r["extras"] = extras;
  }
  return r;
}

// A header for block `index` that the reader must reject or accept: sealed
// correctly, or with one defect (docs/conformance.md lists them).
void add_verify(Gen& g, Json& r) {
  const std::size_t blocks = r["tokens"].size() / r["identity"]["kv"]["block_size"].get<std::size_t>();
  const std::size_t index = g.below(blocks);
  // A keyed reader is confidential now and then (format v4): it reads whole
  // values only, sealed with AES-256-GCM.
  const bool confidential = r.contains("secret_hex") && g.chance(0.3);
  if (confidential) r["confidential"] = true;
  Json writer = r;
  std::size_t writer_index = index;
  // Half the reads of the payload's bytes or of whole values (two in three
  // requests) get no header defect, so that the bytes decide.
  const bool read_bytes = confidential || g.chance(2.0 / 3);
  const std::uint64_t defect = read_bytes && g.chance(0.5) ? 0 : g.below(10);
  switch (defect) {
    case 1:  // another identity: one salient field differs
      if (g.chance(0.5)) {
        writer["identity"]["model"]["weights_epoch"] =
            writer["identity"]["model"]["weights_epoch"].get<std::uint64_t>() ^ 1;
      } else {
        writer["identity"]["kv"]["dtype"] = writer["identity"]["kv"]["dtype"] == "fp16" ? "bf16" : "fp16";
      }
      break;
    case 2:  // another block of the same request
      if (blocks > 1)
        writer_index = (index + 1 + g.below(blocks - 1)) % blocks;
      else
        writer["salt_hex"] = "ff";
      break;
    case 3:  // plain and keyed swapped, or another secret of the tenant
      if (writer.contains("secret_hex") && g.chance(0.5))
        writer.erase("secret_hex");
      else
        writer["secret_hex"] = hex(g.bytes(32));
      break;
    case 5:  // another rank's slice
      writer["identity"]["shard"] = {{"pp_size", 1}, {"tp_size", 1}};
      r["identity"]["shard"] = {{"pp_size", r["identity"]["kv"]["num_layers"]}, {"pp_rank", 0}};
      if (r["identity"]["kv"]["num_layers"] == 1)
        r["identity"]["kv"]["mla"] = false, r["identity"]["shard"] = {{"tp_size", 2}};
      break;
    default: break;
  }
  // A keyed writer always seals the payload's bytes (its tag); a plain one
  // often, or size-only, also for sizes too large to materialize. A
  // confidential reader reads whole values, so its payload is always bytes,
  // even when the writer lost its secret (defect 3).
  const bool keyed = writer.contains("secret_hex");
  const bool with_payload = keyed || confidential || g.chance(0.7);
  const std::uint64_t size = with_payload || g.chance(0.7) ? g.below(2049) : g.below(~std::uint64_t{0});
  const std::uint64_t reader_size = defect == 4 ? size ^ (1 + g.below(1024)) : size;  // another payload size
  std::string payload;
  if (with_payload) payload = g.bytes(size);
  std::string header;
  try {
    header = seal(writer, writer_index, with_payload ? &payload : nullptr, size);
  } catch (const kvkey::error&) {  // the writer's variant is invalid: seal the reader's own
    r.erase("verify");
    header = seal(r, index, r.contains("secret_hex") || with_payload ? &payload : nullptr, size);
  }
  if (confidential && header.size() > kvkey::envelope_size) {  // seal gave the whole value: split it
    payload = header.substr(kvkey::envelope_size);
    header.resize(kvkey::envelope_size);
  }
  if (defect == 6 || defect == 7) {  // flipped bits, anywhere or in the first 128 bytes
    const std::size_t at = defect == 6 ? g.below(header.size()) : g.below(128);
    header[at] = static_cast<char>(header[at] ^ (1 << g.below(8)));
  }
  if (defect == 9) header[8] = 1;  // format version 1
  if (defect == 8) header.resize(g.chance(0.5) ? g.below(header.size()) : header.size() + 1 + g.below(8));
  // How the reader checks it (docs/conformance.md, "Request"): size-only, as a
  // router; with the payload's bytes; or as one stored value (header, then
  // payload). The bytes it reads may differ from the sealed ones: a flipped
  // bit, or (the payload-size defect) bytes cut off or added.
  const std::uint64_t form = confidential ? 2 : read_bytes && size <= 2048 ? 1 + g.below(2) : 0;
  if (form == 0) {
    r["verify"] = {{"header_hex", hex(header)}, {"block_index", index}, {"payload_size", reader_size}};
    return;
  }
  if (!with_payload) payload = g.bytes(size);  // sealed size-only: the bytes were never digested
  if (defect == 4) payload.resize(g.chance(0.5) && !payload.empty() ? g.below(payload.size()) : size + 1 + g.below(64));
  if (!payload.empty() && g.chance(0.3)) {
    const std::size_t at = g.below(payload.size());
    payload[at] = static_cast<char>(payload[at] ^ (1 << g.below(8)));
  }
  if (form == 1) {
    r["verify"] = {{"header_hex", hex(header)}, {"block_index", index}, {"payload_hex", hex(payload)}};
    return;
  }
  std::string value = header + payload;
  if (g.chance(0.05)) value.resize(g.below(std::min<std::size_t>(value.size() + 1, kvkey::envelope_size)));
  r["open"] = {{"value_hex", hex(value)}, {"block_index", index}};
}

// The request's identity as the text of an identity file (`identity_file`):
// compact or indented, now and then after a byte order mark, which readers skip.
void as_identity_file(Gen& g, Json& r) {
  std::string text = g.chance(0.5) ? r["identity"].dump() : r["identity"].dump(2);
  if (g.chance(0.05)) text.insert(0, "\xef\xbb\xbf");
  r.erase("identity");
  r["identity_file"] = text;
}

}  // namespace

std::vector<Json> random_requests(std::uint64_t seed, std::size_t count) {
  Gen g(seed);
  std::vector<Json> out;
  out.reserve(count);
  for (std::size_t n = 0; n < count; ++n) {
    Json r = valid_request(g, n);
    const std::size_t bs = r["identity"]["kv"]["block_size"];
    if (g.chance(0.2)) {
      // One, two or three defects: the field named is the first in the decoding
      // and validation order, which every implementation must share.
      const std::uint64_t defects = g.chance(0.5) ? 1 : g.chance(0.5) ? 2 : 3;
      for (std::uint64_t d = 0; d < defects; ++d) break_request(g, r);
    } else if (r["tokens"].size() >= bs && g.chance(0.4)) {
      add_verify(g, r);
      if (g.chance(0.03)) (r.contains("open") ? r["open"] : r["verify"])["block_index"] = r["tokens"].size() / bs;
    }
    if (g.chance(0.15)) as_identity_file(g, r);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// The nested identity of a request from a vectors file's flat one.
Json nested_identity(const Json& flat, const Json& shard, const std::string& policy) {
  Json id;
  for (const auto& [path, value] : flat.items()) {
    if (value.is_null() || (path == "tenant" && policy == "single_tenant")) continue;
    Json* at = &id;
    std::string_view rest = path;
    for (auto dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
      at = &(*at)[std::string(rest.substr(0, dot))];
      rest.remove_prefix(dot + 1);
    }
    (*at)[std::string(rest)] = value;
  }
  id["shard"] = shard;
  id["policy"] = policy;
  return id;
}

}  // namespace

namespace {

// Payloads larger than this are replayed size-only (their hex would make
// lines of megabytes).
constexpr std::uint64_t max_replayed_payload = 1 << 16;

// The vectors file's payload of block i (its payload_rule).
std::string vector_payload(std::size_t i, std::uint64_t size) {
  std::string p(static_cast<std::size_t>(size), '\0');
  for (std::size_t j = 0; j < p.size(); ++j) p[j] = static_cast<char>((j + 31 * i) % 251);
  return p;
}

}  // namespace

std::vector<Json> vector_requests(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("cannot open {}", path);
  Json doc;
  try {
    doc = Json::parse(file);
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  std::vector<Json> out;
  const Json tokens = doc.at("tokens").at("values");
  const auto add = [&](Json r, const Json& want, const Json& envelopes, std::uint64_t payload_size) {
    // The vectors are the library's: check them as the oracle answers, then
    // replay every header as a verify request.
    const Json got = respond(r);
    for (const char* k : {"root", "blocks", "keys"}) {
      if (got.value(k, Json()) != want.at(k))
        fail("{}: {} differs from the library's for {}", path, k, want.value("name", "keyed"));
    }
    out.push_back(r);
    for (std::size_t i = 0; i < envelopes.size(); ++i) {
      Json v = r;
      v["id"] = r["id"].get<std::string>() + ".verify." + std::to_string(i);
      v["verify"] = {{"header_hex", envelopes[i]}, {"block_index", i}, {"payload_size", payload_size}};
      out.push_back(std::move(v));
      if (payload_size > max_replayed_payload) continue;
      // With the payload's bytes (the file's payload_rule), and as one stored
      // value: the library must accept both.
      const std::string payload = vector_payload(i, payload_size);
      Json p = r;
      p["id"] = r["id"].get<std::string>() + ".payload." + std::to_string(i);
      p["verify"] = {{"header_hex", envelopes[i]}, {"block_index", i}, {"payload_hex", hex(payload)}};
      Json o = r;
      o["id"] = r["id"].get<std::string>() + ".value." + std::to_string(i);
      o["open"] = {{"value_hex", envelopes[i].get<std::string>() + hex(payload)}, {"block_index", i}};
      for (Json* q : {&p, &o}) {
        if (respond(*q).value("verdict", Json()).value("ok", false) != true)
          fail("{}: the library rejects {}", path, (*q)["id"].get<std::string>());
        out.push_back(std::move(*q));
      }
    }
  };
  for (const Json& c : doc.at("cases")) {
    Json r;
    r["id"] = c.at("name");
    r["identity"] = nested_identity(c.at("identity"), c.at("shard"), c.at("tenant_policy"));
    r["tokens"] = tokens;
    r["salt_hex"] = hex(c.at("salt").get<std::string>());
    r["extras"] = Json::array();
    for (const Json& x : c.at("extras")) {
      r["extras"].push_back({{"token_begin", x.at("token_begin")},
                             {"token_end", x.at("token_end")},
                             {"key_hex", hex(x.at("key").get<std::string>())}});
    }
    add(r, c, c.at("envelopes"), c.at("payload_size"));
  }
  const Json& k = doc.at("keyed");
  for (const Json& c : doc.at("cases")) {
    if (c.at("name") != k.at("case")) continue;
    Json r;
    r["id"] = "keyed";
    r["identity"] = nested_identity(c.at("identity"), c.at("shard"), c.at("tenant_policy"));
    r["secret_hex"] = k.at("secret_hex");
    r["tokens"] = tokens;
    add(r, k, k.at("envelopes"), c.at("payload_size"));
  }
  // Format v4's confidential values: each opens, each rejected one is
  // refused as the file says (another secret of the tenant: its reader's).
  if (const auto cv = doc.find("confidential"); cv != doc.end()) {
    for (const Json& c : doc.at("cases")) {
      if (c.at("name") != cv->at("case")) continue;
      Json r;
      r["id"] = "confidential";
      r["identity"] = nested_identity(c.at("identity"), c.at("shard"), c.at("tenant_policy"));
      r["secret_hex"] = cv->at("secret_hex");
      r["confidential"] = true;
      r["tokens"] = tokens;
      const Json got = respond(r);
      for (const char* member : {"root", "blocks", "keys"}) {
        if (got.value(member, Json()) != cv->at(member))
          fail("{}: {} differs from the library's for confidential", path, member);
      }
      out.push_back(r);
      const auto replay = [&](Json o, const std::string& id, const Json& value, const Json& block, const Json& want) {
        o["id"] = id;
        o["open"] = {{"value_hex", value}, {"block_index", block}};
        const Json v = respond(o).value("verdict", Json());
        if (v.value("ok", false) != want.is_null() || (!want.is_null() && (v.value("reason", "") != want.at("reason") ||
                                                                           v.value("field", "") != want.at("field"))))
          fail("{}: the library's verdict differs for {}", path, id);
        out.push_back(std::move(o));
      };
      const Json& values = cv->at("values");
      for (std::size_t i = 0; i < values.size(); ++i)
        replay(r, "confidential.value." + std::to_string(i), values[i], i, Json());
      const Json& rejected = cv->at("rejected");
      for (std::size_t i = 0; i < rejected.size(); ++i) {
        Json o = r;
        if (rejected[i].contains("reader_secret_hex")) o["secret_hex"] = rejected[i].at("reader_secret_hex");
        replay(std::move(o), "confidential.rejected." + std::to_string(i), rejected[i].at("value_hex"),
               rejected[i].at("read_as_block"), rejected[i].at("verdict"));
      }
    }
  }
  // The splice: one object's header with another's block hash, then its
  // payload; the library must reject it as the file says.
  const Json& sp = doc.at("splice");
  for (const Json& c : doc.at("cases")) {
    if (c.at("name") != sp.at("case")) continue;
    Json r;
    r["id"] = "splice";
    r["identity"] = nested_identity(c.at("identity"), c.at("shard"), c.at("tenant_policy"));
    r["tokens"] = tokens;
    r["salt_hex"] = hex(c.at("salt").get<std::string>());
    const auto block = sp.at("read_as_block").get<std::size_t>();
    const std::string payload =
        vector_payload(sp.at("payload_block").get<std::size_t>(), c.at("payload_size").get<std::uint64_t>());
    r["open"] = {{"value_hex", sp.at("header_hex").get<std::string>() + hex(payload)}, {"block_index", block}};
    const Json got = respond(r).value("verdict", Json());
    if (got != sp.at("verdict")) fail("{}: the splice's verdict differs from the library's", path);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvkey_tool::conformance

namespace kvkey_tool::conformance {

namespace {

// r's line with the string value "@@" replaced by raw text (anything, valid JSON or not).
std::string with_raw(const Json& r, std::string_view raw) {
  std::string line = r.dump();
  const auto at = line.find("\"@@\"");
  if (at != std::string::npos) line.replace(at, 4, raw);
  return line;
}

// text with `what` inserted after the first `marker` (after the first '{' when there is none).
std::string insert_after(std::string text, std::string_view marker, std::string_view what) {
  auto at = text.find(marker);
  if (at == std::string::npos) at = text.find('{'), marker = "{";
  text.insert(at == std::string::npos ? 0 : at + marker.size(), what);
  return text;
}

// A value nested `depth` arrays (or objects) deep, as text: never built as a Json.
std::string nested(std::size_t depth, bool objects) {
  std::string s;
  s.reserve(depth * 6 + 1);
  for (std::size_t i = 0; i < depth; ++i) s += objects ? "{\"a\":" : "[";
  s += "1";
  for (std::size_t i = 0; i < depth; ++i) s += objects ? "}" : "]";
  return s;
}

// One hostile line made from the valid request r: its label and its bytes.
std::pair<std::string, std::string> hostile(Gen& g, Json r) {
  static constexpr std::array<std::string_view, 6> bad_utf8 = {"\xff",     "\xc0\x80",         "\xed\xa0\x80",
                                                               "\xe6\xa8", "\xf4\x90\x80\x80", "\x80"};
  static constexpr std::array<std::string_view, 6> surrogates = {
      "\"\\ud800\"",        "\"\\udc00\"",        "\"a\\ud800b\"",
      "\"\\ud800\\u0041\"", "\"\\udbff\\udbff\"", "\"\\ud83e\\udd99\""};  // last: valid
  static constexpr std::array<std::string_view, 8> huge = {"1e400", "-1e400", "1E+999", "18446744073709551616",
                                                           "1e308", "-0",     "1.0",    "4294967296"};
  static constexpr std::array<std::string_view, 5> not_json = {"NaN", "Infinity", "-Infinity", "nan", "undefined"};
  static constexpr std::array<std::string_view, 10> trailing = {
      " {}", "x", ",", "}", " 1", "\"", std::string_view("\0", 1), "//", "\t", "\r"};  // the last two: whitespace
  // Where a raw value goes: the id, a token, the block size or the weights epoch.
  const auto place = [&g](Json& req) {
    switch (g.below(4)) {
      case 0: req["id"] = "@@"; return "id";
      case 1: req["tokens"].insert(req["tokens"].begin(), "@@"); return "tokens";
      case 2: req["identity"]["kv"]["block_size"] = "@@"; return "kv.block_size";
      default: req["identity"]["model"]["weights_epoch"] = "@@"; return "model.weights_epoch";
    }
  };
  const std::string line = r.dump();
  switch (g.below(14)) {
    case 0: {  // bytes that are not UTF-8, in a name or anywhere
      const std::string bytes(g.pick(bad_utf8));
      if (g.chance(0.5)) {
        r["identity"]["model"]["name"] = "@@";
        return {"not UTF-8 in a string", with_raw(r, "\"x" + bytes + "y\"")};
      }
      std::string l = line;
      l.insert(g.below(l.size() + 1), bytes);
      return {"not UTF-8", l};
    }
    case 1: {  // escaped surrogates, in a value or a key
      const std::string s(g.pick(surrogates));
      if (g.chance(0.5)) {
        r["identity"]["model"]["name"] = "@@";
        return {"surrogate escape in a value", with_raw(r, s)};
      }
      return {"surrogate escape in a key", insert_after(line, "{", s + ":1,")};
    }
    case 2: {  // numbers beyond a double, beyond 64 bits, signed zero, fractions
      const char* where = place(r);
      const std::string n = g.chance(0.2) ? std::string(400, '9') : std::string(g.pick(huge));
      return {std::string("number ") + n.substr(0, 24) + " as " + where, with_raw(r, n)};
    }
    case 3: {  // literals JSON does not have
      const char* where = place(r);
      return {std::string("not JSON as ") + where, with_raw(r, g.pick(not_json))};
    }
    case 4: {  // nesting at, just past, and far past the limit (the request object is level 1)
      const std::size_t depth = g.chance(0.2) ? 100000 : max_request_depth - 2 + g.below(4);
      r["id"] = "@@";
      return {"id nested " + std::to_string(depth) + " deep", with_raw(r, nested(depth, g.chance(0.5)))};
    }
    case 5: {  // nesting inside the identity
      r["identity"]["kv"]["quant"] = {{"scheme", "@@"}};
      return {"deep kv.quant.scheme", with_raw(r, nested(g.chance(0.5) ? 3 : 40, g.chance(0.5)))};
    }
    case 6: {  // trailing data
      const std::string_view t = g.pick(trailing);
      return {"trailing data", line + std::string(t)};
    }
    case 7: {  // duplicate keys: at the top, in the identity, one spelled with an escape
      std::string l = line;
      switch (g.below(3)) {
        case 0: l = insert_after(l, "{", "\"id\":0,"); break;
        case 1: l = insert_after(l, "\"kv\":{", "\"dtype\":\"fp16\","); break;
        default: l = insert_after(l, "\"identity\":{", "\"\\u0074enant\":\"a\",\"tenant\":\"b\","); break;
      }
      return {"duplicate key", l};
    }
    case 8: {  // unknown request members, one or several
      static constexpr std::array<std::string_view, 6> names = {"identities", "Tokens", "zz", "a", "\xc3\xa9", "id "};
      for (std::uint64_t k = 0, n = g.range(1, 3); k < n; ++k) r[std::string(g.pick(names))] = 1;
      return {"unknown request member", r.dump()};
    }
    case 9: {  // unknown identity keys, several in one object or in several
      static constexpr std::array<std::string_view, 4> keys = {"zz", "aa", "block_size ", "Dtype"};
      for (std::uint64_t k = 0, n = g.range(1, 3); k < n; ++k) {
        Json& at = g.chance(0.5) ? r["identity"]["kv"] : g.chance(0.5) ? r["identity"]["model"] : r["identity"];
        at[std::string(g.pick(keys))] = k;
      }
      return {"unknown identity keys", r.dump()};
    }
    case 10: {  // not a request at all
      static constexpr std::array<std::string_view, 10> lines = {"",      " ",    "\r", "[]", "7",
                                                                 "\"x\"", "null", "{",  "}",  "{}"};
      if (g.chance(0.3)) return {"truncated", line.substr(0, g.below(line.size()))};
      if (g.chance(0.2)) return {"byte order mark", "\xef\xbb\xbf" + line};
      return {"not a request", std::string(g.pick(lines))};
    }
    case 11: {  // odd but valid: ids of every type, escapes in names
      static constexpr std::array<std::string_view, 10> ids = {"0.5",
                                                               "-7",
                                                               "-0",
                                                               "1e308",
                                                               "18446744073709551616",
                                                               "1.5e-400",
                                                               "\"\\u0000\\ud83e\\udd99\"",
                                                               "{\"a\":[]}",
                                                               "[]",
                                                               "123456789012345678901234567890"};
      if (g.chance(0.3)) {
        r["identity"]["model"]["name"] = "@@";
        return {"escapes in model.name", with_raw(r, g.chance(0.5) ? "\"a\\u0000b\"" : "\"Qwen\\/Qwen\\u00e9\"")};
      }
      r["id"] = "@@";
      return {"id of another type", with_raw(r, g.pick(ids))};
    }
    case 12: {  // a raw control character inside a string
      r["identity"]["model"]["name"] = "@@";
      return {"control character in a string", with_raw(r, g.chance(0.5) ? "\"a\tb\"" : "\"a\x01b\"")};
    }
    default: {  // an identity file that is not one, or names a field
      std::string text = r["identity"].dump();
      switch (g.below(8)) {
        case 0: text += g.chance(0.5) ? " {}" : "x"; break;
        case 1: text = insert_after(text, "{", "\"tenant\":\"a\","); break;  // a duplicate (or an extra tenant)
        case 2: text = "{\"id\":" + nested(40, false) + "}"; break;
        case 3: text = insert_after(text, "\"kv\":{", "\"zz\":1,\"aa\":NaN,"); break;
        case 4: text = insert_after(text, "\"kv\":{", "\"zz\":1,\"aa\":2,"); break;
        case 5: text = insert_after(text, "\"model\":{", "\"name\":\"\\ud800\","); break;
        case 6: {
          Json file = r["identity"];
          file["adapter"] = {{"name", "a"}, {"weights_fingerprint", std::string(64, '0')}, {"weights_file", "x"}};
          text = file.dump();
          break;
        }
        default: {
          Json file = r["identity"];
          file["kv"].erase("layout");
          text = file.dump();
          break;
        }
      }
      r.erase("identity");
      r["identity_file"] = text;
      if (g.chance(0.1)) r["identity_file"] = 7;
      return {"identity file", r.dump()};
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> hostile_lines(std::uint64_t seed, std::size_t count) {
  std::vector<Json> base = random_requests(seed, count);
  Gen g(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(count);
  for (std::size_t n = 0; n < count; ++n) {
    for (std::uint64_t k = 1; !base[n].contains("identity"); ++k) {  // an identity to mutate, not a file
      base[n] = random_requests(seed + 7919 * n + k, 1).front();
    }
    auto [label, line] = hostile(g, std::move(base[n]));
    out.emplace_back(std::to_string(n) + " (" + label + ")", std::move(line));
  }
  return out;
}

}  // namespace kvkey_tool::conformance
