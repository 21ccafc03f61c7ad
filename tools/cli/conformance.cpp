// SPDX-License-Identifier: Apache-2.0
// `kvkey conformance-testee` (the C++ library's testee) and `kvkey conformance`
// (the runner): docs/conformance.md.
#include "cli/conformance.hpp"

#include <fcntl.h>
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
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]), close(in[1]), close(out[0]), close(out[1]);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    close_input();
    if (from_ != nullptr) std::fclose(from_);
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
  /// The next line of output without its newline; false at end of output.
  bool read_line(std::string& line) {
    line.clear();
    for (int c; (c = std::fgetc(from_)) != EOF;) {
      if (c == '\n') return true;
      line.push_back(static_cast<char>(c));
    }
    return !line.empty();
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
  pid_t pid_ = -1;
  int to_ = -1;
  std::FILE* from_ = nullptr;
};

}  // namespace

ConformanceCommands add_conformance_commands(CLI::App& app, ConformanceOptions& o) {
  auto* runner = app.add_subcommand("conformance",
                                    "Hold a testee (another implementation) to the library's bytes "
                                    "over the conformance protocol (docs/conformance.md)");
  runner->add_option("--testee", o.testee, "the testee's command line, run by /bin/sh -c")->required();
  runner->add_option("--cases", o.cases, "random cases to run (default 1000; 0 with --vectors replays only them)");
  runner->add_option("--seed", o.seed, "seed of the random cases (default: a fresh one, printed)");
  runner->add_option("--vectors", o.vectors, "replay a vectors file (tests/vectors/format-v3.json) first");
  runner->add_option("--show", o.show, "differences to print (default 5)");
  auto* testee = app.add_subcommand("conformance-testee",
                                    "Answer conformance requests (one JSON object per line "
                                    "on stdin) with the C++ library");
  testee->add_option("--perturb", o.perturb,
                     "emulate a defect (adapter, salt, extras, u64, field), to test the runner");
  return {runner, testee};
}

int run_conformance_testee(const ConformanceOptions& o, std::string& out) {
  (void)out;  // answers stream to stdout, one line each, as they are computed
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    Msg response;
    try {
      response = conformance::respond(Msg::parse(line), o.perturb);
    } catch (const Msg::parse_error&) {
      response = {{"id", nullptr}, {"error", {{"kind", "input_error"}, {"field", "request"}, {"message", "not JSON"}}}};
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
  const std::uint64_t seed = o.seed.empty() ? (std::uint64_t{std::random_device{}()} << 32 | std::random_device{}())
                                            : parse_uint_option(o.seed, 64, "--seed");
  std::vector<Msg> requests;
  if (!o.vectors.empty()) requests = conformance::vector_requests(o.vectors);
  for (Msg& r : conformance::random_requests(seed, cases)) requests.push_back(std::move(r));
  std::fprintf(stderr, "conformance: %zu cases (%zu from %s), seed %llu\n", requests.size(), requests.size() - cases,
               o.vectors.empty() ? "no vectors file" : o.vectors.c_str(), static_cast<unsigned long long>(seed));

  std::vector<std::string> lines;
  lines.reserve(requests.size());
  for (const Msg& r : requests) lines.push_back(dump(r) + "\n");
  signal(SIGPIPE, SIG_IGN);  // a testee that stops reading is a failure, not the runner's death
  Child child(o.testee);
  std::thread writer([&child, &lines] { child.write_all(lines); });
  std::size_t passed = 0;
  std::vector<std::string> failures;
  std::string line;
  for (std::size_t n = 0; n < requests.size(); ++n) {
    const Msg& request = requests[n];
    const Msg want = conformance::respond(Msg::parse(lines[n]));  // the request as the testee reads it
    std::string why;
    if (!child.read_line(line)) {
      why = "no response (the testee's output ended)";
    } else {
      Msg got;
      try {
        got = Msg::parse(line);
        why = difference(want, got);
      } catch (const Msg::parse_error&) {
        why = "response is not JSON: " + shorten(line, 200);
      }
    }
    if (why.empty()) {
      ++passed;
    } else if (failures.size() < show) {
      failures.push_back("  case " + dump(request.value("id", Msg())) + ": " + why +
                         "\n    request: " + shorten(dump(request)) + "\n");
    } else {
      failures.emplace_back();
    }
  }
  std::size_t surplus = 0;  // lines beyond the last request's answer are failures too
  while (child.read_line(line)) ++surplus;
  writer.join();
  const int status = child.wait();
  out += fmt::format("conformance: {}: {} passed, {} failed\n", o.testee, passed, requests.size() - passed + surplus);
  for (const std::string& f : failures) out += f;
  if (surplus != 0) out += fmt::format("conformance: {} lines beyond the last answer\n", surplus);
  if (status != 0) out += fmt::format("conformance: the testee exited with status {}\n", status);
  if (passed != requests.size()) out += fmt::format("conformance: rerun with --seed {}\n", seed);
  return passed == requests.size() && surplus == 0 && status == 0 ? exit_ok : exit_rejected;
}

std::vector<Command> add_conformance_command(CLI::App& app) {
  auto o = std::make_shared<ConformanceOptions>();
  const ConformanceCommands cmds = add_conformance_commands(app, *o);
  return {{cmds.runner, [o](std::string& out) { return run_conformance(*o, out); }},
          {cmds.testee, [o](std::string& out) { return run_conformance_testee(*o, out); }}};
}

}  // namespace kvkey_tool
