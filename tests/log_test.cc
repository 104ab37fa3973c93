// The logger's one line format, its level threshold, and that each line is whole.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"

using namespace stampede;

namespace {
// Runs `body` with stderr sent to a file; returns what was written.
template <class Body>
std::string CaptureStderr(Body body) {
  const std::string path = (std::filesystem::temp_directory_path() / "stampede_log_test.txt").string();
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  body();
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("log: level letter, local time to the millisecond, role, message, one trailing newline", "[log]") {
  // 2026-12-06 12:34:56.789 local time.
  std::tm t{};
  t.tm_year = 126;
  t.tm_mon = 11;
  t.tm_mday = 6;
  t.tm_hour = 12;
  t.tm_min = 34;
  t.tm_sec = 56;
  t.tm_isdst = -1;
  const double when = double(std::mktime(&t)) + 0.789;
  CHECK(base::FormatLogLine(base::LogLevel::kWarning, "learner 0", "queue full\n", when) ==
        "W 12:34:56.789 learner 0] queue full");
  CHECK(base::FormatLogLine(base::LogLevel::kInfo, "ps 1", "a\nb", when) == "I 12:34:56.789 ps 1] a\nb");
  CHECK(base::FormatLogLine(base::LogLevel::kError, "stampede", "x", when).rfind("E 12:34:56.789 stampede] x", 0) == 0);
  CHECK(base::FormatLogLine(base::LogLevel::kDebug, "actor 3", "", when) == "D 12:34:56.789 actor 3] ");
}

TEST_CASE("log: lines below the threshold are dropped, and each line is written whole from many threads", "[log]") {
  base::SetLogRole("actor 7");
  base::SetLogLevel(base::LogLevel::kWarning);
  const std::string quiet = CaptureStderr([] {
    base::LogInfo("not shown %d\n", 1);
    base::LogDebug("not shown either");
    base::LogWarning("shown %s", "once");
  });
  CHECK(quiet.find("not shown") == std::string::npos);
  CHECK(quiet.find("actor 7] shown once\n") != std::string::npos);
  CHECK(quiet.rfind("W ", 0) == 0);

  base::SetLogLevel(base::LogLevel::kInfo);
  const std::string many = CaptureStderr([] {
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([k] {
        for (int i = 0; i < 200; ++i) base::LogInfo("thread %d line %d %s", k, i, std::string(300, 'x').c_str());
      });
    }
    for (auto& th : threads) th.join();
  });
  std::istringstream lines(many);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    INFO(line.substr(0, 80));
    REQUIRE(line.rfind("I ", 0) == 0);
    REQUIRE(line.find("actor 7] thread ") != std::string::npos);
    REQUIRE(line.substr(line.size() - 300) == std::string(300, 'x'));
  }
  CHECK(count == 800);
  base::SetLogRole("stampede");
}
