// KeyNamespace.block_hashes_batch: many sequences hashed by kvkey::BatchHasher
// with the GIL released.
#ifndef KVKEY_PYTHON_HASH_BATCH_HPP
#define KVKEY_PYTHON_HASH_BATCH_HPP

#include <pybind11/pybind11.h>

#include <kvkey/batch.hpp>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "convert.hpp"
#include "tokens.hpp"

namespace kvkey_python {

// Runs f; an error about one sequence's tokens gets "sequences[r]: " in front.
template <class F>
void with_sequence_name(std::size_t r, F&& f) {
  const auto named = [r](std::string_view what) { return indexed("sequences", r) + ": " + std::string(what); };
  try {
    f();
  } catch (const py::type_error& e) {
    throw py::type_error(named(e.what()));
  } catch (const py::value_error& e) {
    throw py::value_error(named(e.what()));
  } catch (const kvkey::input_error& e) {
    throw kvkey::input_error(named(e.message()));
  }
}

// One list of hashes per sequence, equal to ns.block_hashes(sequence) for each.
// Sequences are converted (or borrowed) first, with the GIL; then the batch
// runs without it, one BatchHasher call per token width. threads=0: one thread
// per core.
template <class Hash>
std::vector<std::vector<kvkey::Digest>> block_hashes_batch(const kvkey::KeyNamespace<Hash>& ns,
                                                           const py::handle& sequences, const py::handle& threads) {
  unsigned n_threads = to_uint<std::uint32_t>(threads, "threads");
  if (n_threads == 0) n_threads = std::max(1U, std::thread::hardware_concurrency());
  n_threads = std::min(n_threads, 256U);
  std::deque<Tokens> tokens;  // stable addresses: requests point into them
  for_each_item(sequences, "sequences", "a list of token sequences", [&](const py::handle& item, std::size_t r) {
    with_sequence_name(r, [&] { tokens.emplace_back(item, false); });
  });
  std::vector<std::vector<kvkey::Digest>> out(tokens.size());
  py::gil_scoped_release release;
  kvkey::BatchHasher pool(n_threads);
  const auto run = [&](auto width) {
    using T = decltype(width);
    std::vector<kvkey::BlockHashRequest<T>> requests;
    std::vector<std::size_t> index;
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      tokens[r].visit([&](const auto* data, std::size_t n) {
        if constexpr (std::is_same_v<std::remove_const_t<std::remove_pointer_t<decltype(data)>>, T>) {
          requests.push_back({data, n, nullptr});
          index.push_back(r);
        }
      });
    }
    if (requests.empty()) return;
    std::vector<std::vector<kvkey::Digest>> got;
    pool.block_hashes(ns, requests, got);
    for (std::size_t k = 0; k < index.size(); ++k) out[index[k]] = std::move(got[k]);
  };
  try {
    run(std::int32_t{});
    run(std::int64_t{});
    run(std::uint32_t{});
  } catch (const kvkey::error&) {
    // Report the first bad sequence in order, whatever its token width.
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      with_sequence_name(r, [&] {
        tokens[r].visit([&](const auto* data, std::size_t n) {
          if constexpr (!std::is_same_v<std::remove_const_t<std::remove_pointer_t<decltype(data)>>, std::uint64_t>) {
            (void)ns.block_hashes(data, n);
          }
        });
      });
    }
    throw;
  }
  return out;
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_HASH_BATCH_HPP
