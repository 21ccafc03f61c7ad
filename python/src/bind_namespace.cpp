// SPDX-License-Identifier: Apache-2.0
// kvkey.KeyNamespace, every method of it, and what they take and return
// (Chain, Slice, Verdict, ReusablePrefix, TenantSecret): the binding of
// kvkey/key_namespace.hpp and kvkey/any_key_namespace.hpp. The value helpers
// (seal_value, open_value) are in bind_value.hpp, block_hashes_batch's pool in
// hash_batch.hpp.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/any_key_namespace.hpp>
#include <kvkey/kvkey.hpp>
#include <kvkey/scope.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bind_value.hpp"
#include "binding.hpp"
#include "convert.hpp"
#include "hash_batch.hpp"
#include "tokens.hpp"

namespace kvkey_python {

namespace {

std::string slice_repr(const kvkey::Slice& s) {
  return "Slice(kv_heads=[" + std::to_string(s.kv_head_begin) + ", " + std::to_string(s.kv_head_end) + "), layers=[" +
         std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + "))";
}

// ---- hash options -------------------------------------------------------------------------

kvkey::HashOptions to_options(const py::handle& salt, const py::handle& extras) {
  kvkey::HashOptions opt;
  if (!salt.is_none()) opt.salt = to_byte_string(salt, "salt");
  if (extras.is_none()) return opt;
  for_each_item(
      extras, "extras", "a list of (token_begin, token_end, key) tuples", [&](const py::handle& item, std::size_t i) {
        const std::string field = indexed("extras", i);
        if (PyUnicode_Check(item.ptr()) || !PySequence_Check(item.ptr())) {
          throw_type_error(field, "a (token_begin, token_end, key) tuple", item);
        }
        const Py_ssize_t n = PySequence_Size(item.ptr());
        if (n != 3) {
          PyErr_Clear();
          throw py::type_error(field + " must be a (token_begin, token_end, key) tuple, got " +
                               (n < 0 ? std::string("a sequence without a length") : std::to_string(n) + " items"));
        }
        const auto t = py::reinterpret_borrow<py::sequence>(item);
        kvkey::ExtraKey e;
        e.token_begin = to_uint<std::uint64_t>(t[0], field + ".token_begin");
        e.token_end = to_uint<std::uint64_t>(t[1], field + ".token_end");
        e.key = to_byte_string(t[2], field + ".key");
        opt.extras.push_back(std::move(e));
      });
  return opt;
}

// ---- the namespace ------------------------------------------------------------------------

// The Python KeyNamespace: plain or keyed, chosen at run time (kvkey/any_key_namespace.hpp).
using Namespace = kvkey::AnyKeyNamespace;

std::vector<kvkey::Digest> extend(const Namespace& ns, std::vector<kvkey::Digest> hashes, const Tokens& tokens,
                                  const kvkey::HashOptions& opt) {
  py::gil_scoped_release release;  // tokens are borrowed or copied: no Python object is touched
  tokens.visit([&](const auto* data, std::size_t n) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    if constexpr (std::is_same_v<T, std::uint64_t>) {
      throw kvkey::input_error("internal: uint64 tokens are not accepted by KeyNamespace");
    } else {
      ns.extend_block_hashes(hashes, data, n, opt);
    }
  });
  return hashes;
}

// previous + the hashes of the remaining full blocks; the ids of the blocks
// `previous` covers are not read (an extension costs O(new blocks)).
py::list extend_py(const Namespace& ns, const py::handle& previous, const py::handle& tokens, const py::handle& salt,
                   const py::handle& extras) {
  std::vector<kvkey::Digest> hashes = to_digests(previous, "previous");
  const kvkey::HashOptions opt = to_options(salt, extras);
  const Tokens t(tokens, false, hashes.size() * ns.block_size());
  return to_list(extend(ns, std::move(hashes), t, opt));
}

// One request's block hashes, extended as its tokens arrive: keeps the ids
// and the hashes so far, so an append costs only its new blocks. Not
// thread-safe (like a list being appended to); the GIL is held throughout.
class Chain {
 public:
  Chain(py::object ns, kvkey::HashOptions opt)
      : owner_(std::move(ns)), ns_(&owner_.cast<const Namespace&>()), opt_(std::move(opt)) {}

  // Appends the new ids; returns the hashes of the blocks they completed. On an
  // error nothing is appended.
  py::list append(const py::handle& tokens) {
    const Tokens t(tokens, false);
    const std::size_t old_tokens = tokens_.size();
    const std::size_t old_hashes = hashes_.size();
    t.visit([&](const auto* data, std::size_t n) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
      if constexpr (std::is_same_v<T, std::uint64_t>) {
        throw kvkey::input_error("internal: uint64 tokens are not accepted by KeyNamespace");
      } else {
        if (old_tokens + n > tokens_.capacity()) tokens_.reserve(std::max(old_tokens + n, 2 * tokens_.capacity()));
        for (std::size_t i = 0; i < n; ++i) tokens_.push_back(static_cast<std::int64_t>(data[i]));
      }
    });
    try {
      ns_->extend_block_hashes(hashes_, tokens_.data(), tokens_.size(), opt_);
    } catch (...) {
      tokens_.resize(old_tokens);
      hashes_.resize(old_hashes);
      throw;
    }
    py::list out(hashes_.size() - old_hashes);
    for (std::size_t i = old_hashes; i < hashes_.size(); ++i) out[i - old_hashes] = to_bytes(hashes_[i]);
    return out;
  }

  py::list hashes() const { return to_list(hashes_); }
  std::size_t size() const noexcept { return tokens_.size(); }
  std::size_t blocks() const noexcept { return hashes_.size(); }

 private:
  py::object owner_;  // keeps the namespace alive
  const Namespace* ns_;
  kvkey::HashOptions opt_;
  std::vector<std::int64_t> tokens_;
  std::vector<kvkey::Digest> hashes_;
};

// One entry per (block, shard): True/False (numpy's bool too), the ints 0/1
// a store returns (redis-py's exists(), numpy integers) or a Verdict. Anything
// else is refused, so a miss can never count as a hit.
std::vector<bool> to_results(const py::handle& results) {
  std::vector<bool> out;
  for_each_item(results, "results", "a list of bools, 0/1 or Verdicts", [&](const py::handle& item, std::size_t i) {
    if (is_bool(item)) {
      out.push_back(PyObject_IsTrue(item.ptr()) == 1);
    } else if (py::isinstance<PyVerdict>(item)) {
      out.push_back(item.cast<const PyVerdict&>().ok());
    } else if (const int flag = zero_or_one(item); flag >= 0) {
      out.push_back(flag == 1);
    } else if (PyLong_Check(item.ptr()) != 0) {
      int overflow = 0;
      const long v = PyLong_AsLongAndOverflow(item.ptr(), &overflow);
      throw py::type_error(indexed("results", i) + " must be a bool, 0 or 1, or a Verdict, not the int " +
                           (overflow == 0 ? std::to_string(v) : std::string("beyond 64 bits")));
    } else {
      throw_type_error(indexed("results", i), "a bool, 0 or 1, or a Verdict", item);
    }
  });
  return out;
}

std::size_t to_max_tokens(const py::handle& max_tokens) {
  if (max_tokens.is_none()) return std::numeric_limits<std::size_t>::max();
  return to_uint<std::uint64_t>(max_tokens, "max_tokens");
}

// A header argument: any bytes-like object (strides included); verify never raises on its contents.
// An integer (is_integer: a Python int, a numpy integer scalar, anything else
// with __index__ that is not an array) is a payload size (size-only check);
// anything else is the payload's bytes.
kvkey::Verdict verify_header(const Namespace& ns, const py::handle& header, const py::handle& block_hash,
                             const py::handle& payload) {
  const kvkey::Digest block = to_digest(block_hash, "block_hash");
  const ByteString bytes(header, "header", ByteString::Str::refuse);
  if (is_integer(payload))
    return ns.verify(bytes.data(), bytes.size(), block, to_uint<std::uint64_t>(payload, "payload"));
  const ByteString kv(payload, "payload", ByteString::Str::refuse);
  py::gil_scoped_release release;  // both buffers are held; no Python object is touched
  return ns.verify(bytes.data(), bytes.size(), block, kvkey::Payload(kv.data(), kv.size()));
}

}  // namespace

void bind_namespace(py::module_& m) {
  py::class_<kvkey::Slice>(m, "Slice", "The KV-head and layer range [begin, end) one rank holds.")
      .def_readonly("kv_head_begin", &kvkey::Slice::kv_head_begin)
      .def_readonly("kv_head_end", &kvkey::Slice::kv_head_end)
      .def_readonly("layer_begin", &kvkey::Slice::layer_begin)
      .def_readonly("layer_end", &kvkey::Slice::layer_end)
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def("__repr__", &slice_repr);

  py::class_<PyVerdict>(m, "Verdict", "The outcome of verifying a header; anything but ok means a miss.")
      .def_property_readonly("ok", &PyVerdict::ok)
      .def_property_readonly("reason", &PyVerdict::reason, "the C++ Reason enumerator's name, e.g. 'identity_mismatch'")
      .def_property_readonly("field", &PyVerdict::field, "where the difference is, e.g. 'kv.dtype'; '' when ok")
      .def("__bool__", &PyVerdict::ok)
      .def("__repr__", [](const PyVerdict& v) {
        return "Verdict(ok=" + bool_repr(v.ok()) + ", reason=" + quoted(v.reason()) + ", field=" + quoted(v.field()) +
               ")";
      });

  m.def(
      "_scope_not_granted",
      [] {
        return PyVerdict{{kvkey::Reason::not_granted, "scope.readers"}};
      },
      "The miss of a shared scope read by a tenant it does not grant (kvkey.SharedScope.check_read).");

  py::class_<kvkey::ReusablePrefix>(m, "ReusablePrefix", "How much of a request's prefix the store can serve.")
      .def_readonly("blocks", &kvkey::ReusablePrefix::blocks)
      .def_readonly("tokens", &kvkey::ReusablePrefix::tokens)
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def("__repr__", [](const kvkey::ReusablePrefix& p) {
        return "ReusablePrefix(blocks=" + std::to_string(p.blocks) + ", tokens=" + std::to_string(p.tokens) + ")";
      });

  m.def(
      "reusable_prefix",
      [](const py::object& results, const py::object& shards_per_block, const py::object& block_size,
         const py::object& max_tokens) {
        return kvkey::reusable_prefix(to_results(results), to_uint<std::uint64_t>(shards_per_block, "shards_per_block"),
                                      to_uint<std::uint32_t>(block_size, "block_size"), to_max_tokens(max_tokens));
      },
      py::arg("results"), py::arg("shards_per_block"), py::arg("block_size"), py::arg("max_tokens") = py::none(),
      "Counts the leading blocks every shard can serve. results: one bool or Verdict per (block, shard), "
      "block-major (anything else raises TypeError); counting stops at the first block any shard misses.");

  py::class_<kvkey::TenantSecret>(m, "TenantSecret",
                                  "A tenant's secret key for keyed namespaces: 32 to 256 bytes, held in C++ and "
                                  "wiped when freed; never printed.")
      .def(py::init([](const py::object& secret) {
             std::string bytes = ByteString(secret, "secret", ByteString::Str::refuse).str();
             return kvkey::TenantSecret(std::move(bytes));  // the temporary copy is wiped
           }),
           py::arg("secret"), "From raw bytes (bytes-like; at least 32). The caller's object is not wiped.")
      .def_static(
          "from_file", [](const py::object& path) { return kvkey::TenantSecret::from_file(to_path(path, "path")); },
          py::arg("path"), "From a file of hex text or raw bytes, mode 0600 or 0640 (IoError otherwise).")
      .def_static(
          "from_env", [](const py::object& name) { return kvkey::TenantSecret::from_env(to_text(name, "name")); },
          py::arg("name"), "From an environment variable holding hex or 'base64:' + base64.")
      .def("__len__", &kvkey::TenantSecret::size)
      .def("__repr__", [](const kvkey::TenantSecret&) { return std::string("TenantSecret(<hidden>)"); })
      .def("__reduce__", [](const kvkey::TenantSecret&) -> py::object {
        throw py::type_error("a TenantSecret cannot be pickled or copied");
      });

  py::class_<Chain>(m, "Chain", "One request's block hashes, extended as its tokens arrive (KeyNamespace.chain()).")
      .def("append", &Chain::append, py::arg("tokens"),
           "Appends the new token ids (list, tuple, sequence or 1-D integer buffer) and returns the hashes of the "
           "blocks they completed; a partial tail waits for the next append. On an error nothing is appended.")
      .def_property_readonly("hashes", &Chain::hashes, "every full block's hash so far (a new list)")
      .def("__len__", &Chain::size, "the number of token ids appended")
      .def("__repr__", [](const Chain& c) {
        return "Chain(tokens=" + std::to_string(c.size()) + ", blocks=" + std::to_string(c.blocks()) + ")";
      });

  // The default of single_tenant and payload_check: "not given", so the identity file's policy applies
  // (an explicit None is a TypeError, as for any other non-bool).
  const py::object unset = py::module_::import("builtins").attr("object")();
  m.attr("_POLICY_UNSET") = unset;
  py::class_<Namespace>(m, "KeyNamespace", "Keys, block hashes and envelopes of one deployment's rank.")
      .def(py::init([unset](const py::object& id, const py::object& single, const py::object& secret,
                            const py::object& payload_check, const py::object& confidential, const py::object& scope) {
             const PyIdentity& given = to_instance<PyIdentity>(id, "identity");
             kvkey::Identity identity = given.value();
             // The identity file's policy (Identity.from_json / from_file) unless the caller says otherwise.
             const kvkey::Policy from_file = given.file_policy.value_or(kvkey::Policy{});
             kvkey::Policy policy;
             policy.tenant = single.is(unset)                   ? from_file.tenant
                             : to_bool(single, "single_tenant") ? kvkey::TenantPolicy::single_tenant
                                                                : kvkey::Policy{}.tenant;
             policy.confidential =
                 confidential.is(unset) ? from_file.confidential : to_bool(confidential, "confidential");
             if (!scope.is_none()) {  // a shared scope's namespace: tenant "_scope.<name>" (docs/format.md, section 12)
               if (policy.tenant == kvkey::TenantPolicy::single_tenant) {
                 throw_input_error("a shared scope's namespace is not single_tenant: give scope or single_tenant");
               }
               identity.tenant = kvkey::scope_tenant(to_text(scope, "scope"));
               policy.tenant = kvkey::TenantPolicy::shared_scope;
             }
             policy.payload = from_file.payload;
             if (!payload_check.is(unset)) {
               const std::string check = to_text(payload_check, "payload_check");
               if (check == "size_only") {
                 policy.payload = kvkey::PayloadCheck::size_only;
               } else if (check == "required") {
                 policy.payload = kvkey::Policy{}.payload;
               } else {
                 throw_input_error("payload_check must be 'required' or 'size_only', not " + quoted(check));
               }
             }
             if (secret.is_none()) return Namespace(identity, policy);
             return Namespace(identity, to_instance<kvkey::TenantSecret>(secret, "secret"), policy);
           }),
           py::arg("identity"), py::kw_only(), py::arg("single_tenant") = unset, py::arg("secret") = py::none(),
           py::arg("payload_check") = unset, py::arg("confidential") = unset, py::arg("scope") = py::none(),
           "Validates the identity (IdentityError names the bad field). single_tenant=True: a store no one else "
           "shares; the tenant must then be empty. secret: a kvkey.TenantSecret keys every hash with "
           "HMAC-SHA-256 and authenticates payloads with Poly1305, as the C++ KeyNamespace<HmacSha256> "
           "(docs/security.md). confidential=True (with a secret): payloads are stored encrypted with "
           "AES-256-GCM (seal_value / open_value; docs/format.md, \"Mode aes256_gcm\"). scope='name': the "
           "namespace of shared scope 'name' (tenant '_scope.name'; kvkey.SharedScope declares who may use it). "
           "payload_check='size_only': explicit opt-out of payload digests for callers that "
           "cannot see the bytes (then seal/verify take a payload size). Left out, single_tenant, confidential "
           "and payload_check are the identity file's policy for an identity read by Identity.from_json / "
           "from_file, else False, False and 'required'.")
      .def_property_readonly("keyed", &Namespace::keyed, "True when built with a TenantSecret")
      .def_property_readonly("confidential", &Namespace::confidential,
                             "True when built with confidential=True: payloads are stored as AES-256-GCM ciphertext")
      .def_property_readonly(
          "scope",
          [](const Namespace& ns) -> py::object {
            if (ns.policy().tenant != kvkey::TenantPolicy::shared_scope) return py::none();
            return py::str(ns.identity().tenant.substr(kvkey::scope_tenant_prefix.size()));
          },
          "The shared scope's name for a scope's namespace, else None")
      .def(
          "scope_transition",
          [](const Namespace& ns, const py::object& last, const py::object& salt) {
            const kvkey::Digest d = to_digest(last, "last_scope_block");
            const std::string s = salt.is_none() ? std::string() : to_text(salt, "salt");
            return to_bytes(ns.visit([&](const auto& n) { return kvkey::scope_transition(n, d, s); }));
          },
          py::arg("last_scope_block"), py::kw_only(), py::arg("salt") = py::none(),
          "The parent of this tenant's first private block after a shared scope's prefix: H('T' || first parent "
          "|| last_scope_block) (docs/format.md, \"Scope transition\"). kvkey.scoped_block_hashes uses it.")
      .def_property_readonly(
          "payload_check",
          [](const Namespace& ns) {
            return std::string(ns.policy().payload == kvkey::PayloadCheck::size_only ? "size_only" : "required");
          },
          "'required' or 'size_only', as given to the constructor")
      .def(
          "with_epoch",
          [](const Namespace& ns, const py::object& epoch) {
            return ns.with_epoch(to_uint<std::uint64_t>(epoch, "epoch"));
          },
          py::arg("epoch"),
          "This namespace under weights epoch `epoch`, identical in every other respect: identity, tenant secret "
          "(a keyed namespace stays keyed) and policy (single_tenant, payload_check). Switch every rank together.")
      .def(
          "for_rank",
          [](const Namespace& ns, const py::object& rank, const py::object& pp_rank) {
            if (pp_rank.is_none()) return ns.for_rank(to_uint<std::uint32_t>(rank, "tp_rank"));
            return ns.for_rank(to_uint<std::uint32_t>(rank, "tp_rank"), to_uint<std::uint32_t>(pp_rank, "pp_rank"));
          },
          py::arg("tp_rank"), py::arg("pp_rank") = py::none(),
          "This deployment's namespace for one rank: identical but for the shard's ranks (tenant secret and policy "
          "kept). for_rank(r): engine rank r, stage-major (r = pp_rank * tp_size + tp_rank; with pp_size 1 the "
          "tensor-parallel rank); for_rank(tp_rank, pp_rank): that rank of that pipeline stage. ns.all_ranks() "
          "(every rank of every stage) is what a multi-rank Connector takes. IdentityError when a rank is out of "
          "range.")
      .def(
          "all_ranks", [](const Namespace& ns) { return ns.all_ranks(); },
          "Every rank's namespace, for_rank(0) .. for_rank(tp_size * pp_size - 1): the ranks a Connector takes, so "
          "a lookup verifies every pipeline stage.")
      .def_property_readonly(
          "identity", [](const Namespace& ns) { return PyIdentity(ns.identity()); },
          "the validated identity as encoded (a copy)")
      .def_property_readonly(
          "single_tenant", [](const Namespace& ns) { return ns.policy().tenant == kvkey::TenantPolicy::single_tenant; })
      .def_property_readonly("slice", [](const Namespace& ns) { return ns.slice(); })
      .def_property_readonly("encoding",
                             [](const Namespace& ns) {
                               const auto& e = ns.encoding();
                               return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
                             })
      .def_property_readonly("root", [](const Namespace& ns) { return to_bytes(ns.root()); })
      .def_property_readonly("block_size", &Namespace::block_size)
      .def_property_readonly("key_prefix", &Namespace::key_prefix)
      .def_property_readonly("tenant_prefix", &Namespace::tenant_prefix)
      .def_property_readonly("secret_prefix", &Namespace::secret_prefix,
                             "keyed: 'kvk4/<tenant>/k<secret id>/' ('c<secret id>' when confidential), every key "
                             "under this tenant secret; plain: 'kvk4/<tenant>/p/', every plain key of the tenant")
      .def_property_readonly(
          "secret_id",
          [](const Namespace& ns) -> py::object {
            const auto& id = ns.secret_id();
            return id ? py::object(py::str(id->hex())) : py::object(py::none());
          },
          "The tenant secret's public id (16 hex digits), or None in a plain namespace")
      .def(
          "block_hashes",
          [](const Namespace& ns, const py::object& tokens, const py::object& salt, const py::object& extras,
             const py::object& previous) { return extend_py(ns, previous, tokens, salt, extras); },
          py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(), py::arg("extras") = py::none(),
          py::arg("previous") = py::none(),
          "32-byte hashes (bytes) of every full block. tokens: list/sequence of ints or a 1-D int32/int64/uint32 "
          "buffer (numpy), read without per-token conversion. previous: hashes of the first blocks from an earlier "
          "call (incremental). The GIL is released while hashing.")
      .def(
          "extend_block_hashes",
          [](const Namespace& ns, const py::object& previous, const py::object& tokens, const py::object& salt,
             const py::object& extras) { return extend_py(ns, previous, tokens, salt, extras); },
          py::arg("previous"), py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(),
          py::arg("extras") = py::none(),
          "previous + the hashes of the remaining full blocks of tokens (the whole sequence so far).")
      .def(
          "block_hashes_batch",
          [](const Namespace& ns, const py::object& sequences, const py::object& threads) {
            const auto all = ns.visit([&](const auto& n) { return block_hashes_batch(n, sequences, threads); });
            py::list out(all.size());
            for (std::size_t r = 0; r < all.size(); ++r) out[r] = to_list(all[r]);
            return out;
          },
          py::arg("sequences"), py::kw_only(), py::arg("threads") = 0,
          "[block_hashes(s) for s in sequences], hashed by a pool of `threads` threads (0: one per core) with the "
          "GIL released. Each sequence is any tokens argument of block_hashes.")
      .def(
          "chain",
          [](const py::object& self, const py::object& salt, const py::object& extras) {
            return Chain(self, to_options(salt, extras));
          },
          py::kw_only(), py::arg("salt") = py::none(), py::arg("extras") = py::none(),
          "A kvkey.Chain for one request: append its tokens as they arrive; each append costs only the blocks it "
          "completes.")
      .def(
          "first_parent",
          [](const Namespace& ns, const py::object& salt) {
            return to_bytes(ns.first_parent(salt.is_none() ? std::string() : to_byte_string(salt, "salt")));
          },
          py::arg("salt") = py::none())
      .def(
          "object_hash",
          [](const Namespace& ns, const py::object& h) { return to_bytes(ns.object_hash(to_digest(h, "block_hash"))); },
          py::arg("block_hash"))
      .def(
          "store_key",
          [](const Namespace& ns, const py::object& h) { return ns.store_key(to_digest(h, "block_hash")); },
          py::arg("block_hash"), "\"kvk4/<tenant>/<p | k<secret id> | c<secret id>>/<model>/e<epoch>/<64 hex>\"")
      .def(
          "seal",
          [](const Namespace& ns, const py::object& h, const py::object& payload) {
            const kvkey::Digest block = to_digest(h, "block_hash");
            if (is_integer(payload)) {  // size only: the policy must opt out
              const kvkey::Envelope e = ns.seal(block, to_uint<std::uint64_t>(payload, "payload"));
              return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
            }
            const ByteString bytes(payload, "payload", ByteString::Str::refuse);
            kvkey::Envelope e;
            {
              py::gil_scoped_release release;  // the buffer is held; no Python object is touched
              e = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size()));
            }
            return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
          },
          py::arg("block_hash"), py::arg("payload"),
          "The envelope_size-byte header to store beside the KV bytes. payload: the KV bytes (any C-contiguous "
          "bytes-like object or numpy array, read in place with the GIL released); an int payload size only with "
          "payload_check='size_only'.")
      .def(
          "verify",
          [](const Namespace& ns, const py::object& header, const py::object& h, const py::object& payload) {
            return PyVerdict{verify_header(ns, header, h, payload)};
          },
          py::arg("header"), py::arg("block_hash"), py::arg("payload"),
          "Checks a header and the payload read with it (bytes-like or numpy, zero-copy when contiguous, GIL "
          "released); an int payload size checks everything but the bytes (never ok unless "
          "payload_check='size_only'). Never raises for bad header or payload bytes: returns a Verdict.")
      .def(
          "verify_header",
          [](const Namespace& ns, const py::object& header, const py::object& h) {
            const kvkey::Digest block = to_digest(h, "block_hash");
            const ByteString bytes(header, "header", ByteString::Str::refuse);
            return PyVerdict{ns.verify_header(bytes.data(), bytes.size(), block)};
          },
          py::arg("header"), py::arg("block_hash"),
          "Checks what a header alone shows (identity, namespace kind, block, integrity mode), for counting lookups "
          "only, never sufficient to serve a block: load verifies the payload. header: exactly envelope_size bytes "
          "(e.g. GETRANGE key 0 1023); any other length is malformed. Never raises for bad header bytes.")
      .def(
          "reusable_prefix",
          [](const Namespace& ns, const py::object& results, const py::object& shards_per_block,
             const py::object& max_tokens) {
            return ns.reusable_prefix(to_results(results), to_uint<std::uint64_t>(shards_per_block, "shards_per_block"),
                                      to_max_tokens(max_tokens));
          },
          py::arg("results"), py::arg("shards_per_block"), py::arg("max_tokens") = py::none())
      .def(
          "seal_value",
          [](const Namespace& ns, const py::object& block_hash, const py::object& payload) {
            return ns.visit([&](const auto& n) { return seal_value_bytes(n, block_hash, payload); });
          },
          py::arg("block_hash"), py::arg("payload"),
          "One store value: the envelope_size-byte header, then the payload's bytes (docs/format.md, \"Stored "
          "values\"). payload: the KV bytes (any bytes-like object or numpy array, read in place with the GIL "
          "released), or a list of them (per-layer K and V; the value holds their concatenation).")
      .def(
          "open_value",
          [](const Namespace& ns, const py::object& value, const py::object& block_hash) {
            const kvkey::Digest block = to_digest(block_hash, "block_hash");
            const HeldValue held(value, "value");
            kvkey::OpenedValue opened;
            {
              py::gil_scoped_release release;
              opened =
                  ns.visit([&](const auto& n) { return n.open_value(held.bytes.data(), held.bytes.size(), block); });
            }
            py::object verdict = py::cast(PyVerdict{opened.verdict});
            return opened_value(held, std::move(verdict), opened);
          },
          py::arg("value"), py::arg("block_hash"),
          "Verifies a stored value (header + payload) for block_hash, with the GIL released. Returns an OpenedValue: "
          ".verdict, and .payload, a read-only memoryview of the verified bytes inside `value` (zero-copy for a "
          "contiguous value; None unless ok). Never raises for bad value bytes.")
      .def(
          "open_values",
          [](const Namespace& ns, const py::object& values, const py::object& block_hashes) {
            const std::vector<kvkey::Digest> blocks = to_digests(block_hashes, "block_hashes");
            std::deque<HeldValue> held;  // stable addresses
            for_each_item(values, "values", "a list of bytes-like values", [&](const py::handle& item, std::size_t i) {
              held.emplace_back(item, indexed("values", i));
            });
            if (held.size() != blocks.size()) {
              throw_input_error("values has " + std::to_string(held.size()) + " items and block_hashes " +
                                std::to_string(blocks.size()) + ": give one block hash per value");
            }
            std::vector<kvkey::OpenedValue> opened(held.size());
            {
              py::gil_scoped_release release;  // once for the whole batch
              ns.visit([&](const auto& n) {
                for (std::size_t i = 0; i < held.size(); ++i) {
                  opened[i] = n.open_value(held[i].bytes.data(), held[i].bytes.size(), blocks[i]);
                }
              });
            }
            py::list out(held.size());
            for (std::size_t i = 0; i < held.size(); ++i) {
              out[i] = py::cast(opened_value(held[i], py::cast(PyVerdict{opened[i].verdict}), opened[i]));
            }
            return out;
          },
          py::arg("values"), py::arg("block_hashes"),
          "[open_value(v, h) for v, h in zip(values, block_hashes)], verified with the GIL released once. The lists "
          "must have equal lengths (InputError otherwise).")
      .def_property_readonly(
          "payload_size",
          [](const Namespace& ns) -> py::object {
            const auto size = ns.visit([](const auto& n) { return n.payload_size(); });
            return size ? py::object(py::int_(*size)) : py::object(py::none());
          },
          "One block's KV bytes in this rank's slice: dense 2 x layers x heads x head_dim x block_size x itemsize, "
          "MLA layers x head_dim x block_size x itemsize (4-bit types packed two per byte); None when the identity "
          "has a quantization scheme (the scales' layout is engine-specific).")
      .def("__repr__", [](const Namespace& ns) {
        return "KeyNamespace(" + identity_repr(ns.identity()) +
               ", single_tenant=" + bool_repr(ns.policy().tenant == kvkey::TenantPolicy::single_tenant) +
               (ns.keyed() ? ", secret=TenantSecret(<hidden>)" : "") +
               (ns.confidential() ? ", confidential=True" : "") + ", key_prefix=" + quoted(ns.key_prefix()) + ")";
      });
}

}  // namespace kvkey_python
