// kvkey::fingerprint / fingerprint_file: plain SHA-256 of bytes and of files,
// streamed, with errors that name the path.
#include <kvkey/fingerprint.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fifo.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using kvkey_test::TempDir;

std::string write_file(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  REQUIRE(out.good());
  return p.string();
}

// Bytes that differ from chunk to chunk, so a dropped or repeated chunk shows.
std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  std::uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

}  // namespace

TEST_CASE("fingerprint is plain SHA-256 of the bytes", "[fingerprint]") {
  CHECK(kvkey::fingerprint("").hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(kvkey::fingerprint("abc").hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string bytes = pattern(100000);
  CHECK(kvkey::fingerprint(bytes) == kvkey::Sha256::hash(bytes.data(), bytes.size()));
  CHECK(kvkey::fingerprint(std::string("a\0b", 3)) != kvkey::fingerprint("a"));  // embedded NUL counts
}

TEST_CASE("fingerprint_file equals the fingerprint of the file's content", "[fingerprint]") {
  TempDir dir;
  constexpr std::size_t chunk = std::size_t{1} << 20;  // fingerprint_file's read size
  SECTION("empty file") {
    const auto p = write_file(dir.path() / "empty", "");
    CHECK(kvkey::fingerprint_file(p) == kvkey::fingerprint(""));
  }
  SECTION("small file") {
    const auto p = write_file(dir.path() / "abc", "abc");
    CHECK(kvkey::fingerprint_file(p).hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  SECTION("sizes around and above the 1 MiB chunk") {
    for (std::size_t size : {chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 12345}) {
      CAPTURE(size);
      const std::string content = pattern(size);
      const auto p = write_file(dir.path() / ("f" + std::to_string(size)), content);
      CHECK(kvkey::fingerprint_file(p) == kvkey::fingerprint(content));
    }
  }
}

TEST_CASE("fingerprint_file errors name the path", "[fingerprint]") {
  TempDir dir;
  SECTION("missing file") {
    const std::string p = (dir.path() / "no-such-file.safetensors").string();
    CHECK_THROWS_MATCHES(kvkey::fingerprint_file(p), kvkey::io_error,
                         Catch::Matchers::Predicate<kvkey::io_error>(
                             [&](const kvkey::io_error& e) {
                               const std::string m = e.what();
                               return m.rfind("[kvkey.io_error] ", 0) == 0 &&
                                      m.find("'" + p + "'") != std::string::npos;
                             },
                             "message starts with [kvkey.io_error] and names the path"));
  }
  SECTION("a directory") {
    const std::string p = dir.path().string();
    CHECK_THROWS_MATCHES(
        kvkey::fingerprint_file(p), kvkey::io_error,
        Catch::Matchers::Predicate<kvkey::io_error>(
            [&](const kvkey::io_error& e) { return std::string(e.what()).find("'" + p + "'") != std::string::npos; },
            "message names the path"));
  }
  SECTION("io_error is a kvkey::error and a std::exception") {
    const std::string p = (dir.path() / "missing").string();
    CHECK_THROWS_AS(kvkey::fingerprint_file(p), kvkey::error);
    CHECK_THROWS_AS(kvkey::fingerprint_file(p), std::exception);
  }
}

TEST_CASE("fingerprint_file refuses a FIFO or a device at once, before reading", "[fingerprint]") {
  TempDir dir;
  SECTION("a FIFO with no writer: the open does not wait for one") {
    const std::string fifo = (dir.path() / "weights.fifo").string();
    REQUIRE(kvkey_test::make_fifo(fifo));
    const std::string what = kvkey_test::refusal_of_fifo(fifo, [&] { (void)kvkey::fingerprint_file(fifo); });
    CHECK_THAT(what, Catch::StartsWith("[kvkey.io_error] ") && Catch::Contains("'" + fifo + "'") &&
                         Catch::Contains("not a regular file (a FIFO)"));
  }
  SECTION("a symlink to a character device") {
    const fs::path link = dir.path() / "null.safetensors";
    fs::create_symlink("/dev/null", link);
    CHECK_THROWS_WITH(kvkey::fingerprint_file(link.string()),
                      Catch::Contains("not a regular file (a character device)"));
  }
  SECTION("an open InputFile is hashed from where it stands") {
    const std::string p = write_file(dir.path() / "f", "abcdef");
    kvkey::InputFile f(p);
    char first[2];
    REQUIRE(f.read(first, 2) == 2);
    CHECK(kvkey::fingerprint_file(f) == kvkey::fingerprint("cdef"));
  }
}
