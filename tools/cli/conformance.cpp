// SPDX-License-Identifier: Apache-2.0
// `kvkey conformance-testee` (the C++ library's testee) and `kvkey conformance`
// (the runner): docs/conformance.md.
#include "cli/conformance.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/tool.hpp"

#include <kvkey/identity_file.hpp>

namespace kvkey_tool {

namespace {

using Msg = conformance::Json;

std::string dump(const Msg& j) { return j.dump(-1, ' ', false, Msg::error_handler_t::replace); }

// s cut after about max bytes, never inside a UTF-8 character.
std::string shorten(const std::string& s, std::size_t max = 300) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  return s.substr(0, cut) + "... (" + std::to_string(s.size()) + " bytes)";
}

// The first difference between the oracle's response and the testee's, or ""
// when they agree. An error's "message" is free text and not compared.
std::string difference(const Msg& want, const Msg& got) {
  if (!got.is_object()) return "not a JSON object: " + shorten(dump(got), 200);
  Msg w = want;
  Msg g = got;
  for (Msg* j : {&w, &g}) {
    if (j->contains("error") && (*j)["error"].is_object()) (*j)["error"].erase("message");
  }
  // In the order a defect shows first: the identity encoding before what is derived from it.
  std::vector<std::string> order = {"id",     "error",      "encoding", "root",   "prefix",
                                    "blocks", "blocks_u64", "keys",     "verdict"};
  for (const auto& item : w.items()) {
    if (std::find(order.begin(), order.end(), item.key()) == order.end()) order.push_back(item.key());
  }
  for (const std::string& key : order) {
    if (!w.contains(key)) continue;
    const Msg& value = w[key];
    if (!g.contains(key)) return key + ": missing (want " + shorten(dump(value), 200) + ")";
    const Msg& other = g[key];
    if (value == other) continue;
    if (value.is_array() && other.is_array()) {
      if (value.size() != other.size()) {
        return key + ": " + std::to_string(other.size()) + " entries, want " + std::to_string(value.size());
      }
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (value[i] != other[i]) {
          return key + "[" + std::to_string(i) + "]: got " + dump(other[i]) + ", want " + dump(value[i]);
        }
      }
    }
    return key + ": got " + shorten(dump(other), 200) + ", want " + shorten(dump(value), 200);
  }
  for (const auto& [key, value] : g.items()) {
    if (!w.contains(key)) return key + ": not expected (got " + shorten(dump(value), 200) + ")";
  }
  return {};
}

/// The testee as a child process (/bin/sh -c CMD) with pipes to its stdin and
/// from its stdout; stderr is shared.
class Child {
 public:
  explicit Child(const std::string& command) {
    int in[2];
    int out[2];
    if (pipe(in) != 0 || pipe(out) != 0) fail("conformance: pipe: {}", std::strerror(errno));
    pid_ = fork();
    if (pid_ < 0) fail("conformance: fork: {}", std::strerror(errno));
    if (pid_ == 0) {
      setpgid(0, 0);  // its own process group: a hung testee is killed with its children
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]), close(in[1]), close(out[0]), close(out[1]);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid_, pid_);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    close_input();
    if (from_ >= 0) close(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  /// Writes every line (a false return: the testee stopped reading), then closes its stdin.
  bool write_all(const std::vector<std::string>& lines) {
    bool ok = true;
    for (const std::string& line : lines) {
      for (std::size_t done = 0; ok && done < line.size();) {
        const ssize_t n = ::write(to_, line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          ok = false;
        } else {
          done += static_cast<std::size_t>(n);
        }
      }
    }
    close_input();
    return ok;
  }
  enum class Read { line, end, timeout };

  /// The next line of output without its newline; `end` at the end of output,
  /// `timeout` when none came for timeout_ms (the testee is then killed).
  Read read_line(std::string& line, int timeout_ms) {
    for (;;) {
      if (const auto nl = buffer_.find('\n', scanned_); nl != std::string::npos) {
        line.assign(buffer_, 0, nl);
        buffer_.erase(0, nl + 1);
        scanned_ = 0;
        return Read::line;
      }
      scanned_ = buffer_.size();
      if (from_ < 0) break;
      pollfd p{from_, POLLIN, 0};
      const int ready = poll(&p, 1, timeout_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        kill_group();
        return Read::timeout;
      }
      char chunk[65536];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(from_);
        from_ = -1;
        break;
      }
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
    if (buffer_.empty()) return Read::end;
    line.swap(buffer_);  // a last line without its newline
    buffer_.clear();
    scanned_ = 0;
    return Read::line;
  }
  /// The exit status (waits for the testee to end).
  int wait() {
    int status = 0;
    if (waitpid(pid_, &status, 0) < 0) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  void close_input() {
    if (to_ >= 0) close(to_);
    to_ = -1;
  }
  void kill_group() {
    if (pid_ > 0) ::kill(-pid_, SIGKILL);
    if (from_ >= 0) close(from_);
    from_ = -1;
  }
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buffer_;
  std::size_t scanned_ = 0;
};

}  // namespace

ConformanceCommands add_conformance_commands(CLI::App& app, ConformanceOptions& o) {
  auto* runner = app.add_subcommand("conformance",
                                    "Hold a testee (another implementation) to the library's bytes "
                                    "over the conformance protocol (docs/conformance.md)");
  runner->add_option("--testee", o.testee, "the testee's command line, run by /bin/sh -c")->required();
  runner->add_option("--cases", o.cases, "random cases to run (default 1000; 0 with --vectors replays only them)");
  runner->add_option("--seed", o.seed, "seed of the random cases (default: a fresh one, printed)");
  runner->add_option("--vectors", o.vectors, "replay a vectors file (tests/vectors/format-v4.json) first");
  runner->add_option("--show", o.show, "differences to print (default 5)");
  runner->add_flag("--mutate", o.mutate,
                   "send hostile lines instead (not UTF-8, lone surrogates, numbers beyond a double, deep "
                   "nesting, trailing data, duplicate and unknown keys): the testee must answer each");
  runner->add_option("--timeout", o.timeout, "seconds to wait for one answer before the testee fails (default 60)");
  auto* testee = app.add_subcommand("conformance-testee",
                                    "Answer conformance requests (one JSON object per line "
                                    "on stdin) with the C++ library");
  testee->add_option("--perturb", o.perturb,
                     "emulate a defect (adapter, salt, extras, u64, field, payload), to test the runner");
  return {runner, testee};
}

int run_conformance_testee(const ConformanceOptions& o, std::string& out) {
  (void)out;  // answers stream to stdout, one line each, as they are computed
  static const std::vector<std::string> perturbations = {"", "adapter", "salt", "extras", "u64", "field", "payload"};
  if (std::find(perturbations.begin(), perturbations.end(), o.perturb) == perturbations.end()) {
    fail("conformance-testee: unknown --perturb {} (known: adapter, salt, extras, u64, field, payload)",
         quote(o.perturb));
  }
  // Every line gets one answer, whatever its bytes (docs/conformance.md, "The protocol").
  std::string line;
  while (std::getline(std::cin, line)) {
    Msg response;
    try {
      response = conformance::respond_line(line, o.perturb);
    } catch (const std::exception& e) {  // a bug, not a refusal: still one line, and the next
      response = {{"id", nullptr}, {"error", {{"kind", "internal_error"}, {"field", ""}, {"message", e.what()}}}};
    }
    const std::string text = dump(response) + "\n";
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
      fail("conformance-testee: cannot write to stdout");
    }
  }
  return exit_ok;
}

int run_conformance(const ConformanceOptions& o, std::string& out) {
  const std::uint64_t cases = parse_uint_option(o.cases, 32, "--cases");
  const std::uint64_t show = parse_uint_option(o.show, 32, "--show");
  const std::uint64_t timeout = parse_uint_option(o.timeout, 32, "--timeout");
  const std::uint64_t seed = o.seed.empty() ? (std::uint64_t{std::random_device{}()} << 32 | std::random_device{}())
                                            : parse_uint_option(o.seed, 64, "--seed");
  // Each case: a label for messages and the line sent.
  std::vector<std::pair<std::string, std::string>> sent;
  if (!o.vectors.empty()) {
    for (const Msg& r : conformance::vector_requests(o.vectors)) sent.emplace_back(dump(r.value("id", Msg())), dump(r));
  }
  const std::size_t from_vectors = sent.size();
  if (o.mutate) {
    for (auto& c : conformance::hostile_lines(seed, cases)) sent.push_back(std::move(c));
  } else {
    for (const Msg& r : conformance::random_requests(seed, cases))
      sent.emplace_back(dump(r.value("id", Msg())), dump(r));
  }
  std::fprintf(stderr, "conformance: %zu %scases (%zu from %s), seed %llu\n", sent.size(), o.mutate ? "hostile " : "",
               from_vectors, o.vectors.empty() ? "no vectors file" : o.vectors.c_str(),
               static_cast<unsigned long long>(seed));

  std::vector<std::string> lines;
  lines.reserve(sent.size());
  for (const auto& c : sent) lines.push_back(c.second + "\n");
  signal(SIGPIPE, SIG_IGN);  // a testee that stops reading is a failure, not the runner's death
  Child child(o.testee);
  std::thread writer([&child, &lines] { child.write_all(lines); });
  std::size_t passed = 0;
  std::size_t failed = 0;
  bool hung = false;
  std::vector<std::string> failures;
  std::string line;
  for (std::size_t n = 0; n < sent.size(); ++n) {
    const Msg want = conformance::respond_line(sent[n].second);  // the oracle reads the line as the testee does
    std::string why;
    const auto read = hung ? Child::Read::timeout : child.read_line(line, static_cast<int>(timeout * 1000));
    if (read == Child::Read::timeout) {
      why = "no response within " + std::to_string(timeout) + " s (the testee was stopped)";
      hung = true;
    } else if (read == Child::Read::end) {
      why = "no response (the testee's output ended)";
    } else {
      try {
        // Strict, as the testee must be: a response nested deeper than any request,
        // with a duplicate key or a number beyond a double is not an answer.
        why = difference(want, kvkey::parse_strict_json<Msg>(line, conformance::max_request_depth));
      } catch (const kvkey::error& e) {
        why = "response is not strict JSON (" + e.message() + "): " + escape(shorten(line, 200));
      }
    }
    if (why.empty()) {
      ++passed;
      continue;
    }
    ++failed;
    if (failures.size() < show) {
      failures.push_back("  case " + escape(sent[n].first, 200) + ": " + why +
                         "\n    request: " + escape(shorten(sent[n].second)) + "\n");
    }
  }
  std::size_t surplus = 0;  // lines beyond the last request's answer are failures too
  while (!hung && child.read_line(line, static_cast<int>(timeout * 1000)) == Child::Read::line) ++surplus;
  writer.join();
  const int status = child.wait();
  out += fmt::format("conformance: {}: {} passed, {} failed\n", o.testee, passed, failed + surplus);
  for (const std::string& f : failures) out += f;
  if (surplus != 0) out += fmt::format("conformance: {} lines beyond the last answer\n", surplus);
  if (status != 0) out += fmt::format("conformance: the testee exited with status {}\n", status);
  if (failed != 0) out += fmt::format("conformance: rerun with --seed {}\n", seed);
  return failed == 0 && surplus == 0 && status == 0 ? exit_ok : exit_rejected;
}

std::vector<Command> add_conformance_command(CLI::App& app) {
  auto o = std::make_shared<ConformanceOptions>();
  const ConformanceCommands cmds = add_conformance_commands(app, *o);
  return {{cmds.runner, [o](std::string& out) { return run_conformance(*o, out); }},
          {cmds.testee, [o](std::string& out) { return run_conformance_testee(*o, out); }}};
}

}  // namespace kvkey_tool
