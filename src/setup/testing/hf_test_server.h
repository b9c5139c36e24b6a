// For setup's unit tests: runs tools/hfserver/hfserver.py on 127.0.0.1 in a scratch folder, with
// fault rules and the request log at hand. Header-only so it stays out of the library.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace deltafin::setup::testing {

// A scratch folder removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "deltafin-setup-unit.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class HfTestServer {
 public:
  // repos: "owner/name=DIR" entries; extra: more server arguments (e.g. "--token", "x").
  explicit HfTestServer(const std::vector<std::string>& repos,
                        std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "python3",       std::string(DELTAFIN_SOURCE_DIR) + "/tools/hfserver/hfserver.py",
        "--port-file",   dir_ / "port",
        "--control",     dir_ / "faults.json",
        "--log",         dir_ / "requests.jsonl",
        "--max-seconds", "120",
        "--commit",      kCommit};
    for (const std::string& r : repos) {
      args.push_back("--repo");
      args.push_back(r);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "python3", nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
    for (int i = 0; i < 400 && pid_ > 0; ++i) {
      std::ifstream f(dir_ / "port");
      int port = 0;
      if (f >> port && port > 0) {
        url_ = "http://127.0.0.1:" + std::to_string(port);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~HfTestServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool ok() const { return !url_.empty(); }
  const std::string& url() const { return url_; }

  // Replaces the fault rules (a JSON array as text).
  void faults(const std::string& rules_json) {
    const std::string tmp = dir_ / "faults.json.tmp";
    std::ofstream(tmp) << "{\"rules\": " << rules_json << "}";
    std::filesystem::rename(tmp, dir_ / "faults.json");
  }
  void clear_log() { std::ofstream(dir_ / "requests.jsonl", std::ios::trunc); }
  std::vector<nlohmann::json> log() const {
    std::vector<nlohmann::json> out;
    std::ifstream f(dir_ / "requests.jsonl");
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  std::string url_;
};

inline std::string read_bytes(const std::string& path, uint64_t offset, uint64_t n) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::string out(n, '\0');
  f.read(out.data(), static_cast<std::streamsize>(n));
  out.resize(static_cast<size_t>(f.gcount()));
  return out;
}

}  // namespace deltafin::setup::testing
