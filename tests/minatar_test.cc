// The C++ MinAtar games against the `minatar` package in the venv: fed the same random
// draws (recorded from the package by tools/minatar_trace.py), both must reach the same
// state, reward and terminal on every one of 10,000 random steps per game; and a random
// policy's returns from each must agree within their standard errors. Skipped with the
// reason where the venv is absent (CI makes it).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "envs/minatar.h"
#include "tests/skip.h"
#include "tests/status_testing.h"

using namespace stampede::envs;

namespace {

const char* EnvName(const std::string& game) {
  if (game == "breakout") return "MinAtar-Breakout";
  if (game == "asterix") return "MinAtar-Asterix";
  if (game == "freeway") return "MinAtar-Freeway";
  if (game == "seaquest") return "MinAtar-Seaquest";
  return "MinAtar-SpaceInvaders";
}

// Serves recorded draws in order; a draw of the wrong kind or range is a divergence.
class ScriptedDraws : public MinAtarDraws {
 public:
  std::deque<std::string> pending;
  double Rand() override {
    const std::string d = Next();
    if (d.rfind("f:", 0) != 0) throw std::runtime_error("C++ drew rand(), the package drew " + d);
    return std::strtod(d.c_str() + 2, nullptr);
  }
  int64_t RandInt(int64_t lo, int64_t hi) override {
    const std::string d = Next();
    long long a = 0, b = 0, v = 0;
    if (std::sscanf(d.c_str(), "i:%lld:%lld:%lld", &a, &b, &v) != 3 || a != lo || b != hi) {
      throw std::runtime_error("C++ drew randint(" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "), the package drew " + d);
    }
    return v;
  }

 private:
  std::string Next() {
    if (pending.empty()) throw std::runtime_error("C++ drew more than the package");
    std::string d = pending.front();
    pending.pop_front();
    return d;
  }
};

std::string Python() { return PythonVenvPath("") + "/bin/python"; }

std::string Run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  INFO(command);
  REQUIRE(pclose(p) == 0);
  return out;
}

// The package's bit-packed [C, 10, 10] state as 0/1 bytes.
std::vector<uint8_t> Unpack(const std::string& hex, size_t n) {
  std::vector<uint8_t> bits(n);
  for (size_t i = 0; i < n; ++i) {
    const int nibble = std::stoi(hex.substr(i / 4, 1), nullptr, 16);
    bits[i] = uint8_t((nibble >> (3 - i % 4)) & 1);
  }
  return bits;
}

std::string Where(const MinAtarGame& g, int step) {
  return std::string(g.name()) + " step " + std::to_string(step);
}

}  // namespace

TEST_CASE("minatar: every game matches the package transition by transition", "[envs][minatar]") {
  stampede::testing::RequirePythonVenv();
  const std::string game = GENERATE(as<std::string>{}, "breakout", "asterix", "freeway", "seaquest",
                                    "space_invaders");
  constexpr int kSteps = 10000;
  const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                           "/stampede_minatar_" + game + "_" + std::to_string(getpid()) + ".txt";
  Run(Python() + " " STAMPEDE_SOURCE_DIR "/tools/minatar_trace.py trace " + game + " " +
      std::to_string(kSteps) + " 7 " + path);
  std::ifstream in(path);
  REQUIRE(in);
  EnvOptions options;
  options.kwargs["minimal_action_set"] = "0";  // the trace's actions are the package's 0..5
  MinAtarEnv env(EnvName(game), game, options);
  ScriptedDraws draws;
  env.UseDraws(&draws);
  const size_t n = size_t(env.spec().obs_size());
  std::vector<std::byte> obs(n);
  std::string header, line, state;
  std::getline(in, header);
  int steps = 0, episodes = 0, rewards = 0;
  while (std::getline(in, line)) {
    REQUIRE(std::getline(in, state));
    std::istringstream ls(line);
    std::string kind, token;
    ls >> kind;
    int action = -1, terminal = 0;
    double reward = 0;
    if (kind == "A") ls >> action >> reward >> terminal;
    while (ls >> token) draws.pending.push_back(token);
    StepResult r;
    try {
      if (kind == "R") {
        env.Reset(uint64_t(episodes), obs);
        ++episodes;
      } else {
        r = env.Step(action, obs);
        ++steps;
      }
    } catch (const std::exception& e) {
      FAIL(Where(env.game(), steps) << ": " << e.what());
    }
    INFO(Where(env.game(), steps) << (kind == "R" ? " (reset)" : ""));
    REQUIRE(draws.pending.empty());
    if (kind == "A") {
      if (r.reward != float(reward) || int(r.terminated) != terminal) {
        FAIL("reward " << r.reward << " terminal " << r.terminated << ", the package: " << reward << " "
                       << terminal);
      }
      rewards += reward != 0;
    }
    const std::vector<uint8_t> want = Unpack(state, n);
    size_t i = 0;
    while (i < n && uint8_t(obs[i] != std::byte{0}) == want[i]) ++i;
    INFO("first difference: channel " << i / 100 << " row " << i % 100 / 10 << " column " << i % 10);
    REQUIRE(i == n);
  }
  std::remove(path.c_str());
  REQUIRE(steps == kSteps);
  // The trace exercised the game: several episodes (Freeway's last 2500 steps) and rewards.
  CHECK(episodes >= (game == "freeway" ? 4 : 10));
  UNSCOPED_INFO(game << ": " << episodes << " episodes, " << rewards << " rewarded steps");
  CHECK(rewards >= 5);
}

TEST_CASE("minatar: random-policy returns match the package within their standard errors",
          "[envs][minatar]") {
  stampede::testing::RequirePythonVenv();
  const std::string game = GENERATE(as<std::string>{}, "breakout", "asterix", "freeway", "seaquest",
                                    "space_invaders");
  const int episodes = game == "freeway" ? 30 : 300;
  std::vector<double> theirs;
  std::istringstream out(Run(Python() + " " STAMPEDE_SOURCE_DIR "/tools/minatar_trace.py returns " + game +
                             " " + std::to_string(episodes) + " 11"));
  for (double x; out >> x;) theirs.push_back(x);
  REQUIRE(int(theirs.size()) == episodes);
  std::string error;
  auto env = ::stampede::testing::ValueOr(MakeEnv(EnvName(game), EnvOptions{}), &error);
  REQUIRE(env);
  std::vector<std::byte> obs(size_t(env->spec().obs_bytes()));
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> action(0, env->spec().num_actions - 1);
  std::vector<double> ours;
  for (int e = 0; e < episodes; ++e) {
    env->Reset(uint64_t(1000 + e), obs);
    double total = 0;
    for (bool done = false; !done;) {
      const StepResult r = env->Step(action(rng), obs);
      total += r.reward;
      done = r.terminated || r.truncated;
    }
    ours.push_back(total);
  }
  auto mean_se = [](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= double(v.size());
    for (double x : v) s += (x - m) * (x - m);
    return std::pair{m, std::sqrt(s / double(v.size() - 1) / double(v.size()))};
  };
  const auto [m1, se1] = mean_se(theirs);
  const auto [m2, se2] = mean_se(ours);
  INFO(game << ": package " << m1 << " +- " << se1 << ", C++ " << m2 << " +- " << se2);
  // Three standard errors of the difference: a false alarm about once in 370 runs per
  // game at a fixed seed it never changes; a rule off by one usually moves the mean far more.
  REQUIRE(std::abs(m1 - m2) <= 3 * std::sqrt(se1 * se1 + se2 * se2) + 1e-9);
}

TEST_CASE("minatar: kwargs choose the action set, sticky actions and ramping", "[envs][minatar]") {
  std::string error;
  for (const char* name : {"MinAtar-Breakout", "MinAtar-Asterix", "MinAtar-Freeway", "MinAtar-Seaquest",
                           "MinAtar-SpaceInvaders"}) {
    auto env = ::stampede::testing::ValueOr(MakeEnv(name, EnvOptions{}), &error);
    INFO(name << ": " << error);
    REQUIRE(env);
    CHECK(env->spec().obs_dtype == DType::kUint8);
    CHECK(env->spec().obs_shape[1] == 10);
    EnvOptions all;
    all.kwargs["minimal_action_set"] = "0";
    auto full = ::stampede::testing::ValueOr(MakeEnv(name, all), &error);
    REQUIRE(full);
    CHECK(full->spec().num_actions == 6);
  }
  // The package's minimal action sets: 3, 5, 3, 6 and 4 actions.
  CHECK(::stampede::testing::ValueOr(MakeEnv("MinAtar-Breakout", {}), &error)->spec().num_actions == 3);
  CHECK(::stampede::testing::ValueOr(MakeEnv("MinAtar-Asterix", {}), &error)->spec().num_actions == 5);
  CHECK(::stampede::testing::ValueOr(MakeEnv("MinAtar-Freeway", {}), &error)->spec().num_actions == 3);
  CHECK(::stampede::testing::ValueOr(MakeEnv("MinAtar-Seaquest", {}), &error)->spec().num_actions == 6);
  CHECK(::stampede::testing::ValueOr(MakeEnv("MinAtar-SpaceInvaders", {}), &error)->spec().num_actions == 4);
  EnvOptions bad;
  bad.kwargs["sticky_action_prob"] = "1.5";
  CHECK(!::stampede::testing::ValueOr(MakeEnv("MinAtar-Breakout", bad), &error));
  CHECK(error.find("sticky_action_prob") != std::string::npos);
  EnvOptions typo;
  typo.kwargs["ramping"] = "0";
  CHECK(!::stampede::testing::ValueOr(MakeEnv("MinAtar-Asterix", typo), &error));
  CHECK(error.find("ramping") != std::string::npos);
}

TEST_CASE("minatar: Breakout's first steps by hand", "[envs][minatar]") {
  // Ball starts at (x 0, y 3) moving down-right (direction 2) when randint(2) draws 0.
  struct Zero : MinAtarDraws {
    double Rand() override { return 0.99; }  // never sticky
    int64_t RandInt(int64_t lo, int64_t) override { return lo; }
  } draws;
  EnvOptions options;
  options.kwargs["minimal_action_set"] = "0";
  MinAtarEnv env("MinAtar-Breakout", "breakout", options);
  env.UseDraws(&draws);
  std::vector<std::byte> obs(size_t(env.spec().obs_bytes()));
  env.Reset(0, obs);
  auto at = [&](int c, int y, int x) { return obs[size_t(c * 100 + y * 10 + x)] != std::byte{0}; };
  CHECK(at(1, 3, 0));       // ball
  CHECK(at(0, 9, 4));       // paddle
  CHECK(at(3, 1, 0));       // bricks on rows 1-3
  CHECK(!at(3, 4, 0));
  env.Step(kRight, obs);    // paddle to 5, ball to (1, 4), trail at (0, 3)
  CHECK(at(0, 9, 5));
  CHECK(at(1, 4, 1));
  CHECK(at(2, 3, 0));
  // Four steps later the ball is at (5, 8), right above the paddle; the next step would
  // take it to (6, 9): the paddle under the ball sends it back up, to (6, 8).
  for (int i = 0; i < 4; ++i) env.Step(kNoop, obs);
  CHECK(at(1, 8, 5));
  const StepResult r = env.Step(kNoop, obs);  // bounces off the paddle under it
  CHECK(!r.terminated);
  CHECK(at(1, 8, 6));
}
