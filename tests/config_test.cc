// Config: located errors for unknown fields, wrong types and out-of-range values;
// --set overrides; the shipped configs load.
#include <catch2/catch.hpp>

#include "tests/status_testing.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "config/atari.h"

#include "config/config.h"

using stampede::LoadConfig;
using stampede::LoadedConfig;

namespace {
std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("stampede_cfg_" + name + ".textproto");
  std::ofstream(path) << text;
  return path.string();
}

std::string LoadError(const std::string& path, std::vector<std::string> sets = {}) {
  LoadedConfig cfg;
  const stampede::base::Status st = LoadConfig(path, sets, &cfg);
  return st.ok() ? std::string("(loaded)") : st.message();
}
}  // namespace

TEST_CASE("config: shipped configs load and pass the checks", "[config]") {
  for (const char* name : {"cartpole", "catch"}) {
    LoadedConfig cfg;
    std::string error;
    INFO(name << ": " << error);
    CHECK_OK(LoadConfig(std::string(STAMPEDE_SOURCE_DIR) + "/configs/" + name + ".textproto", {}, &cfg));
    CHECK(cfg.config.ps().num_shards() >= 2);
    CHECK(cfg.config.actors().num_actors() >= 2);
  }
}

TEST_CASE("config: every shipped config loads, and the Atari variants differ only in net", "[config]") {
  auto load = [](const std::string& name) {
    LoadedConfig cfg;
    const stampede::base::Status st = LoadConfig(std::string(STAMPEDE_SOURCE_DIR) + "/configs/" + name + ".textproto", {}, &cfg);
    INFO(name << ": " << st.message());
    CHECK(st.ok());
    return cfg.config;
  };
  for (const char* name : {"cartpole", "catch", "catch_pixels", "catch_pixels_custom", "cartpole_gym", "corridor_plugin",
                           "atari_pong", "atari_breakout", "atari_pong_deep_lstm", "atari_breakout_deep_lstm"}) {
    load(name);
  }
  for (const std::string game : {"pong", "breakout"}) {
    stampede::config::Config shallow = load("atari_" + game), deep = load("atari_" + game + "_deep_lstm");
    CHECK(shallow.net().torso() == "shallow_cnn");
    CHECK(deep.net().torso() == "deep_resnet");
    CHECK(deep.net().lstm_size() == 256);
    shallow.clear_net();
    deep.clear_net();
    CHECK(stampede::ConfigToText(shallow) == stampede::ConfigToText(deep));
  }
  CHECK(load("catch_pixels").net().torso() == "shallow_cnn");
}

TEST_CASE("config: a directory is not a config, and a million hidden layers are refused", "[config]") {
  CHECK_THAT(LoadError(std::string(STAMPEDE_SOURCE_DIR) + "/configs"), Catch::Contains("not a config file (a directory)"));
  std::string many = "net { hidden_sizes: [";
  for (int i = 0; i < 100; ++i) many += (i ? ", " : "") + std::string("4");
  const auto path = WriteTemp("many", many + "] }\n");
  CHECK_THAT(LoadError(path), Catch::Contains("net.hidden_sizes: 100 layers, expected at most 64"));
}

TEST_CASE("config: sync, async and allreduce take the CUDA learner, not PopArt", "[config]") {
  const std::string two = std::string(STAMPEDE_SOURCE_DIR) + "/configs/catch_2learners.textproto";
  for (const char* mode : {"sync", "async", "allreduce"}) {
    INFO(mode);
    const std::string m = std::string("learner.update_mode=") + mode;
    CHECK(LoadError(two, {m, "learner.device=cuda:0"}) == "(loaded)");
    CHECK(LoadError(two, {m, "learner.device=cuda"}) == "(loaded)");  // learner i on GPU i mod the GPUs
    CHECK_THAT(LoadError(two, {m, "learner.popart=true"}),
               Catch::Contains("learner.update_mode \"" + std::string(mode) + "\" runs without PopArt"));
  }
  CHECK_THAT(LoadError(two, {"learner.device=cuda:x"}), Catch::Contains("expected \"cpu\", \"cuda:N\""));
  CHECK_THAT(LoadError(two, {"learner.update_mode=ring"}), Catch::Contains("\"allreduce\""));
  CHECK_THAT(LoadError(two, {"learner.update_mode=allreduce", "learner.allreduce_timeout_s=0"}),
             Catch::Contains("learner.allreduce_timeout_s: 0 is out of range"));
  CHECK_THAT(LoadError(two, {"cluster.allreduce=tcp://a:1"}),
             Catch::Contains("cluster.allreduce: 1 endpoints given, expected one per learner"));
}

TEST_CASE("config: an unknown torso, device, inference mode or GEMM is a located error", "[config]") {
  const auto path = WriteTemp("torso", "seed: 3\nnet {\n  torso: \"resnet50\"\n}\n");
  const std::string err = LoadError(path);
  CHECK_THAT(err, Catch::StartsWith(path + ":3:"));
  CHECK_THAT(err, Catch::Contains("net.torso: \"resnet50\" is not known"));
  const auto dev = WriteTemp("device", "learner { device: \"gpu\" }\n");
  CHECK_THAT(LoadError(dev), Catch::Contains("learner.device: \"gpu\" is not known, expected \"cpu\", \"cuda:N\" (N a GPU index) or \"cuda\""));
  CHECK(LoadError(dev, {"learner.device=cuda:1"}) == "(loaded)");
  const auto inf = WriteTemp("inference", "actors { inference: \"remote\" }\n");
  CHECK_THAT(LoadError(inf), Catch::Contains(":1:") && Catch::Contains("actors.inference: \"remote\" is not known, expected \"local\" or \"central\""));
  CHECK(LoadError(inf, {"actors.inference=central"}) == "(loaded)");
  const auto eps = WriteTemp("inference_eps", "cluster { inference: \"tcp://a:1\" inference: \"tcp://a:2\" }\n");
  CHECK_THAT(LoadError(eps), Catch::Contains("cluster.inference has 2 endpoint(s), but learner.num_learners is 1"));
  CHECK_THAT(LoadError(inf, {"actors.inference=central", "actors.central_inference.timeout_ms=-1"}),
             Catch::Contains("actors.central_inference.timeout_ms"));
  const auto gemm = WriteTemp("gemm", "seed: 1\nnet { gemm_backend: \"mkl\" }\n");
  CHECK_THAT(LoadError(gemm), Catch::Contains(":2:") && Catch::Contains("net.gemm_backend: \"mkl\" is not known"));
  for (const char* b : {"auto", "eigen", "openblas", "blis", "onednn"}) {
    CHECK(LoadError(gemm, {std::string("net.gemm_backend=") + b}) == "(loaded)");
  }
}

TEST_CASE("config: an unknown field fails with file:line:col", "[config]") {
  const auto path = WriteTemp("unknown", "seed: 3\nlearner {\n  batch_sizee: 4\n}\n");
  const std::string err = LoadError(path);
  CHECK_THAT(err, Catch::StartsWith(path + ":3:"));
  CHECK_THAT(err, Catch::Contains(": learner.batch_sizee: ") && Catch::Contains("no field named"));
}

TEST_CASE("config: a wrong type fails with file:line:col", "[config]") {
  const auto path = WriteTemp("type", "seed: 3\nactors { num_actors: \"many\" }\n");
  const std::string err = LoadError(path);
  CHECK_THAT(err, Catch::StartsWith(path + ":2:22: actors.num_actors: "));
  CHECK_THAT(err, Catch::Contains("Expected integer"));
  const auto path2 = WriteTemp("type2", "# a comment { with braces\nlearner {\n  optimizer { decay: true }\n}\n");
  CHECK_THAT(LoadError(path2), Catch::StartsWith(path2 + ":3:22: learner.optimizer.decay: "));
}

TEST_CASE("config: an out-of-range value names the place, the field and the range", "[config]") {
  const auto path = WriteTemp("range", "seed: 3\n\nlearner {\n  discount: 1.5\n}\n");
  const std::string err = LoadError(path);
  CHECK_THAT(err, Catch::StartsWith(path + ":4:3: learner.discount: 1.5 is out of range"));
  CHECK_THAT(err, Catch::Contains("[0, 1]"));
  const auto path2 = WriteTemp("range2", "actors { num_actors: 0 }\n");
  CHECK_THAT(LoadError(path2), Catch::Contains(":1:10: actors.num_actors: 0 is out of range"));
  const auto path3 = WriteTemp("range3", "net { activation: \"gelu\" }\n");
  CHECK_THAT(LoadError(path3), Catch::Contains(":1:7: net.activation"));
  const auto path4 = WriteTemp("range4", "learner { batch_size: 64 queue_capacity: 10 }\n");
  CHECK_THAT(LoadError(path4), Catch::Contains("learner.queue_capacity"));
  // The policy-lag bounds: whole non-negative numbers of versions, seconds >= 0.
  const auto path5 = WriteTemp("range5", "actors {\n  max_policy_lag: -1\n}\n");
  CHECK_THAT(LoadError(path5), Catch::Contains(":2:3: actors.max_policy_lag: -1 is out of range"));
  const auto path6 = WriteTemp("range6", "learner { max_policy_lag: -5 }\n");
  CHECK_THAT(LoadError(path6), Catch::Contains(":1:11: learner.max_policy_lag: -5 is out of range"));
  const auto path7 = WriteTemp("range7", "actors { max_params_age_s: -0.5 }\n");
  CHECK_THAT(LoadError(path7), Catch::Contains(":1:10: actors.max_params_age_s: -0.5 is out of range"));
}

TEST_CASE("config: --set overrides fields, and a bad override is refused", "[config]") {
  const auto path = WriteTemp("set", "seed: 3\n");
  LoadedConfig cfg;
  std::string error;
  REQUIRE_OK(LoadConfig(path, {"learner.batch_size=64", "net.hidden_sizes=32,16", "env.name=Catch",
                            "learner.optimizer.learning_rate=0.01"},
                     &cfg));
  CHECK(cfg.config.learner().batch_size() == 64);
  CHECK(cfg.config.net().hidden_sizes_size() == 2);
  CHECK(cfg.config.net().hidden_sizes(1) == 16);
  CHECK(cfg.config.env().name() == "Catch");
  CHECK(cfg.config.learner().optimizer().learning_rate() == Approx(0.01));
  CHECK(cfg.config.seed() == 3);
  CHECK_THAT(LoadError(path, {"learner.batch_sz=4"}), Catch::Contains("no field named \"batch_sz\""));
  CHECK_THAT(LoadError(path, {"learner.batch_size=lots"}), Catch::Contains("learner.batch_size"));
  CHECK_THAT(LoadError(path, {"learner.batch_size"}), Catch::Contains("expected path=value"));
  CHECK_THAT(LoadError(path, {"learner.discount=2"}),
             Catch::StartsWith("--set learner.discount: learner.discount: 2 is out of range"));
}

TEST_CASE("config: a missing file is a clear error", "[config]") {
  CHECK_THAT(LoadError("/nonexistent/x.textproto"), Catch::Contains("cannot open config file"));
}

namespace {
LoadedConfig LoadOk(const std::string& path, std::vector<std::string> sets = {}) {
  LoadedConfig cfg;
  const stampede::base::Status st = LoadConfig(path, sets, &cfg);
  INFO(path << ": " << st.message());
  REQUIRE(st.ok());
  return cfg;
}
std::string Shipped(const std::string& name) {
  return std::string(STAMPEDE_SOURCE_DIR) + "/configs/" + name + ".textproto";
}
}  // namespace

TEST_CASE("atari preset: a game name gives ale-py's env with the standard protocol", "[config][atari]") {
  const auto cfg = LoadOk(WriteTemp("atari_game", "env { atari { game: \"space_invaders\" } }\n")).config;
  CHECK(cfg.env().gym_id() == "ALE/SpaceInvaders-v5");  // the table's spelling
  REQUIRE(cfg.env().gym_module_size() == 1);
  CHECK(cfg.env().gym_module(0) == "ale_py");
  const auto& kw = cfg.env().kwargs();
  // Machado et al. (2018): each value as ale-py's AtariVectorEnv takes it.
  const std::map<std::string, std::string> protocol = {
      {"frameskip", "4"}, {"maxpool", "true"}, {"img_height", "84"}, {"img_width", "84"}, {"grayscale", "true"},
      {"stack_num", "4"}, {"repeat_action_probability", "0.25"}, {"full_action_space", "false"},
      {"noop_max", "30"}, {"max_num_frames_per_episode", "108000"}, {"episodic_life", "false"},
      {"reward_clipping", "false"}, {"autoreset_mode", "SameStep"}, {"num_threads", "1"}};
  for (const auto& [k, v] : protocol) {
    INFO(k);
    REQUIRE(kw.count(k) == 1);
    CHECK(kw.at(k) == v);
  }
  CHECK(kw.size() == protocol.size());
  // The recipe: every field the config left unset.
  CHECK(cfg.net().torso() == "shallow_cnn");
  CHECK(cfg.net().center_frames());
  CHECK(cfg.learner().reward_clip() == 1);
  CHECK(cfg.learner().optimizer().kind() == "adam");
}

TEST_CASE("atari preset: the config's own fields, kwargs and --set win over the preset", "[config][atari]") {
  const auto path = WriteTemp("atari_own", R"(env {
  atari { game: "Pong" sticky_actions: 0 }
  kwargs { key: "noop_max" value: "0" }
}
learner { entropy_cost: 0.02 batch_size: 4 }
net { layers { conv { channels: 8 kernel: 8 stride: 4 } } layers { relu {} } layers { dense { units: 8 } } }
)");
  const auto cfg = LoadOk(path, {"env.atari.frame_skip=2", "learner.optimizer.learning_rate=0.001"}).config;
  CHECK(cfg.env().kwargs().at("repeat_action_probability") == "0");
  CHECK(cfg.env().kwargs().at("frameskip") == "2");
  CHECK(cfg.env().kwargs().at("noop_max") == "0");
  CHECK(cfg.learner().entropy_cost() == 0.02);
  CHECK(cfg.learner().batch_size() == 4);
  CHECK(cfg.learner().optimizer().learning_rate() == 0.001);
  CHECK(cfg.learner().optimizer().kind() == "adam");  // the rest of the optimizer from the recipe
  CHECK_FALSE(cfg.net().has_torso());                  // its own layers: no named torso added
  // recipe: false keeps the library's defaults.
  const auto bare = LoadOk(WriteTemp("atari_bare", "env { atari { game: \"Pong\" recipe: false } }\n")).config;
  CHECK_FALSE(bare.learner().has_optimizer());
  CHECK_FALSE(bare.net().has_torso());
  CHECK(bare.env().kwargs().at("stack_num") == "4");
}

TEST_CASE("atari preset: errors name the field", "[config][atari]") {
  CHECK_THAT(LoadError(WriteTemp("atari_empty", "env { atari { } }\n")), Catch::Contains("env.atari.game: empty"));
  CHECK_THAT(LoadError(WriteTemp("atari_both", "env { gym_id: \"ALE/Pong-v5\" atari { game: \"Breakout\" } }\n")),
             Catch::Contains("env.gym_id: \"ALE/Pong-v5\" beside atari.game \"Breakout\""));
  CHECK_THAT(LoadError(WriteTemp("atari_sticky", "env { atari { game: \"Pong\" sticky_actions: 1 } }\n")),
             Catch::Contains("env.atari.sticky_actions: 1 is out of range, expected a number in [0, 1)"));
  CHECK_THAT(LoadError(WriteTemp("atari_task", "tasks { env { atari { game: \"Pong\" frame_skip: 0 } } }\n")),
             Catch::Contains("tasks[0].env.atari.frame_skip: 0 is out of range, expected an integer in [1, 64]"));
}

TEST_CASE("atari preset: a written config loads to itself, and the printed one loads to the same run", "[config][atari]") {
  for (const char* name : {"atari_pong", "atari_breakout", "atari5"}) {
    INFO(name);
    const auto first = LoadOk(Shipped(name)).config;
    // RUN_DIR/config.textproto is the resolved config; loading it again changes nothing.
    const auto again = LoadOk(WriteTemp("atari_again", stampede::ConfigToText(first))).config;
    CHECK(stampede::ConfigToText(again) == stampede::ConfigToText(first));
    // What `stampede config` prints is a config too, and prints the same once loaded.
    const std::string printed = stampede::ResolvedConfigText(first);
    const auto reloaded = LoadOk(WriteTemp("atari_printed", printed)).config;
    CHECK(stampede::ResolvedConfigText(reloaded) == printed);
  }
}

TEST_CASE("atari preset: Pong and Breakout get one recipe, and no shipped config lists ale-py kwargs", "[config][atari]") {
  const auto pong = LoadOk(Shipped("atari_pong")).config, breakout = LoadOk(Shipped("atari_breakout")).config;
  for (auto* section : {"learner", "net", "actors"}) {
    INFO(section);
    auto text = [&](const stampede::config::Config& c) {
      stampede::config::Config only;
      if (std::string(section) == "learner") *only.mutable_learner() = c.learner();
      if (std::string(section) == "net") *only.mutable_net() = c.net();
      if (std::string(section) == "actors") *only.mutable_actors() = c.actors();
      return stampede::ResolvedConfigText(only);
    };
    CHECK(text(pong) == text(breakout));
  }
  CHECK(pong.env().kwargs().at("repeat_action_probability") == "0.25");
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(STAMPEDE_SOURCE_DIR) + "/configs")) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(entry.path());
    CHECK(text.find("\"repeat_action_probability\"") == std::string::npos);
    CHECK(text.find("\"stack_num\"") == std::string::npos);
  }
}

TEST_CASE("atari table: the 57 games with DQN Zoo's scores, and the Atari-5 estimate", "[config][atari]") {
  namespace atari = stampede::atari;
  CHECK(atari::Atari57().size() == 57);
  const atari::GameScores* breakout = atari::FindGame("breakout");
  REQUIRE(breakout != nullptr);
  CHECK(breakout->random == 1.7);
  CHECK(breakout->human == 30.5);
  CHECK(atari::FindGame("Name_This_Game") == atari::FindGame("NameThisGame"));
  CHECK(atari::FindGame("Tetris") == nullptr);  // an ALE game outside the 57
  CHECK(atari::HumanNormalisedPercent(*breakout, 30.5) == Approx(100));
  CHECK(atari::HumanNormalisedPercent(*breakout, 1.7) == Approx(0));
  for (const auto& g : atari::kAtari5) CHECK(atari::FindGame(g.game) != nullptr);
  // No intercept: every game at 0% (or below, clipped) gives 0.
  CHECK(atari::Atari5MedianPercent({0, -50, 0, 0, -10}) == Approx(0).margin(1e-12));
  // BattleZone and NameThisGame at 100%, the rest at 0: (1 + 100)^(w1 + w3) - 1.
  CHECK(atari::Atari5MedianPercent({100, 0, 100, 0, 0}) == Approx(std::pow(101.0, 0.38198 + 0.31080) - 1));
  // All five at x: (1 + x)^(sum of weights) - 1, the weights summing to 0.96531.
  CHECK(atari::Atari5MedianPercent({50, 50, 50, 50, 50}) == Approx(std::pow(51.0, 0.96531) - 1));
}

TEST_CASE("atari suite: tasks are named by their games and normalised by the table", "[config][atari]") {
  const auto cfg = LoadOk(Shipped("atari5")).config;
  REQUIRE(cfg.tasks_size() == 5);
  const char* games[] = {"BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"};
  for (int t = 0; t < 5; ++t) {
    INFO(games[t]);
    CHECK(cfg.tasks(t).name() == games[t]);
    CHECK(cfg.tasks(t).env().gym_id() == "ALE/" + std::string(games[t]) + "-v5");
    const auto* g = stampede::atari::FindGame(games[t]);
    CHECK(cfg.tasks(t).random_score() == g->random);
    CHECK(cfg.tasks(t).reference_score() == g->human);
  }
  CHECK(cfg.learner().popart());
  CHECK(cfg.learner().reward_clip() == 0);
  CHECK(cfg.learner().optimizer().kind() == "adam");
  // A task's own scores are kept.
  const auto own = LoadOk(WriteTemp("atari_own_scores",
                                    "tasks { env { atari { game: \"Pong\" } } random_score: -21 reference_score: 21 }\n"))
                       .config;
  CHECK(own.tasks(0).reference_score() == 21);
}

TEST_CASE("config: a declared range is checked wherever its message appears, naming the element", "[config]") {
  // EnvConfig.max_episode_steps declares [0, 1e9]: in env and in every task's env.
  const std::string path = WriteTemp("task_range",
                                     "tasks { name: \"a\" env { name: \"Catch\" } }\n"
                                     "tasks { name: \"b\" env { name: \"Catch\" max_episode_steps: -1 } }\n");
  const std::string error = LoadError(path);
  CHECK_THAT(error, Catch::Contains(path + ":2") &&
                        Catch::Contains("tasks[1].env.max_episode_steps: -1 is out of range, expected an integer in "
                                        "[0, 1e+09]"));
  // An unset message's defaults are in range; a oneof's other members are not checked.
  CHECK(LoadError(WriteTemp("layers_ok", "net { layers { dense { units: 8 } } layers { relu {} } }\n")) == "(loaded)");
}

TEST_CASE("config: a population's mistakes are located errors, and the shipped populations load", "[config][pbt]") {
  for (const char* name : {"pbt_catch", "pbt_cartpole", "pbt_minatar_breakout"}) {
    LoadedConfig cfg;
    INFO(name);
    CHECK_OK(LoadConfig(std::string(STAMPEDE_SOURCE_DIR) + "/configs/" + name + ".textproto", {}, &cfg));
    CHECK(cfg.config.pbt().population() == 4);
  }
  const auto path = WriteTemp("pbt", "seed: 1\npbt {\n  population: 4\n  evolve { path: \"learner.optimizer.learning_rate\" low: 1e-5 high: 0.01 }\n}\n");
  CHECK(LoadError(path) == "(loaded)");
  CHECK_THAT(LoadError(path, {"pbt.population=1"}), Catch::Contains("--set pbt.population: pbt.population: 1 member has no one to exploit"));
  const auto bad_path = WriteTemp("pbt_path", "pbt {\n  population: 2\n  evolve { path: \"learner.learning_rate\" }\n}\n");
  CHECK_THAT(LoadError(bad_path), Catch::StartsWith(bad_path + ":3:") &&
                                      Catch::Contains("pbt.evolve: evolve[0] (learner.learning_rate): learner.learning_rate: "
                                                      "stampede.config.LearnerConfig has no field named \"learning_rate\""));
  const auto text = WriteTemp("pbt_text", "pbt {\n  population: 2\n  evolve { path: \"learner.device\" }\n}\n");
  CHECK_THAT(LoadError(text), Catch::Contains("learner.device: a string field, not a number"));
  const auto zero = WriteTemp("pbt_zero", "pbt {\n  population: 2\n  evolve { path: \"learner.entropy_cost\" low: 0 high: 0.1 }\n}\n");
  CHECK_THAT(LoadError(zero), Catch::Contains("log_scale draws need low above 0"));
  const auto upside = WriteTemp("pbt_upside", "pbt {\n  population: 2\n  evolve { path: \"learner.discount\" low: 0.999 high: 0.9 }\n}\n");
  CHECK_THAT(LoadError(upside), Catch::Contains("low 0.999 is not below high 0.9"));
  CHECK_THAT(LoadError(path, {"learner.update_mode=sync", "learner.popart=false"}),
             Catch::Contains("learner.update_mode: a population's members copy a leader's learner checkpoint"));
  const auto members = WriteTemp("pbt_members", "pbt {\n  population: 2\n  evolve { path: \"learner.entropy_cost\" low: 0.001 high: 0.1 }\n"
                                                "  members { set: \"seed=3\" }\n}\n");
  CHECK_THAT(LoadError(members), Catch::Contains("members[0]: seed is the population's to set"));
  CHECK_THAT(LoadError(members, {"pbt.population=0"}), Catch::Equals("(loaded)"));  // off: nothing to check
  const auto unknown = WriteTemp("pbt_unknown", "pbt {\n  population: 2\n  evolve { path: \"learner.entropy_cost\" low: 0.001 high: 0.1 }\n"
                                                "  members { set: \"learner.batchsize=3\" }\n}\n");
  CHECK_THAT(LoadError(unknown), Catch::Contains("members[0]: --set learner.batchsize=3: stampede.config.LearnerConfig has no field"));
  CHECK_THAT(LoadError(path, {"pbt.objective=evaluation"}), Catch::Contains("\"evaluation\" needs evaluation rounds"));
  CHECK_THAT(LoadError(path, {"pbt.objective=normalised_median"}), Catch::Contains("ranks a suite's tasks; this config has no tasks"));
}

TEST_CASE("config: learner.ppo_clip is the CPU learner's and lies in [0, 1]", "[config]") {
  const auto path = WriteTemp("ppo_clip", "seed: 1\nlearner {\n  ppo_clip: 0.2\n}\n");
  CHECK(LoadError(path) == "(loaded)");
  const std::string gpu = LoadError(path, {"learner.device=cuda:0"});
  CHECK_THAT(gpu, Catch::StartsWith(path + ":3:"));
  CHECK_THAT(gpu, Catch::Contains("learner.ppo_clip: 0.2 needs the CPU learner's loss"));
  CHECK_THAT(LoadError(path, {"learner.ppo_clip=1.5"}), Catch::Contains("learner.ppo_clip"));
}
