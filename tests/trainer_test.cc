// The learner's trainer core (learner/trainer.h) on fakes: a scripted backend, a batch
// source that counts, recording books, a fake PS, a fake ring, a fake checkpoint writer and
// a fake clock. No socket, no thread, no sleep; the binary links no ZeroMQ (the ctest
// "trainer core: the test binary links no ZeroMQ" checks it).
#include <catch2/catch.hpp>

#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "learner/trainer.h"
#include "net/from_config.h"
#include "tests/skip_only.h"

using namespace stampede;
using namespace stampede::learner;
using namespace std::chrono_literals;

namespace {

constexpr int kParams = 6;
constexpr int kT = 3, kB = 2;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

config::Config Cfg(const std::string& mode) {
  config::Config cfg;
  cfg.mutable_learner()->set_update_mode(mode);
  cfg.mutable_learner()->set_batch_size(kB);
  cfg.mutable_learner()->set_max_grad_norm(1e6);
  cfg.mutable_learner()->set_checkpoint_interval_s(0);
  cfg.mutable_actors()->set_unroll_length(kT);
  cfg.mutable_stop()->set_total_env_frames(100000);
  auto* spec = cfg.mutable_env()->mutable_resolved_spec();
  spec->add_obs_shape(4);
  spec->set_num_actions(2);
  return cfg;
}

// A backend whose gradient and loss are given: each step's loss from `losses` (NaN: a bad
// step; empty: 1), the gradient `gradient`, every V-trace target from `targets`.
class ScriptedBackend final : public Backend {
 public:
  std::vector<float> gradient = std::vector<float>(kParams, 0.25f);
  std::deque<double> losses;
  std::vector<float> targets;  // [T * B], cycled; empty: no targets
  std::vector<std::vector<float>> taken_at;  // the parameters each gradient was taken at
  int loads = 0;
  std::vector<int> threads_set;  // each SetComputeThreads, in order

  std::string name() const override { return "scripted"; }
  void Load(const Batch&) override { ++loads; }
  bool overlaps() const override { return false; }
  void LaunchGradient(std::span<const float> params) override { taken_at.emplace_back(params.begin(), params.end()); }
  LossStats WaitGradient(std::span<float> grad, Targets<float>* t) override {
    std::copy(gradient.begin(), gradient.end(), grad.begin());
    LossStats st;
    st.total = losses.empty() ? 1.0 : losses.front();
    if (!losses.empty()) losses.pop_front();
    if (t != nullptr) t->vs = targets;
    return st;
  }
  bool has_targets() const override { return !targets.empty(); }
  void SetComputeThreads(int threads) override { threads_set.push_back(threads); }
  bool fuses_update() const override { return false; }
  void SetState(std::span<const float>, std::span<const float>, std::span<const float>) override {}
  void GetState(std::span<float>, std::span<float>, std::span<float>) override {}
  void LaunchUpdate(double, int64_t) override {}
  LossStats WaitUpdate(std::span<float>, double*) override { return {}; }
};

// Gives `count` batches, each advancing the fake clock by `tick`, then stops the trainer.
class CountingSource final : public BatchSource {
 public:
  CountingSource(Trainer& t, int count, Clock::time_point* clock, Clock::duration tick)
      : trainer_(t), count_(count), clock_(clock), tick_(tick) {}
  int given = 0, trained = 0, not_trained = 0;
  int64_t behaviour_version = 0;
  bool Next(Batch* batch, std::chrono::milliseconds) override {
    if (given == count_) {
      trainer_.stop = true;
      return false;
    }
    ++given;
    *clock_ += tick_;
    std::fill(batch->policy_versions.begin(), batch->policy_versions.end(), behaviour_version);
    return true;
  }
  void Trained(const Batch&, const Targets<float>*, const LossStats&) override { ++trained; }
  void NotTrained() override { ++not_trained; }
  bool wants_targets() const override { return false; }

 private:
  Trainer& trainer_;
  int count_;
  Clock::time_point* clock_;
  Clock::duration tick_;
};

class RecordingBooks final : public TrainerBooks {
 public:
  std::vector<int64_t> trained_on;
  std::vector<base::StepFigures> figures;
  int skipped = 0;
  std::vector<base::Status> failures;
  std::vector<float> popart_stats;
  std::vector<int64_t> rings;
  void Stepped(const Batch&, int64_t on, const base::StepFigures& f) override {
    trained_on.push_back(on);
    figures.push_back(f);
  }
  void SkippedStep() override { ++skipped; }
  void Failed(const base::Status& why) override { failures.push_back(why); }
  void PopArtStats(std::span<const float> s) override { popart_stats.assign(s.begin(), s.end()); }
  void RingFormed(int64_t generation) override { rings.push_back(generation); }
};

// Two shards. Puts and pushes are recorded; `refuse_puts` puts fail first (a shard's queue
// full); each wait for a reply runs `on_wait` (the shards moving on).
class FakeShards final : public ShardLink {
 public:
  std::vector<int64_t> versions{0, 0};
  std::vector<int64_t> frames_by_learner{0, 0};
  std::vector<float> held = std::vector<float>(kParams, 0.f);
  int64_t held_version = 0;
  bool fresh_params = false;  // Poll gives `held` once
  int refuse_puts = 0;
  std::vector<int64_t> puts;
  struct Push {
    std::vector<int64_t> at;
    double lr;
    int64_t env_frames;
    int waits;  // the waits for a reply before it
  };
  std::vector<Push> pushes;
  int waits = 0;
  std::function<void()> on_wait;

  bool Put(std::span<const float>, int64_t version) override {
    if (refuse_puts > 0) {
      --refuse_puts;
      return false;
    }
    puts.push_back(version);
    return true;
  }
  bool Poll(std::span<float> params, int64_t* version, bool) override {
    if (!fresh_params) return false;
    std::copy(held.begin(), held.end(), params.begin());
    *version = held_version;
    fresh_params = false;
    return true;
  }
  bool WaitForReply(std::chrono::milliseconds) override {
    ++waits;
    if (on_wait) on_wait();
    return true;
  }
  const std::vector<int64_t>& shard_versions() const override { return versions; }
  const std::vector<int64_t>& env_frames_by_learner() const override { return frames_by_learner; }
  bool PushGradient(std::span<const float>, const std::vector<int64_t>& at, double lr, int64_t env_frames,
                    const std::atomic<bool>*) override {
    pushes.push_back({at, lr, env_frames, waits});
    return true;
  }
};

class FakeCheckpoints final : public CheckpointWriter {
 public:
  int saves = 0, rounds = 0, polls = 0;
  bool open = false, abandoned = false;
  base::Status Save() override {
    ++saves;
    return base::OkStatus();
  }
  void StartRound() override {
    ++rounds;
    open = true;
    abandoned = false;
  }
  base::StatusOr<bool> PollRound() override {
    ++polls;
    if (!open) return false;
    open = false;  // every shard's part came at once
    return true;
  }
  bool round_open() const override { return open; }
  bool round_abandoned() const override { return abandoned; }
};

// A ring of learners 0 and 1 seen from learner 0: the other contributes `other` (its frames,
// weight and fingerprint); `results` gives each reduction's status (empty: ok). The data is
// left as it is (the other's gradient taken as equal).
class FakeRing final : public RingLink {
 public:
  RingContribution other{1, 1000, 1, 0};
  std::deque<base::Status> results;
  std::vector<RingContribution> own;
  int rendezvous = 0;
  RingStats counters;
  base::Status AllReduce(int64_t, const std::vector<int>&, std::span<float>, const RingContribution& mine,
                         std::vector<RingContribution>* all, const std::atomic<bool>*) override {
    own.push_back(mine);
    base::Status st = results.empty() ? base::OkStatus() : results.front();
    if (!results.empty()) results.pop_front();
    if (!st.ok()) return st;
    ++counters.reductions;
    RingContribution me = mine;
    me.learner = 0;
    RingContribution them = other;
    if (mine.fingerprint == 0) them.fingerprint = 0;  // only check rounds carry fingerprints
    *all = {me, them};
    return base::OkStatus();
  }
  base::Status Rendezvous(RingMemberState*, int64_t, bool, RingPlan* plan, const std::atomic<bool>*) override {
    ++rendezvous;
    plan->generation = rendezvous;
    plan->members = {0, 1};
    return base::OkStatus();
  }
  const RingStats& stats() const override { return counters; }
};

// A trainer on the fakes: `index` is its learner index.
struct Rig {
  explicit Rig(const config::Config& cfg, int batches, int index = 0, Clock::duration tick = 1s)
      : trainer(cfg, index), source(trainer, batches, &clock, tick) {
    REQUIRE(ResolvedStepShape(cfg, &trainer.shape).ok());
    trainer.params.assign(kParams, 0.5f);
    trainer.grad.assign(kParams, 0.f);
    trainer.rms = std::make_unique<Optimizer>(kParams, net::OptimizerHyperFromConfig(cfg.learner().optimizer()));
    auto b = std::make_unique<ScriptedBackend>();
    backend = b.get();
    trainer.backend = std::move(b);
    trainer.links.batches = &source;
    trainer.links.books = &books;
    trainer.links.shards = &shards;
    trainer.links.now = [this] { return clock; };
  }
  // The parameters after `steps` optimizer steps of the backend's gradient at the
  // schedule's rate at `frames`, from the start values: what the learner must have applied.
  std::vector<float> Expected(int steps, int64_t frames = 0) const {
    Optimizer o(kParams, net::OptimizerHyperFromConfig(trainer.cfg.learner().optimizer()));
    std::vector<float> p(kParams, 0.5f);
    const double lr = net::ScheduledLearningRate(trainer.cfg.learner().optimizer(),
                                                 trainer.cfg.stop().total_env_frames(), double(frames));
    for (int s = 1; s <= steps; ++s) o.Step(p, backend->gradient, lr, s);
    return p;
  }
  Clock::time_point clock{};
  Trainer trainer;
  CountingSource source;
  ScriptedBackend* backend = nullptr;
  RecordingBooks books;
  FakeShards shards;
};

}  // namespace

TEST_CASE("trainer core, relay: each step is applied here and put to the shards every publish_every steps", "[trainer]") {
  config::Config cfg = Cfg("relay");
  cfg.mutable_learner()->set_publish_every(2);
  Rig rig(cfg, 4);
  rig.trainer.Run();
  CHECK(rig.trainer.counters.version == 4);
  CHECK(rig.trainer.counters.steps == 4);
  CHECK(rig.books.trained_on == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(rig.shards.puts == std::vector<int64_t>{2, 4});
  CHECK(rig.source.trained == 4);
  CHECK(rig.trainer.params == rig.Expected(4));
  // Each gradient is taken at the parameters the previous step left.
  REQUIRE(rig.backend->taken_at.size() == 4);
  CHECK(rig.backend->taken_at[2] == rig.Expected(2));
}

TEST_CASE("trainer core, relay: a put that did not reach every shard is put again at the next step", "[trainer]") {
  config::Config cfg = Cfg("relay");
  cfg.mutable_learner()->set_publish_every(3);
  Rig rig(cfg, 4);
  rig.shards.refuse_puts = 1;  // version 3's first put
  rig.trainer.Run();
  // Version 3 never reached them whole; version 4 goes out at once, not at step 6.
  CHECK(rig.shards.puts == std::vector<int64_t>{4});
}

TEST_CASE("trainer core: a step whose loss is not finite is neither applied nor counted as a version", "[trainer]") {
  for (const std::string mode : {"relay", "async"}) {
    DYNAMIC_SECTION(mode) {
      Rig rig(Cfg(mode), 3);
      rig.backend->losses = {1.0, kNaN, 1.0};
      rig.trainer.Run();
      CHECK(rig.books.skipped == 1);
      CHECK(rig.source.not_trained == 1);
      CHECK(rig.source.trained == 2);
      CHECK(rig.trainer.counters.steps == 2);
      if (mode == "relay") {
        CHECK(rig.trainer.counters.version == 2);
        CHECK(rig.trainer.params == rig.Expected(2));
      } else {
        CHECK(rig.shards.pushes.size() == 2);
      }
    }
  }
  SECTION("a non-finite gradient too") {
    Rig rig(Cfg("relay"), 2);
    rig.backend->gradient[3] = std::numeric_limits<float>::infinity();
    rig.trainer.Run();
    CHECK(rig.books.skipped == 2);
    CHECK(rig.trainer.counters.version == 0);
    CHECK(rig.trainer.params == std::vector<float>(kParams, 0.5f));
  }
}

TEST_CASE("trainer core, relay: the checkpoint is written when its interval has passed on the clock", "[trainer]") {
  config::Config cfg = Cfg("relay");
  cfg.mutable_learner()->set_checkpoint_interval_s(10);
  Rig rig(cfg, 6, 0, 4s);  // steps at 4, 8, ..., 24 s
  FakeCheckpoints ckpt;
  rig.trainer.links.checkpoints = &ckpt;
  rig.trainer.Run();
  CHECK(ckpt.saves == 2);  // at 12 s (12 > 10) and at 24 s (24 - 12 > 10)
  SECTION("a learner with no checkpoint writer writes none") {
    Rig other(cfg, 6, 0, 4s);
    other.trainer.Run();
    CHECK(other.trainer.counters.version == 6);
  }
}

TEST_CASE("trainer core, sync: each gradient waits for the version the previous one helped make", "[trainer]") {
  config::Config cfg = Cfg("sync");
  Rig rig(cfg, 2);
  rig.shards.versions = {5, 7};
  rig.shards.held_version = 7;
  // The shards move on after the third wait: the other learners' gradients arrived. After
  // the second push nothing more comes: the test stops the trainer.
  rig.shards.on_wait = [&rig] {
    if (rig.shards.waits == 3) {
      rig.shards.versions = {6, 8};
      rig.shards.held.assign(kParams, 2.f);
      rig.shards.held_version = 8;
      rig.shards.fresh_params = true;
    }
    if (rig.shards.pushes.size() == 2) rig.trainer.stop = true;
  };
  rig.trainer.Run();
  REQUIRE(rig.shards.pushes.size() == 2);
  CHECK(rig.shards.pushes[0].at == std::vector<int64_t>{5, 7});
  CHECK(rig.shards.pushes[1].at == std::vector<int64_t>{6, 8});
  CHECK(rig.shards.pushes[0].waits == 0);
  CHECK(rig.shards.pushes[1].waits == 3);
  // The second gradient was taken at the shards' new parameters, not the old ones.
  REQUIRE(rig.backend->taken_at.size() == 2);
  CHECK(rig.backend->taken_at[0] == std::vector<float>(kParams, 0.5f));
  CHECK(rig.backend->taken_at[1] == std::vector<float>(kParams, 2.f));
  CHECK(rig.books.trained_on == std::vector<int64_t>{0, 8});
  // The learner applies nothing itself: its parameters are the shards'.
  CHECK(rig.trainer.params == std::vector<float>(kParams, 2.f));
}

TEST_CASE("trainer core, async: gradients go out without waiting, at the run's frames' learning rate", "[trainer]") {
  config::Config cfg = Cfg("async");
  Rig rig(cfg, 3);
  rig.trainer.counters.frames = 20000;
  rig.shards.frames_by_learner = {20000, 30000};  // learner 1's frames, as the shards know them
  rig.trainer.Run();
  REQUIRE(rig.shards.pushes.size() == 3);
  CHECK(rig.shards.waits == 0);
  CHECK(rig.trainer.counters.other_frames == 30000);
  const double lr = net::ScheduledLearningRate(cfg.learner().optimizer(), cfg.stop().total_env_frames(), 50000);
  CHECK(lr < cfg.learner().optimizer().learning_rate());  // the linear schedule has annealed it
  for (const auto& p : rig.shards.pushes) {
    CHECK(p.lr == Approx(lr));
    CHECK(p.env_frames == 20000);
  }
}

TEST_CASE("trainer core, sync/async: the chief starts a sharded checkpoint round when its interval has passed", "[trainer]") {
  config::Config cfg = Cfg("async");
  cfg.mutable_learner()->set_checkpoint_interval_s(10);
  SECTION("the chief") {
    Rig rig(cfg, 8, 0, 4s);  // the loop looks at 0, 4, ..., 28 s
    FakeCheckpoints ckpt;
    rig.trainer.links.checkpoints = &ckpt;
    rig.trainer.Run();
    // At 12 s (completed at 16 s) and at 28 s (28 - 16 > 10).
    CHECK(ckpt.rounds == 2);
    CHECK(ckpt.saves == 0);  // the shards write the parts; no learner file
  }
  SECTION("a round abandoned (a shard restarted) starts again at once") {
    Rig rig(cfg, 1, 0, 1s);
    FakeCheckpoints ckpt;
    ckpt.abandoned = true;
    rig.trainer.links.checkpoints = &ckpt;
    rig.trainer.Run();
    CHECK(ckpt.rounds == 1);
  }
  SECTION("another learner never does") {
    Rig rig(cfg, 6, 1, 4s);
    FakeCheckpoints ckpt;
    rig.trainer.links.checkpoints = &ckpt;
    rig.trainer.Run();
    CHECK(ckpt.rounds == 0);
  }
}

TEST_CASE("trainer core, allreduce: the averaged step is applied by every learner at the run's learning rate", "[trainer]") {
  config::Config cfg = Cfg("allreduce");
  cfg.mutable_learner()->set_allreduce_check_every(0);
  Rig rig(cfg, 3);
  FakeRing ring;
  rig.trainer.links.ring = &ring;
  rig.trainer.counters.frames = 4000;
  SECTION("three steps") {
    rig.trainer.Run();
    CHECK(ring.rendezvous == 1);
    CHECK(rig.books.rings == std::vector<int64_t>{1});
    CHECK(rig.trainer.counters.version == 3);
    CHECK(rig.trainer.counters.other_frames == 1000);
    CHECK(rig.trainer.params == rig.Expected(3, 5000));
    REQUIRE(rig.books.figures.size() == 3);
    CHECK(rig.books.figures[0][base::StepMetric::kLearningRate] ==
          Approx(net::ScheduledLearningRate(cfg.learner().optimizer(), cfg.stop().total_env_frames(), 5000)));
    CHECK(rig.shards.puts == std::vector<int64_t>{1, 2, 3});  // the chief publishes
  }
  SECTION("a reduction that fails drops its step and forms the ring again") {
    ring.results = {base::OkStatus(), base::Unavailable("learner 1 sent nothing for 60 s")};
    rig.trainer.Run();
    CHECK(ring.rendezvous == 2);
    CHECK(rig.trainer.counters.version == 2);
    CHECK(rig.trainer.params == rig.Expected(2, 5000));
  }
  SECTION("a skipped step still takes part, with nothing to add") {
    rig.backend->losses = {1.0, kNaN, 1.0};
    rig.trainer.Run();
    REQUIRE(ring.own.size() == 3);
    CHECK(ring.own[0].weight == 1);
    CHECK(ring.own[1].weight == 0);
    CHECK(ring.own[2].weight == 1);
    // The other learner's gradient counted on the skipped step: three steps applied.
    CHECK(rig.trainer.counters.version == 3);
  }
  SECTION("a step where no learner had a finite gradient applies nothing") {
    ring.other.weight = 0;
    rig.backend->losses = {kNaN, kNaN, kNaN};
    rig.trainer.Run();
    CHECK(rig.trainer.counters.version == 0);
    CHECK(rig.trainer.params == std::vector<float>(kParams, 0.5f));
  }
  SECTION("learners whose parameters differ end the training") {
    cfg.mutable_learner()->set_allreduce_check_every(1);
    Rig checked(cfg, 3);
    checked.trainer.links.ring = &ring;
    ring.other.fingerprint = 12345;
    checked.trainer.Run();
    REQUIRE(checked.books.failures.size() == 1);
    CHECK_THAT(checked.books.failures[0].message(), Catch::Contains("parameters differ at step 1"));
    CHECK(checked.trainer.counters.version == 0);
  }
}

TEST_CASE("trainer core: PopArt's statistics follow the step's targets and reach the books", "[trainer]") {
  config::Config cfg = Cfg("relay");
  Rig rig(cfg, 1);
  // Statistics [mean, scale] at 0..1 (fresh: 0 and 1), the value head's w [2, 1] at 2..3, b at 4.
  rig.trainer.popart = PopArtSlots{0, 2, 4, 2, 1};
  rig.trainer.params[0] = 0.f;
  rig.trainer.params[1] = 1.f;
  rig.backend->gradient = std::vector<float>(kParams, 0.f);  // the statistics move by PopArt alone
  rig.backend->targets = {1, 5, 1, 5, 1, 5};                 // mean 3, mean square 13: scale 2
  rig.trainer.Run();
  // Fresh statistics: the first batch sets them.
  CHECK(rig.trainer.params[0] == Approx(3.0));
  CHECK(rig.trainer.params[1] == Approx(2.0));
  CHECK(rig.books.popart_stats == std::vector<float>{rig.trainer.params[0], rig.trainer.params[1]});
}

TEST_CASE("trainer core: learner.threads 0 takes the machine's share while the learner bounds the fleet and a core is spare, one while it waits", "[trainer]") {
  // The rule alone: windows of 8 steps, busy below 2% waiting, waiting above 10%, kept
  // between; up only with half a core idle over the window.
  double spare = 1.0;
  int readings = 0;
  const std::function<double()> idle = [&] {
    ++readings;
    return spare;
  };
  ComputeThreads fixed(3, 8);
  CHECK(fixed.threads() == 3);
  for (int s = 0; s < 20; ++s) CHECK(fixed.Observe(s % 2 ? 5.0 : 0.0, 0.1, idle) == 3);
  ComputeThreads chooser(0, 4);
  CHECK(chooser.threads() == 1);
  auto window = [&](double waited, double step) {
    int got = 0;
    for (int s = 0; s < ComputeThreads::kWindow; ++s) got = chooser.Observe(waited, step, idle);
    return got;
  };
  // Seven steps of a window decide nothing (nor read the machine).
  readings = 0;
  for (int s = 0; s < ComputeThreads::kWindow - 1; ++s) CHECK(chooser.Observe(0, 0.1, idle) == 1);
  CHECK(readings == 0);
  CHECK(chooser.Observe(0, 0.1, idle) == 4);  // never waited, a core idle: it takes them
  CHECK(readings == 1);
  CHECK(window(0.005, 0.1) == 4);           // 4.8% waiting: between, kept
  CHECK(window(0.015, 0.1) == 1);           // 13%: it waits for data
  CHECK(window(0.005, 0.1) == 1);           // between again, kept
  spare = 0.4;                              // the actors use the machine
  CHECK(window(0.001, 0.1) == 1);           // bound, but no core to spare
  spare = 0.6;
  CHECK(window(0.001, 0.1) == 4);           // 1% waiting, a core spare
  spare = 0.0;
  CHECK(window(0.001, 0.1) == 4);           // its own threads fill the machine: kept while it is bound
  ComputeThreads one_core(0, 0);            // a machine share below one is one
  for (int s = 0; s < ComputeThreads::kWindow; ++s) CHECK(one_core.Observe(0, 0.1, idle) == 1);

  // In the loop: 4 cores shared by 2 learners, the fake machine 3 cores idle; batches that
  // are there at once (the fake clock does not move while the trainer takes them) make it
  // take 2 after 8 steps; batches it waits a second for keep it at 1.
  for (const bool waits : {false, true}) {
    DYNAMIC_SECTION((waits ? "waits" : "bounds the fleet")) {
      config::Config cfg = Cfg("relay");
      cfg.mutable_learner()->set_threads(0);
      cfg.mutable_learner()->set_num_learners(2);
      Rig rig(cfg, 12, 0, waits ? Clock::duration(1s) : Clock::duration(0));
      rig.trainer.links.cores = 4;
      rig.trainer.links.idle_cores = [] { return 3.0; };
      rig.trainer.Run();
      REQUIRE(rig.books.figures.size() == 12);
      for (size_t s = 0; s < 12; ++s) {
        INFO("step " << s);
        CHECK(rig.books.figures[s][base::StepMetric::kComputeThreads] == (!waits && s >= 8 ? 2 : 1));
      }
      CHECK(rig.backend->threads_set == (waits ? std::vector<int>{1} : std::vector<int>{1, 2}));
    }
  }
  // learner.threads 1 (the default) never asks for more.
  Rig rig(Cfg("relay"), 12, 0, Clock::duration(0));
  rig.trainer.links.cores = 4;
  rig.trainer.links.idle_cores = [] { return 3.0; };
  rig.trainer.Run();
  CHECK(rig.backend->threads_set == std::vector<int>{1});
}

TEST_CASE("base::IdleCores: the machine's idle cores between readings, fewer by the one this test keeps busy", "[trainer]") {
  base::IdleCores idle;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double since_boot = idle.Sample();
  if (since_boot < 0) stampede::testing::Skip("/proc/stat cannot be read here");
  CHECK(since_boot >= 0);
  CHECK(since_boot <= cores + 1e-9);
  // Spin this thread for 0.3 s: at most cores - 1 (with a margin for the readings'
  // clock-tick granularity) were idle meanwhile.
  const auto until = std::chrono::steady_clock::now() + 300ms;
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1.0;
  const double busy = idle.Sample();
  CHECK(busy >= 0);
  CHECK(busy <= cores - 0.5);
}
