// A fresh directory under the system temp dir for one test, removed with
// everything in it.
#ifndef KVKEY_TESTS_TEMP_DIR_HPP
#define KVKEY_TESTS_TEMP_DIR_HPP

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kvkey_test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kvkey-test") {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvkey_test

#endif  // KVKEY_TESTS_TEMP_DIR_HPP
