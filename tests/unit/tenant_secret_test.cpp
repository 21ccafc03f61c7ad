// TenantSecret::from_file and TenantSecret::from_env.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fifo.hpp"
#include "support/fixtures.hpp"

namespace {

using kvkey::Digest;
using kvkey::HmacSha256;
using kvkey::TenantSecret;

// A fresh directory under the system temp directory, removed with its files.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/kvkey-secret-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    for (const auto& f : files_) std::remove(f.c_str());
    ::rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    const std::string p = path_ + "/" + name;
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
    }
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    files_.push_back(p);
    return p;
  }
  std::string link(const std::string& name, const std::string& target) {
    const std::string p = path_ + "/" + name;
    REQUIRE(::symlink(target.c_str(), p.c_str()) == 0);
    files_.push_back(p);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

// Sets an environment variable for the scope of one test.
class EnvVar {
 public:
  EnvVar(std::string name, const std::string& value) : name_(std::move(name)) {
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~EnvVar() { ::unsetenv(name_.c_str()); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  std::string name_;
};

// The secret's identity, observed the only way the API allows: what it keys.
Digest tag(const TenantSecret& s) { return HmacSha256::mac(s, "probe", 5); }

// 32 bytes 0x00, 0x01, ... 0x1f: hex, base64 and raw forms of one secret.
const std::string raw32 = [] {
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(static_cast<char>(i));
  return s;
}();
const std::string hex32 = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
// base64 of raw32 (RFC 4648 alphabet; `printf ... | base64` gives the same).
const std::string b64_32 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kvkey::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("from_file reads hex text and raw bytes", "[security][secret]") {
  TempDir dir;
  const Digest expected = tag(TenantSecret(raw32));
  CHECK(tag(TenantSecret::from_file(dir.write("hex", hex32 + "\n"))) == expected);
  CHECK(tag(TenantSecret::from_file(dir.write("hex_crlf", hex32 + "\r\n"))) == expected);
  CHECK(tag(TenantSecret::from_file(dir.write("hex_bare", hex32))) == expected);
  std::string upper = hex32;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(tag(TenantSecret::from_file(dir.write("hex_upper", upper + "\n"))) == expected);
  CHECK(tag(TenantSecret::from_file(dir.write("raw", raw32))) == expected);
  CHECK(TenantSecret::from_file(dir.write("hex_size", hex32 + "\n")).size() == 32);

  // Anything that is not pure hex is taken byte for byte, newline included.
  const std::string phrase = "correct horse battery staple, forty bytes";
  const auto raw_phrase = TenantSecret::from_file(dir.write("phrase", phrase + "\n"));
  CHECK(raw_phrase.size() == phrase.size() + 1);
  CHECK(tag(raw_phrase) == tag(TenantSecret(phrase + "\n")));
  // Group-readable (0640) and owner-only read (0400) files are fine; symlinks
  // are followed (Kubernetes mounts secrets through them).
  CHECK(tag(TenantSecret::from_file(dir.write("group_read", hex32, 0640))) == expected);
  CHECK(tag(TenantSecret::from_file(dir.write("read_only", hex32, 0400))) == expected);
  CHECK(tag(TenantSecret::from_file(dir.link("via_link", dir.path() + "/hex"))) == expected);
}

TEST_CASE("from_file refuses unsafe or invalid files without quoting them", "[security][secret]") {
  TempDir dir;
  const std::string secret_text = "this-secret-must-never-be-printed";  // 33 bytes
  for (const mode_t mode : {mode_t{0644}, mode_t{0604}, mode_t{0602}, mode_t{0620}, mode_t{0666}}) {
    const std::string p = dir.write("mode" + std::to_string(mode), secret_text, mode);
    const std::string what = error_of([&] { (void)TenantSecret::from_file(p); });
    CHECK(what.rfind("[kvkey.io_error] ", 0) == 0);
    CHECK(what.find(p) != std::string::npos);
    CHECK(what.find("chmod 600") != std::string::npos);
    CHECK(what.find(secret_text) == std::string::npos);
  }
  CHECK_THROWS_AS(TenantSecret::from_file(dir.path() + "/missing"), kvkey::io_error);
  CHECK(error_of([&] { (void)TenantSecret::from_file(dir.path() + "/missing"); }).find("/missing") !=
        std::string::npos);
  CHECK_THROWS_AS(TenantSecret::from_file(dir.path()), kvkey::io_error);  // a directory

  // Content errors are identity_errors on "tenant_secret".
  const auto content_error = [&](const std::string& name, const std::string& content) {
    const std::string p = dir.write(name, content);
    try {
      (void)TenantSecret::from_file(p);
    } catch (const kvkey::identity_error& e) {
      CHECK(e.field() == "tenant_secret");
      CHECK(std::string(e.what()).find(p) != std::string::npos);
      if (!content.empty()) CHECK(std::string(e.what()).find(content.substr(0, 16)) == std::string::npos);
      return true;
    }
    return false;
  };
  CHECK(content_error("short_raw", "0123456789-too-short-secret"));
  CHECK(content_error("short_hex", hex32.substr(0, 62) + "\n"));  // 31 bytes
  CHECK(content_error("odd_hex", hex32 + "a\n"));
  CHECK(content_error("empty", ""));
  CHECK(content_error("too_long", std::string(600, 'q')));
  CHECK(content_error("hex_too_long", std::string(2 * 257, 'a')));
}

TEST_CASE("from_env reads hex or base64: and agrees with from_file", "[security][secret]") {
  const Digest expected = tag(TenantSecret(raw32));
  {
    const EnvVar v("KVKEY_TEST_SECRET", hex32);
    CHECK(tag(TenantSecret::from_env("KVKEY_TEST_SECRET")) == expected);
  }
  {
    const EnvVar v("KVKEY_TEST_SECRET", "base64:" + b64_32);
    CHECK(tag(TenantSecret::from_env("KVKEY_TEST_SECRET")) == expected);
  }
  // Padding variants: 33 bytes (no '='), 34 bytes ("=").
  {
    const EnvVar v("KVKEY_TEST_SECRET", "base64:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g");
    CHECK(tag(TenantSecret::from_env("KVKEY_TEST_SECRET")) == tag(TenantSecret(raw32 + " ")));
  }
  {
    const EnvVar v("KVKEY_TEST_SECRET", "base64:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gIQ==");
    CHECK(tag(TenantSecret::from_env("KVKEY_TEST_SECRET")) == tag(TenantSecret(raw32 + " !")));
  }
}

TEST_CASE("from_env refuses unset, empty and malformed values without quoting them", "[security][secret]") {
  const auto refused = [](const std::string& value) {
    const EnvVar v("KVKEY_TEST_SECRET", value);
    try {
      (void)TenantSecret::from_env("KVKEY_TEST_SECRET");
    } catch (const kvkey::identity_error& e) {
      CHECK(e.field() == "tenant_secret");
      CHECK(std::string(e.what()).find("KVKEY_TEST_SECRET") != std::string::npos);
      if (value.size() >= 12) CHECK(std::string(e.what()).find(value.substr(value.size() - 12)) == std::string::npos);
      return true;
    }
    return false;
  };
  ::unsetenv("KVKEY_TEST_SECRET");
  CHECK_THROWS_AS(TenantSecret::from_env("KVKEY_TEST_SECRET"), kvkey::identity_error);
  CHECK(error_of([] { (void)TenantSecret::from_env("KVKEY_TEST_SECRET"); }).find("is not set") != std::string::npos);
  CHECK_THROWS_AS(TenantSecret::from_env(""), kvkey::identity_error);
  CHECK(refused(""));
  CHECK(refused(hex32 + "0"));                                            // odd number of hex digits
  CHECK(refused(hex32.substr(0, 62)));                                    // 31 bytes
  CHECK(refused("zz" + hex32));                                           // not hex, no prefix
  CHECK(refused(b64_32));                                                 // base64 without the prefix
  CHECK(refused("base64:" + b64_32.substr(1)));                           // length not a multiple of 4
  CHECK(refused("base64:" + b64_32.substr(0, 40) + "=AAA"));              // '=' inside
  CHECK(refused("base64:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9="));  // non-zero unused bits
  CHECK(refused("base64:AAECAwQFBgcICQoLDA0O xAREhMUFRYXGBkaGxwdHh8="));  // whitespace
  CHECK(refused("base64:"));
  CHECK(refused(std::string(2 * 257, 'a')));  // 257 bytes of hex
}

TEST_CASE("from_file refuses a FIFO at once: the regular-file check comes before any blocking open or read",
          "[security][secret]") {
  TempDir dir;
  const std::string fifo = dir.path() + "/secret.fifo";
  REQUIRE(kvkey_test::make_fifo(fifo));
  REQUIRE(::chmod(fifo.c_str(), 0600) == 0);
  const std::string what = kvkey_test::refusal_of_fifo(fifo, [&] { (void)TenantSecret::from_file(fifo); });
  ::unlink(fifo.c_str());
  CHECK(what.rfind("[kvkey.io_error] ", 0) == 0);
  CHECK(what.find("tenant secret file '" + fifo + "'") != std::string::npos);
  CHECK(what.find("not a regular file (a FIFO)") != std::string::npos);
  // A character device is refused the same way, before its endless content is read.
  CHECK(error_of([] { (void)TenantSecret::from_file("/dev/zero"); }).find("(a character device)") != std::string::npos);
}
