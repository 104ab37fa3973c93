// Multi-task runs: task assignment and joint specs, observation padding/resizing, action
// masks, PopArt, reports, TensorBoard files, evaluation and export.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "actors/actor.h"
#include "actors/env_source.h"
#include "envs/python_env.h"
#include "learner/checkpoint.h"
#include "learner/loss.h"
#include "learner/popart.h"
#include "net/from_config.h"
#include "net/model.h"
#include "tests/skip.h"
#include "tools/eval.h"
#include "tools/report.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "config/tasks.h"
#include "coordinator/tensorboard.h"

using namespace stampede;
namespace fs = std::filesystem;

namespace {
config::Config Parse(const std::string& text) {
  config::Config cfg;
  std::string error;
  INFO(error);
  REQUIRE_OK(ParseConfigText(text, "test", &cfg));
  return cfg;
}

// Fills every task's resolved spec and the joint one, as `stampede run` does.
void ResolveTasks(config::Config* cfg) {
  for (int t = 0; t < cfg->tasks_size(); ++t) {
    envs::EnvSpec spec;
    std::string error;
    REQUIRE(::stampede::testing::Assign(envs::ResolveSpec(actors::EnvSourceFromConfig(config::TaskEnvConfig(*cfg, t))), &spec, &error));
    *cfg->mutable_tasks(t)->mutable_env()->mutable_resolved_spec() = actors::SpecToProto(spec);
  }
  config::EnvSpec joint;
  std::string error;
  INFO(error);
  REQUIRE_OK(config::JoinTaskSpecs(*cfg, &joint));
  *cfg->mutable_env()->mutable_resolved_spec() = joint;
}

std::string TempDir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("stampede_suite_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Runs the venv's Python on `script`; returns its exit code and output.
int RunPython(const std::string& script, std::string* output) {
  const std::string python = envs::PythonVenvPath("") + "/bin/python";
  const std::string path = fs::temp_directory_path() / ("stampede_suite_py_" + std::to_string(::getpid()) + ".py");
  std::ofstream(path) << script;
  const std::string cmd = python + " " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void RequireVenvWith(const std::string& modules) {
  testing::RequirePythonVenv();
  std::string out;
  if (RunPython("import " + modules + "\n", &out) != 0) testing::Skip("needs " + modules + " in the venv: " + out);
}

const char* kCatchCartPole = R"(
tasks { name: "catch" env { name: "Catch" } actors: 1 random_score: -0.6 reference_score: 1 }
tasks { name: "cartpole" env { name: "CartPole-v1" } weight: 1 random_score: 22 reference_score: 500 }
actors { num_actors: 3 envs_per_actor: 4 unroll_length: 5 }
)";
}  // namespace

TEST_CASE("tasks: actors are assigned by count, then by weight with the largest remainder", "[suite]") {
  auto cfg = Parse(R"(
tasks { name: "a" env { name: "Catch" } actors: 2 }
tasks { name: "b" env { name: "Catch" } weight: 3 }
tasks { name: "c" env { name: "Catch" } weight: 1 }
actors { num_actors: 8 })");
  // 2 for a; 6 left for b and c: one each, then 4 by weight 3:1 -> 3 and 1.
  CHECK(config::AssignActors(cfg) == std::vector<int>{0, 0, 1, 1, 1, 1, 2, 2});
  CHECK(config::TaskOfActor(cfg, 5) == 1);
  CHECK(config::NumTasks(cfg) == 3);
}

TEST_CASE("tasks: config errors name the task and the field", "[suite][config]") {
  auto load = [](const std::string& text) {
    const std::string path = fs::temp_directory_path() / ("stampede_suite_cfg_" + std::to_string(::getpid()) + ".textproto");
    std::ofstream(path) << text;
    LoadedConfig loaded;
    const base::Status st = LoadConfig(path, {}, &loaded);
    CHECK_FALSE(st.ok());
    return st.message();
  };
  CHECK_THAT(load("env { name: \"Catch\" }\ntasks { name: \"a\" env { name: \"Catch\" } }"),
             Catch::Contains("env and tasks are both set"));
  CHECK_THAT(load("tasks { name: \"a\" env { name: \"Catch\" } }\ntasks { name: \"a\" env { name: \"Catch\" } }"),
             Catch::Contains(":2:") && Catch::Contains("tasks[1].name (task \"a\"): another task has this name"));
  CHECK_THAT(load("tasks { name: \"a\" env { name: \"Catch\" } random_score: 1 reference_score: 1 }"),
             Catch::Contains("cannot be normalised"));
  CHECK_THAT(load("actors { num_actors: 1 }\ntasks { name: \"a\" env { name: \"Catch\" } }\ntasks { name: \"b\" env { name: \"Catch\" } }"),
             Catch::Contains("actors.num_actors: 1 actors cannot run the 2 tasks"));
  CHECK_THAT(load("tasks { name: \"a\" env { name: \"Catch\" } }\nsuite { obs_rule: \"crop\" }"),
             Catch::Contains("suite.obs_rule: \"crop\" is not known"));
}

TEST_CASE("tasks: a spec that cannot join the suite is an error naming the task", "[suite]") {
  auto cfg = Parse(R"(
tasks { name: "pixels" env { name: "CatchPixels" } }
tasks { name: "vector" env { name: "Catch" } })");
  for (int t = 0; t < 2; ++t) {
    envs::EnvSpec spec;
    std::string error;
    REQUIRE(::stampede::testing::Assign(envs::ResolveSpec(actors::EnvSourceFromConfig(config::TaskEnvConfig(cfg, t))), &spec, &error));
    *cfg.mutable_tasks(t)->mutable_env()->mutable_resolved_spec() = actors::SpecToProto(spec);
  }
  config::EnvSpec joint;
  const base::Status mixed = config::JoinTaskSpecs(cfg, &joint);
  CHECK_FALSE(mixed.ok());
  CHECK_THAT(mixed.message(), Catch::Contains("task \"vector\" cannot join the suite: its observations are float32, task \"pixels\"'s are uint8"));
  auto box = Parse(R"(
tasks { name: "catch" env { name: "Catch" } }
tasks { name: "pendulum" env { name: "Pendulum-v1" } })");
  for (int t = 0; t < 2; ++t) {
    envs::EnvSpec spec;
    std::string error;
    REQUIRE(::stampede::testing::Assign(envs::ResolveSpec(actors::EnvSourceFromConfig(config::TaskEnvConfig(box, t))), &spec, &error));
    *box.mutable_tasks(t)->mutable_env()->mutable_resolved_spec() = actors::SpecToProto(spec);
  }
  const base::Status boxed = config::JoinTaskSpecs(box, &joint);
  CHECK_FALSE(boxed.ok());
  CHECK_THAT(boxed.message(), Catch::Contains("task \"pendulum\" cannot join the suite") && Catch::Contains("not discrete"));
}

TEST_CASE("tasks: observations are padded (across ranks: flattened) or resized by nearest neighbour", "[suite]") {
  // Pad [2, 3] into [3, 4]: zeros after each dimension's end.
  config::ObsAdapter pad({2, 3}, {3, 4}, false, "pad");
  const float in[6] = {1, 2, 3, 4, 5, 6};
  float out[12];
  pad.Apply(in, 1, out);
  const float want[12] = {1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0};
  for (int i = 0; i < 12; ++i) CHECK(out[i] == want[i]);
  // Across ranks: [2, 3] flattened into [8].
  config::ObsAdapter flat({2, 3}, {8}, false, "pad");
  float out8[8];
  flat.Apply(in, 1, out8);
  const float want8[8] = {1, 2, 3, 4, 5, 6, 0, 0};
  for (int i = 0; i < 8; ++i) CHECK(out8[i] == want8[i]);
  // Resize uint8 [1, 2, 2] to [2, 4, 4]: nearest neighbour in H and W, channel 1 zero.
  config::ObsAdapter resize({1, 2, 2}, {2, 4, 4}, true, "resize");
  const uint8_t img[4] = {10, 20, 30, 40};
  uint8_t big[32];
  resize.Apply(img, 1, big);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      CHECK(big[y * 4 + x] == img[(y / 2) * 2 + x / 2]);
      CHECK(big[16 + y * 4 + x] == 0);
    }
  }
}

TEST_CASE("tasks: a task's actor never samples an action it does not have", "[suite][actor]") {
  auto cfg = Parse(kCatchCartPole);
  ResolveTasks(&cfg);
  REQUIRE(cfg.env().resolved_spec().num_actions() == 3);
  REQUIRE(cfg.env().resolved_spec().obs_shape(0) == 50);
  std::string error;
  // Actor 1 runs cartpole (2 actions of the union's 3).
  REQUIRE(config::TaskOfActor(cfg, 1) == 1);
  auto core = ::stampede::testing::ValueOr(actors::ActorCore::Create(cfg, 1), &error);
  INFO(error);
  REQUIRE(core);
  std::vector<float> params(core->param_count());
  wire::StepShape shape;
  REQUIRE_OK(ResolvedStepShape(cfg, &shape));
  auto net = ::stampede::testing::ValueOr(net::MakeModelFromConfig(cfg, shape), &error);
  net::InitParams(net->spec(), 3, params);
  // A policy that prefers the missing action 2 strongly.
  const auto& b = net->layout().Find("policy/b");
  params[b.offset + 2] = 50.f;
  wire::TrajectoryBatch batch;
  int64_t seen = 0;
  for (int u = 0; u < 20; ++u) {
    core->CollectUnroll(params, 0, &batch);
    CHECK(batch.meta.task_id() == 1);
    for (int32_t a : batch.actions) {
      CHECK(a >= 0);
      CHECK(a < 2);
      ++seen;
    }
    for (size_t i = 0; i < batch.actions.size(); ++i) CHECK(batch.behaviour_logits[i * 3 + 2] == net::kMaskedLogit);
    // Padded observations: CartPole's 4 floats, then zeros.
    for (int r = 0; r <= batch.T() * batch.n(); ++r) {
      const float* o = reinterpret_cast<const float*>(batch.obs_row(size_t(r)));
      for (int k = 4; k < 50; ++k) REQUIRE(o[k] == 0.f);
    }
  }
  CHECK(seen == 20 * 5 * 4);
}

TEST_CASE("tasks: the masked loss gives masked actions no probability and no gradient", "[suite][loss]") {
  auto cfg = Parse(kCatchCartPole);
  ResolveTasks(&cfg);
  wire::StepShape shape;
  std::string error;
  REQUIRE_OK(ResolvedStepShape(cfg, &shape));
  auto net = net::MakeCpuModel<double>(net::ModelSpecFromConfig(cfg, shape));
  std::vector<double> params(net->layout().total_size());
  std::vector<float> init(params.size());
  net::InitParams(net->spec(), 5, init);
  std::copy(init.begin(), init.end(), params.begin());
  learner::Batch batch;
  const int T = 3, B = 2;
  batch.Resize(T, B, shape);
  std::mt19937 rng(1);
  for (auto& o : batch.observations) o = std::uniform_real_distribution<float>(-1, 1)(rng);
  batch.tasks = {0, 1};
  for (int t = 0; t < T; ++t) {
    batch.actions[t * B + 0] = 2;  // catch has 3
    batch.actions[t * B + 1] = 1;  // cartpole has 2
    batch.valid[t * B] = batch.valid[t * B + 1] = 1;
    for (int b = 0; b < B; ++b) {
      for (int a = 0; a < 3; ++a) batch.behaviour_logits[(t * B + b) * 3 + a] = (b == 1 && a == 2) ? net::kMaskedLogit : 0.f;
    }
  }
  learner::LossOptions lo;
  lo.action_limits = config::TaskActionLimits(cfg);
  std::vector<double> grad(params.size(), 0.0);
  const auto st = learner::ComputeLossAndGrad(*net, params.data(), batch, lo, grad.data());
  CHECK(std::isfinite(st.total));
  // The policy head's column for action 2 gets gradient only from catch's unroll: with
  // only cartpole in the batch it gets none.
  batch.tasks = {1, 1};
  for (int t = 0; t < T; ++t) batch.actions[t * B] = 0;
  std::fill(grad.begin(), grad.end(), 0.0);
  learner::ComputeLossAndGrad(*net, params.data(), batch, lo, grad.data());
  const auto& w = net->layout().Find("policy/w");
  const auto& b = net->layout().Find("policy/b");
  CHECK(grad[b.offset + 2] == 0.0);
  for (int f = 0; f < w.shape[0]; ++f) CHECK(grad[w.offset + f * 3 + 2] == 0.0);
  CHECK(grad[b.offset + 0] != 0.0);
}

TEST_CASE("popart: statistics follow the target stream and the head keeps its outputs", "[suite][popart]") {
  net::ModelSpec spec;
  spec.obs_shape = {5};
  spec.hidden_sizes = {8};
  spec.policy = net::CategoricalPolicy(3);
  spec.popart = true;
  spec.num_values = 2;
  auto net = net::MakeCpuModel<float>(spec);
  std::vector<float> params(net->layout().total_size());
  net::InitParams(spec, 7, params);
  const auto slots = learner::PopArtSlotsOf(net->layout());
  CHECK(params[slots.stats + 0] == 0.f);
  CHECK(params[slots.stats + 2] == 1.f);  // scale of task 0
  std::mt19937 rng(3);
  std::vector<float> obs(4 * 5);
  for (auto& o : obs) o = std::uniform_real_distribution<float>(-2, 2)(rng);
  auto unnormalised = [&](std::vector<double>* out) {
    std::vector<float> values(4 * 2);
    net->Step(params.data(), obs.data(), 4, nullptr, nullptr, nullptr, nullptr, values.data());
    out->clear();
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < 2; ++k) {
        out->push_back(double(params[slots.stats + 2 + k]) * values[r * 2 + k] + params[slots.stats + k]);
      }
    }
  };
  // The independent computation: mean and second moment in double, by the paper's rule.
  const double beta = 0.05;
  double mean[2] = {0, 0}, second[2] = {1, 1};
  for (int step = 0; step < 200; ++step) {
    const int k = step % 2;
    // Targets with scale 100 (task 0) and 0.01 (task 1).
    const double scale = k == 0 ? 100.0 : 0.01, centre = k == 0 ? 500.0 : -0.2;
    double m1 = 0, m2 = 0;
    for (int i = 0; i < 16; ++i) {
      const double v = centre + scale * std::normal_distribution<double>(0, 1)(rng);
      m1 += v / 16;
      m2 += v * v / 16;
    }
    std::vector<double> before, after;
    unnormalised(&before);
    learner::PopArtUpdate(slots, params.data(), k, m1, m2, beta);
    unnormalised(&after);
    for (size_t i = 0; i < before.size(); ++i) {
      INFO("step " << step << " output " << i);
      CHECK(after[i] == Approx(before[i]).epsilon(2e-5).margin(1e-6 * std::max(1.0, std::abs(mean[0]))));
    }
    // Statistics as stored: float, so the recurrence continues from the stored values.
    const double stored_mean = params[slots.stats + k], stored_scale = params[slots.stats + 2 + k];
    const double m = (1 - beta) * mean[k] + beta * m1;
    const double s2 = (1 - beta) * second[k] + beta * m2;
    CHECK(stored_mean == Approx(m).epsilon(1e-6));
    CHECK(stored_scale == Approx(std::sqrt(s2 - m * m)).epsilon(1e-4));
    mean[k] = stored_mean;
    second[k] = stored_scale * stored_scale + stored_mean * stored_mean;
  }
  // After 100 updates each, the statistics sit near the streams' own.
  CHECK(params[slots.stats + 0] == Approx(500).epsilon(0.05));
  CHECK(params[slots.stats + 2] > 10);
  CHECK(params[slots.stats + 3] < 1);
}

TEST_CASE("popart: fresh statistics start from the first batches, and a fresh head's values at their mean", "[suite][popart]") {
  // The step size: plain means of the batches so far while they are fresh, then beta.
  CHECK(learner::PopArtStepSize(3e-4, 0, true) == 1.0);
  CHECK(learner::PopArtStepSize(3e-4, 9, true) == Approx(0.1));
  CHECK(learner::PopArtStepSize(3e-4, 1000000, true) == 3e-4);
  CHECK(learner::PopArtStepSize(3e-4, 0, false) == 3e-4);  // restored statistics: beta from the start
  net::ModelSpec spec;
  spec.obs_shape = {5};
  spec.hidden_sizes = {8};
  spec.policy = net::CategoricalPolicy(3);
  spec.popart = true;
  spec.num_values = 1;
  auto net = net::MakeCpuModel<float>(spec);
  std::vector<float> params(net->layout().total_size());
  net::InitParams(spec, 11, params);
  const auto slots = learner::PopArtSlotsOf(net->layout());
  std::vector<float> obs(3 * 5, 0.5f), values(3);
  net->Step(params.data(), obs.data(), 3, nullptr, nullptr, nullptr, nullptr, values.data());
  const std::vector<float> head_before(params.begin() + slots.w, params.begin() + slots.w + slots.feature);
  // Returns near -100 with spread 5: mean -100, second moment 100^2 + 5^2.
  learner::PopArtUpdate(slots, params.data(), 0, -100.0, 100.0 * 100.0 + 25.0, 1.0, /*preserve_outputs=*/false);
  CHECK(params[slots.stats] == Approx(-100));
  CHECK(params[slots.stats + 1] == Approx(5).epsilon(1e-4));
  // The head is as it was: each value is now 5 n(x) - 100, near the targets' mean.
  CHECK(std::equal(head_before.begin(), head_before.end(), params.begin() + slots.w));
  std::vector<float> after(3);
  net->Step(params.data(), obs.data(), 3, nullptr, nullptr, nullptr, nullptr, after.data());
  for (int r = 0; r < 3; ++r) CHECK(5.0 * after[r] - 100.0 == Approx(5.0 * values[r] - 100.0));
}

TEST_CASE("report: report.csv has the hand-computed normalised mean and median", "[suite][report]") {
  const std::string dir = TempDir("report");
  std::ofstream(dir + "/config.textproto") << R"(
tasks { name: "a" env { name: "Catch" } random_score: 0 reference_score: 10 }
tasks { name: "b" env { name: "Catch" } random_score: -1 reference_score: 1 }
tasks { name: "c" env { name: "Catch" } random_score: 100 reference_score: 200 }
tasks { name: "d" env { name: "Catch" } random_score: 5 }
)";
  std::ofstream m(dir + "/metrics.jsonl");
  auto row = [](double frames, double a, int na, double b, double c, double d) {
    nlohmann::json t;
    t["a"] = {{"mean_return_100", a}, {"returns_counted", na}, {"env_frames", frames / 4}, {"episodes", na}};
    t["b"] = {{"mean_return_100", b}, {"returns_counted", 100}, {"env_frames", frames / 4}, {"episodes", 300}};
    t["c"] = {{"mean_return_100", c}, {"returns_counted", 100}, {"env_frames", frames / 4}, {"episodes", 300}};
    t["d"] = {{"mean_return_100", d}, {"returns_counted", 100}, {"env_frames", frames / 4}, {"episodes", 300}};
    return nlohmann::json{{"env_frames", frames}, {"elapsed_s", frames / 1000}, {"tasks", t}}.dump();
  };
  m << row(1000, 9, 3, -1, 100, 5) << "\n";   // a: 9 over 3 episodes (not a full window)
  m << "{\"event\":\"spawn\",\"env_frames\":0}\n";
  m << row(2000, 4, 100, 0, 150, 7) << "\n";
  m << row(3000, 6, 100, 0.5, 130, 6) << "\n";
  m << "{\"env_frames\": 40";  // torn last line of an interrupted run
  m.close();
  const base::StatusOr<tools::RunReport> computed = tools::ComputeReport(dir);
  REQUIRE_OK(computed);
  const tools::RunReport& r = *computed;
  REQUIRE_OK(tools::WriteReport(dir, r));
  // Final: a 6 -> 0.6; b 0.5 -> 0.75; c 130 -> 0.3; d has no reference.
  // Mean (0.6 + 0.75 + 0.3) / 3 = 0.55; median 0.6.
  REQUIRE(r.tasks.size() == 4);
  CHECK(r.tasks[0].best_score == 6);  // the 9 of a 3-episode window does not count once full windows exist
  CHECK(r.tasks[2].best_score == 150);
  CHECK(std::isnan(r.tasks[3].normalised));
  CHECK(r.mean_normalised == Approx(0.55));
  CHECK(r.median_normalised == Approx(0.6));
  std::ifstream csv(dir + "/report.csv");
  std::string line, text;
  std::map<std::string, std::string> last_field;  // task -> its normalised_score column
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::stringstream ss(l);
    std::string x;
    while (std::getline(ss, x, ',')) f.push_back(x);
    if (!l.empty() && l.back() == ',') f.push_back("");
    return f;
  };
  size_t column = 0;
  while (std::getline(csv, line)) {
    text += line + "\n";
    const auto f = split(line);
    if (f.empty()) continue;
    if (f[0] == "task") {
      column = size_t(std::find(f.begin(), f.end(), "normalised_score") - f.begin());
      continue;
    }
    last_field[f[0]] = column < f.size() ? f[column] : "";
  }
  INFO(text);
  CHECK(std::stod(last_field["(mean)"]) == Approx(0.55));
  CHECK(std::stod(last_field["(median)"]) == Approx(0.6));
  CHECK(std::stod(last_field["b"]) == Approx(0.75));
  CHECK(last_field["d"].empty());
  CHECK_FALSE(r.finished);
}

TEST_CASE("report: an Atari-5 suite's report gives the estimate of the Atari-57 median", "[suite][report][atari]") {
  const std::string dir = TempDir("report_atari5");
  // As `stampede run` writes it: each task's env resolved, its scores from the table.
  std::ofstream(dir + "/config.textproto") << R"(
tasks { name: "BattleZone" env { gym_id: "ALE/BattleZone-v5" atari { game: "BattleZone" } } random_score: 2360 reference_score: 37187.5 }
tasks { name: "DoubleDunk" env { gym_id: "ALE/DoubleDunk-v5" atari { game: "DoubleDunk" } } random_score: -18.6 reference_score: -16.4 }
tasks { name: "NameThisGame" env { gym_id: "ALE/NameThisGame-v5" atari { game: "NameThisGame" } } random_score: 2292.3 reference_score: 8049 }
tasks { name: "Phoenix" env { gym_id: "ALE/Phoenix-v5" atari { game: "Phoenix" } } random_score: 761.4 reference_score: 7242.6 }
tasks { name: "Qbert" env { gym_id: "ALE/Qbert-v5" atari { game: "Qbert" } } random_score: 163.9 reference_score: 13455 }
)";
  // Final scores: BattleZone at human (100%), DoubleDunk below random (clipped to 0),
  // NameThisGame halfway (50%), Phoenix at random (0%), Qbert at human (100%).
  const std::map<std::string, double> finals = {
      {"BattleZone", 37187.5}, {"DoubleDunk", -20}, {"NameThisGame", 2292.3 + 0.5 * (8049 - 2292.3)},
      {"Phoenix", 761.4}, {"Qbert", 13455}};
  nlohmann::json t;
  for (const auto& [name, score] : finals) {
    t[name] = {{"mean_return_100", score}, {"returns_counted", 100}, {"env_frames", 5000000}, {"episodes", 500}};
  }
  std::ofstream(dir + "/metrics.jsonl") << nlohmann::json{{"env_frames", 25000000}, {"elapsed_s", 3000}, {"tasks", t}}.dump()
                                        << "\n";
  const base::StatusOr<tools::RunReport> computed = tools::ComputeReport(dir);
  REQUIRE_OK(computed);
  const tools::RunReport& r = *computed;
  // 10^(0.38198 log10(101) + 0.31080 log10(51) + 0.08049 log10(101)) - 1, written as powers.
  const double expected = std::pow(101.0, 0.38198 + 0.08049) * std::pow(51.0, 0.31080) - 1;
  CHECK(r.atari5_median_percent == Approx(expected));
  CHECK(std::isnan(r.eval_atari5_median_percent));  // no evaluation round
  REQUIRE_OK(tools::WriteReport(dir, r));
  std::ifstream md(dir + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("Atari-5 estimate") && Catch::Contains("40% median"));
  // Four of the five: no estimate.
  std::ofstream(dir + "/config.textproto") << R"(
tasks { name: "BattleZone" env { gym_id: "ALE/BattleZone-v5" } random_score: 2360 reference_score: 37187.5 }
tasks { name: "Qbert" env { gym_id: "ALE/Qbert-v5" } random_score: 163.9 reference_score: 13455 }
)";
  const base::StatusOr<tools::RunReport> four = tools::ComputeReport(dir);
  REQUIRE_OK(four);
  CHECK(std::isnan(four->atari5_median_percent));
}

TEST_CASE("report: one Atari game run alone is human-normalised by the table", "[suite][report][atari]") {
  const std::string dir = TempDir("report_breakout");
  std::ofstream(dir + "/config.textproto") << "env { gym_id: \"ALE/Breakout-v5\" }\n";
  nlohmann::json t;
  t["ALE/Breakout-v5"] = {{"mean_return_100", 30.5}, {"returns_counted", 100}, {"env_frames", 1000}, {"episodes", 200}};
  std::ofstream(dir + "/metrics.jsonl") << nlohmann::json{{"env_frames", 1000}, {"elapsed_s", 1}, {"tasks", t}}.dump() << "\n";
  const base::StatusOr<tools::RunReport> computed = tools::ComputeReport(dir);
  REQUIRE_OK(computed);
  const tools::RunReport& r = *computed;
  REQUIRE(r.tasks.size() == 1);
  CHECK(r.tasks[0].normalised == Approx(1.0));
}

TEST_CASE("tensorboard: CRC32C matches its check value and the files parse with tensorboard's reader", "[suite][tensorboard]") {
  CHECK(coordinator::Crc32c("123456789", 9) == 0xE3069283u);  // the standard check value
  const std::string dir = TempDir("tb");
  {
    coordinator::TensorBoardWriter tb;
    REQUIRE_OK(tb.Open(dir + "/tb"));
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (int i = 0; i < 5; ++i) {
      REQUIRE(tb.WriteScalars(1000 * (i + 1), now + i, {{"return_100/catch", 0.25 * i}, {"frames_per_s", 100.0 + i}}));
    }
  }
  RequireVenvWith("tensorboard");
  std::string out;
  const int code = RunPython(
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "acc = EventAccumulator('" + dir + "/tb'); acc.Reload()\n"
      "tags = sorted(acc.Tags()['scalars']); print(tags)\n"
      "assert tags == ['frames_per_s', 'return_100/catch'], tags\n"
      "ev = acc.Scalars('return_100/catch')\n"
      "assert [e.step for e in ev] == [1000, 2000, 3000, 4000, 5000], ev\n"
      "assert [e.value for e in ev] == [0.0, 0.25, 0.5, 0.75, 1.0], ev\n"
      "assert abs(acc.Scalars('frames_per_s')[2].value - 102.0) < 1e-4\n"
      "print('ok')\n",
      &out);
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("ok"));
}

TEST_CASE("export: the .npz holds every tensor by name, as numpy reads it", "[suite][export]") {
  const std::string dir = TempDir("export");
  auto cfg = Parse("env { name: \"Catch\" } net { hidden_sizes: [8] }");
  envs::EnvSpec spec;
  std::string error;
  REQUIRE(::stampede::testing::Assign(envs::ResolveSpec(actors::EnvSourceFromConfig(cfg)), &spec, &error));
  *cfg.mutable_env()->mutable_resolved_spec() = actors::SpecToProto(spec);
  std::ofstream(dir + "/config.textproto") << ConfigToText(cfg);
  wire::StepShape shape;
  REQUIRE_OK(ResolvedStepShape(cfg, &shape));
  auto net = ::stampede::testing::ValueOr(net::MakeModelFromConfig(cfg, shape), &error);
  learner::CheckpointData d;
  d.layout_fingerprint = net->layout().Fingerprint();
  d.layout_text = learner::LayoutText(net->layout());
  d.version = 42;
  d.params.resize(net->layout().total_size());
  net::InitParams(net->spec(), 9, d.params);
  d.rms_mean_square.assign(d.params.size(), 0.f);
  d.rms_momentum.assign(d.params.size(), 0.f);
  REQUIRE(learner::SaveCheckpoint(dir + "/checkpoint.bin", d).ok());
  REQUIRE(tools::RunExportCommand(dir + "/checkpoint.bin", dir + "/net.npz", "") == 0);
  RequireVenvWith("numpy");
  const auto& w = net->layout().Find("torso/0/w");
  std::ostringstream script;
  script.precision(9);
  script << "import numpy as np\nz = np.load('" << dir << "/net.npz')\n"
         << "w = z['torso/0/w']\nassert w.shape == (" << w.shape[0] << ", " << w.shape[1] << "), w.shape\n"
         << "assert w.dtype == np.float32\n"
         << "assert w[1, 2] == np.float32(" << d.params[w.offset + 1 * w.shape[1] + 2] << "), w[1, 2]\n"
         << "assert int(z['__version__']) == 42\n"
         << "assert b'torso/0/w' in z['__layout__'].item()\n"
         << "print(sorted(k for k in z.files if not k.startswith('__')))\n";
  std::string out;
  const int code = RunPython(script.str(), &out);
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("policy/w"));
}

TEST_CASE("gif: a recorded episode is a GIF that Pillow reads frame by frame", "[suite][eval]") {
  const std::string dir = TempDir("gif");
  std::vector<std::vector<uint8_t>> frames;
  for (int f = 0; f < 3; ++f) {
    std::vector<uint8_t> rgb(size_t(20) * 30 * 3, 0);
    for (int x = 0; x < 30; ++x) rgb[(size_t(f * 5) * 30 + x) * 3] = 255;  // a red row moving down
    frames.push_back(rgb);
  }
  std::string error;
  REQUIRE_OK(tools::WriteGif(dir + "/ep.gif", 30, 20, frames, 10));
  RequireVenvWith("PIL");
  std::string out;
  const int code = RunPython("from PIL import Image\nim = Image.open('" + dir + "/ep.gif')\n"
                             "assert im.size == (30, 20) and im.n_frames == 3, (im.size, im.n_frames)\n"
                             "for f in range(3):\n"
                             "    im.seek(f); px = im.convert('RGB')\n"
                             "    assert px.getpixel((7, f * 5)) == (255, 0, 0), px.getpixel((7, f * 5))\n"
                             "    assert px.getpixel((7, f * 5 + 1)) == (0, 0, 0)\n"
                             "print('ok')\n",
                             &out);
  INFO(out);
  CHECK(code == 0);
}

TEST_CASE("tasks: MinAtar's [H, W, C] observations reach the network as [C, H, W]", "[suite][python]") {
  RequireVenvWith("minatar");
  auto cfg = Parse(R"(env { gym_id: "MinAtar/Breakout-v1" gym_module: "minatar.gym:register_envs"
                          gym_channels_first: true gym_vectorization: "sync" })");
  std::string error;
  auto env = ::stampede::testing::ValueOr(envs::MakeVectorEnv(actors::EnvSourceFromConfig(cfg), 2), &error);
  INFO(error);
  REQUIRE(env);
  CHECK(env->spec().obs_shape == std::vector<int>{4, 10, 10});
  CHECK(env->spec().num_actions == 3);
  std::vector<float> obs(2 * 400);
  env->Reset(1, reinterpret_cast<std::byte*>(obs.data()));
  // Breakout's paddle (channel 0) is on the bottom row: in [C, H, W], row 9 of channel 0.
  float paddle = 0, elsewhere = 0;
  for (int x = 0; x < 10; ++x) paddle += obs[0 * 100 + 9 * 10 + x];
  for (int y = 0; y < 9; ++y) {
    for (int x = 0; x < 10; ++x) elsewhere += obs[0 * 100 + y * 10 + x];
  }
  CHECK(paddle == 1.f);
  CHECK(elsewhere == 0.f);
}
