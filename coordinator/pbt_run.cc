#include "coordinator/pbt_run.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/durable_file.h"
#include "base/log.h"
#include "base/signals.h"
#include "config/config.h"
#include "coordinator/local_launcher.h"
#include "coordinator/pbt.h"
#include "coordinator/run.h"
#include "coordinator/tensorboard.h"
#include "learner/checkpoint.h"

namespace stampede::coordinator {

namespace fs = std::filesystem;
using Clock = PbtCore::Clock;

namespace {

std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string HyperText(const Hyper& h) {
  std::string s;
  for (const auto& [path, v] : h) s += (s.empty() ? "" : ", ") + path.substr(path.rfind('.') + 1) + " " + Num(v);
  return s;
}

nlohmann::json HyperJson(const Hyper& h) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, v] : h) j[path] = v;
  return j;
}

// One member's fleet as the shell sees it: its process and what its metrics.jsonl said.
struct MemberShell {
  std::string dir, log;
  pid_t pid = -1;
  bool stopping = false;  // SIGTERM sent for `pending`
  std::optional<PbtDecision> pending;  // an exploit waiting for the fleet's ordered stop
  size_t offset = 0;                   // metrics.jsonl bytes read
  std::string partial;                 // a line not yet whole
  int64_t frames = 0;
  std::optional<double> objective;
  int exploits = 0, restarts = 0;
  int exit_code = -1;
};

// Reads the member's new metrics rows: its frames and its objective since its last start.
void ReadRows(MemberShell* s, config::PbtObjective::Name objective, int min_episodes) {
  std::ifstream in(s->dir + "/metrics.jsonl", std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const auto size = size_t(in.tellg());
  if (size < s->offset) s->offset = 0;  // a new file
  if (size == s->offset) return;
  in.seekg(std::streamoff(s->offset));
  std::string chunk(size - s->offset, '\0');
  in.read(chunk.data(), std::streamsize(chunk.size()));
  s->offset = size;
  s->partial += chunk;
  size_t start = 0;
  for (size_t nl; (nl = s->partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const nlohmann::json row = nlohmann::json::parse(s->partial.substr(start, nl - start), nullptr, false);
    if (row.is_discarded() || !row.is_object()) continue;
    if (row.contains("env_frames") && row["env_frames"].is_number()) {
      s->frames = std::max(s->frames, row["env_frames"].get<int64_t>());
    }
    const std::string event = row.value("event", std::string());
    if (event == "start") {
      s->objective.reset();
      continue;
    }
    auto take = [&](const char* key) {
      if (row.contains(key) && row[key].is_number()) s->objective = row[key].get<double>();
    };
    switch (objective) {
      case config::PbtObjective::return_100:
        if (event.empty() && row.value("returns_counted", int64_t(0)) >= min_episodes) take("mean_return_100");
        break;
      case config::PbtObjective::normalised_mean:
        if (event.empty() && row.value("returns_counted", int64_t(0)) >= min_episodes) take("mean_normalised_score");
        break;
      case config::PbtObjective::normalised_median:
        if (event.empty() && row.value("returns_counted", int64_t(0)) >= min_episodes) take("median_normalised_score");
        break;
      case config::PbtObjective::evaluation:
        if (event == "evaluation") take("eval_return_mean");
        break;
    }
  }
  s->partial.erase(0, start);
}

// The leader's newest checkpoint with the member's own frame and step counts (and its
// version, so its own counters go on), written as the member's checkpoint. Its frames are
// those it acted, member_frames (its rows' newest), where its own checkpoint is older (a
// learner killed and restarted just before the stop leaves one): spent frames stay spent.
base::Status CopyLeaderCheckpoint(const std::string& leader_dir, const std::string& member_dir, int64_t member_frames,
                                  int64_t* version) {
  learner::CheckpointData leader;
  RETURN_IF_ERROR(learner::LoadCheckpoint(leader_dir + "/checkpoint.bin", &leader));
  const std::string own_path = member_dir + "/checkpoint.bin";
  learner::CheckpointData own;
  std::error_code ec;
  if (fs::exists(own_path, ec) && learner::LoadCheckpoint(own_path, &own).ok()) {
    leader.env_frames = std::max(own.env_frames, member_frames);
    leader.learner_steps = own.learner_steps;
    leader.version = own.version + 1;
  } else {
    leader.env_frames = member_frames;
    leader.learner_steps = 0;
  }
  *version = leader.version;
  return learner::SaveCheckpoint(own_path, leader);
}

class Population {
 public:
  Population(config::Config cfg, std::string config_path, std::vector<std::string> sets, bool resume)
      : cfg_(std::move(cfg)), config_path_(std::move(config_path)), sets_(std::move(sets)), resume_(resume),
        self_(SelfExePath()), start_(Clock::now()) {}

  int Run();

 private:
  base::Status Setup(std::vector<Hyper>* start);
  std::vector<std::string> Command(int m) const;
  void Stop(int m);
  void Lineage(nlohmann::json row);
  void StartFresh(int m);
  bool Resume(int m, const Hyper& h);
  void Carry(const PbtDecision& d);
  void OnExited(int m, int status);
  void Report(bool final_line);
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  config::Config cfg_;
  std::string config_path_;
  std::vector<std::string> sets_;
  bool resume_;
  std::string self_;
  Clock::time_point start_;
  std::string dir_;
  std::unique_ptr<PbtCore> core_;
  std::vector<MemberShell> members_;
  std::ofstream lineage_;
  TensorBoardWriter tb_;
  int given_up_ = 0;
};

base::Status Population::Setup(std::vector<Hyper>* start) {
  const auto& p = cfg_.pbt();
  const int n = p.population();
  dir_ = cfg_.run_dir();
  if (p.member_job_steps() && std::getenv("SLURM_JOB_ID") == nullptr) {
    return base::InvalidArgument("pbt.member_job_steps: members run as job steps only inside a Slurm allocation "
                                 "(stampede launch slurm); no SLURM_JOB_ID here");
  }
  std::error_code ec;
  if (!resume_ && fs::exists(dir_ + "/pbt.jsonl", ec)) {
    return base::InvalidArgument(dir_ + " already holds a population (pbt.jsonl); choose another --run-dir or "
                                 "continue it with stampede run --resume " + dir_);
  }
  fs::create_directories(dir_, ec);
  if (ec) return base::Internal("run directory " + dir_ + ": " + ec.message());
  if (!resume_) RETURN_IF_ERROR(base::WriteFileAtomically(dir_ + "/" + kPopulationConfig, ConfigToText(cfg_)));
  for (int m = 0; m < n; ++m) {
    MemberShell s;
    s.dir = dir_ + "/member-" + std::to_string(m);
    s.log = s.dir + ".log";
    members_.push_back(s);
    // The member's starting config: the population's, its own overrides; on --resume its
    // own config as it last ran.
    config::Config mc;
    if (resume_) {
      std::ifstream in(s.dir + "/config.textproto");
      if (!in) return base::InvalidArgument(s.dir + ": no config.textproto: not a member of this population");
      std::stringstream text;
      text << in.rdbuf();
      RETURN_IF_ERROR(ParseConfigText(text.str(), s.dir + "/config.textproto", &mc));
    } else {
      mc = cfg_;
      if (m < p.members_size()) {
        for (const std::string& set : p.members(m).set()) RETURN_IF_ERROR(ApplyOverride(set, &mc));
      }
    }
    Hyper h;
    for (const config::PbtField& f : p.evolve()) {
      ASSIGN_OR_RETURN(const double v, NumberAt(mc, f.path()));
      h[f.path()] = v;
    }
    start->push_back(h);
  }
  lineage_.open(dir_ + "/pbt.jsonl", std::ios::app);
  if (!lineage_) return base::Internal(dir_ + "/pbt.jsonl cannot be written");
  if (const base::Status st = tb_.Open(dir_ + "/tb"); !st.ok()) {
    base::LogWarning("stampede: WARNING: no TensorBoard scalars for the population: %s\n", st.message().c_str());
  }
  return base::OkStatus();
}

void Population::Lineage(nlohmann::json row) {
  row["elapsed_s"] = Elapsed();
  row["wall_time"] = double(std::time(nullptr));
  lineage_ << row.dump() << "\n";
  lineage_.flush();
}

// The command that starts member `m`'s `stampede run`: as a job step of the allocation
// (pbt.member_job_steps), or here.
std::vector<std::string> Population::Command(int m) const {
  if (!cfg_.pbt().member_job_steps()) return {self_};
  const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
  const int n = nodes != nullptr ? std::max(1, std::atoi(nodes)) : 1;
  return {"srun", "--nodes=1", "--ntasks=1", "--overlap", "--relative=" + std::to_string(m % n),
          "--job-name=member-" + std::to_string(m), self_};
}

// Asks member `m`'s fleet for its ordered stop: SIGTERM here; a job step's through its run
// directory (srun would cancel the step on a SIGTERM, killing the fleet before its final
// checkpoint).
void Population::Stop(int m) {
  MemberShell& s = members_[size_t(m)];
  if (s.pid <= 0) return;
  if (!cfg_.pbt().member_job_steps()) {
    ::kill(s.pid, SIGTERM);
    return;
  }
  if (const base::Status st = base::WriteFileAtomically(s.dir + "/" + kStopRequest, "stop\n"); !st.ok()) {
    base::LogWarning("stampede pbt: member %d: %s; signalling its job step instead\n", m, st.message().c_str());
    ::kill(s.pid, SIGTERM);
  }
}

void Population::StartFresh(int m) {
  MemberShell& s = members_[size_t(m)];
  std::vector<std::string> args = Command(m);
  args.insert(args.end(), {"run", config_path_, "--run-dir", s.dir});
  for (const auto& set : sets_) args.insert(args.end(), {"--set", set});
  args.insert(args.end(), {"--set", "pbt.population=0", "--set", "seed=" + std::to_string(cfg_.seed() + uint64_t(m))});
  if (m < cfg_.pbt().members_size()) {
    for (const auto& set : cfg_.pbt().members(m).set()) args.insert(args.end(), {"--set", set});
  }
  for (const auto& [path, v] : core_->hyper(m)) args.insert(args.end(), {"--set", path + "=" + Num(v)});
  s.pid = pid_t(SpawnLogged(args, s.log, {}));
  Lineage({{"event", "start"}, {"member", m}, {"frames", 0}, {"hyper", HyperJson(core_->hyper(m))}, {"pid", s.pid},
           {"job_step", cfg_.pbt().member_job_steps()}});
}

bool Population::Resume(int m, const Hyper& h) {
  MemberShell& s = members_[size_t(m)];
  std::error_code ec;
  if (!fs::exists(s.dir + "/config.textproto", ec) || !fs::exists(s.dir + "/checkpoint.bin", ec)) return false;
  std::vector<std::string> args = Command(m);
  args.insert(args.end(), {"run", "--resume", s.dir});
  for (const auto& [path, v] : h) args.insert(args.end(), {"--set", path + "=" + Num(v)});
  s.pid = pid_t(SpawnLogged(args, s.log, {}));
  s.objective.reset();
  core_->OnResumed(m, h);
  return s.pid > 0;
}

// Carries out a decision from the core.
void Population::Carry(const PbtDecision& d) {
  MemberShell& s = members_[size_t(d.member)];
  nlohmann::json row = {{"event", KindName(d.kind)}, {"member", d.member}, {"frames", d.frames},
                        {"hyper", HyperJson(d.old_hyper)}, {"why", d.why}};
  if (d.kind == PbtDecision::Kind::kKeep || d.kind == PbtDecision::Kind::kExploit) {
    row["objective"] = d.objective;
    row["rank"] = d.rank;
    row["ranked"] = d.ranked;
  }
  if (d.leader >= 0) {
    row["leader"] = d.leader;
    row["leader_objective"] = d.leader_objective;
    row["leader_frames"] = core_->frames(d.leader);
    row["new_hyper"] = HyperJson(d.new_hyper);
  }
  switch (d.kind) {
    case PbtDecision::Kind::kKeep:
      Lineage(row);
      return;
    case PbtDecision::Kind::kGiveUp:
      Lineage(row);
      ++given_up_;
      std::printf("stampede pbt: member %d given up: %s\n", d.member, d.why.c_str());
      return;
    case PbtDecision::Kind::kExploit:
      Lineage(row);
      std::printf("stampede pbt: [%7.1fs] member %d (%.2f, rank %d of %d, %.2fM frames) exploits member %d (%.2f): %s -> %s\n",
                  Elapsed(), d.member, d.objective, d.rank + 1, d.ranked, double(d.frames) / 1e6, d.leader,
                  d.leader_objective, HyperText(d.old_hyper).c_str(), HyperText(d.new_hyper).c_str());
      std::fflush(stdout);
      s.pending = d;
      s.stopping = true;
      Stop(d.member);
      return;
    case PbtDecision::Kind::kRestart:
      Lineage(row);
      ++s.restarts;
      std::printf("stampede pbt: member %d resumes from its checkpoint (%s)\n", d.member, d.why.c_str());
      std::fflush(stdout);
      if (!Resume(d.member, d.new_hyper)) Carry(core_->CannotResume(d.member, Clock::now()));
      return;
    case PbtDecision::Kind::kReplace: {
      int64_t version = 0;
      const base::Status st = CopyLeaderCheckpoint(members_[size_t(d.leader)].dir, s.dir, s.frames, &version);
      row["copied"] = st.ok();
      if (!st.ok()) row["copy_error"] = st.message();
      Lineage(row);
      std::printf("stampede pbt: member %d %s\n", d.member, d.why.c_str());
      std::fflush(stdout);
      if (!st.ok() || !Resume(d.member, d.new_hyper)) {
        Carry(core_->CannotResume(d.member, Clock::now()));
      }
      return;
    }
  }
}

void Population::OnExited(int m, int status) {
  MemberShell& s = members_[size_t(m)];
  s.pid = -1;
  ReadRows(&s, ChoiceOf<config::PbtObjective>(cfg_.pbt().objective()), cfg_.pbt().min_episodes());
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  core_->OnFigures(m, s.frames, std::nullopt);
  if (s.stopping && s.pending) {
    const PbtDecision d = *s.pending;
    s.stopping = false;
    s.pending.reset();
    if (s.frames >= cfg_.stop().total_env_frames()) {
      // Its budget was spent as it stopped: nothing left to copy into.
      Lineage({{"event", "finished"}, {"member", m}, {"frames", s.frames}, {"exit_code", s.exit_code}});
      core_->OnExit(m, true, Clock::now());
      return;
    }
    int64_t version = 0;
    const base::Status st = CopyLeaderCheckpoint(members_[size_t(d.leader)].dir, s.dir, s.frames, &version);
    // What its fleet acted between the decision and its stop trained the weights the copy
    // replaces: dropped, as a lag bound drops stale unrolls, and counted.
    nlohmann::json row = {{"event", "copied"}, {"member", m}, {"leader", d.leader}, {"frames", s.frames},
                          {"ok", st.ok()}, {"version", version}, {"dropped_frames", s.frames - d.frames}};
    if (!st.ok()) row["error"] = st.message();
    Lineage(row);
    if (st.ok()) ++s.exploits;
    // Not copied: it goes on from its own checkpoint with its own hyperparameters.
    const Hyper h = st.ok() ? d.new_hyper : d.old_hyper;
    if (!st.ok()) base::LogWarning("stampede pbt: member %d keeps its own state: %s\n", m, st.message().c_str());
    if (!Resume(m, h)) Carry(core_->CannotResume(m, Clock::now()));
    return;
  }
  if (!ok) {
    std::printf("stampede pbt: member %d's fleet exited with status %d at %.2fM frames (see %s)\n", m, s.exit_code,
                double(s.frames) / 1e6, s.log.c_str());
    std::fflush(stdout);
  }
  Lineage({{"event", ok ? "finished" : "died"}, {"member", m}, {"frames", s.frames}, {"exit_code", s.exit_code}});
  if (auto d = core_->OnExit(m, ok, Clock::now())) Carry(*d);
}

void Population::Report(bool final_line) {
  std::string line;
  for (int m = 0; m < core_->size(); ++m) {
    const auto o = members_[size_t(m)].objective;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%d: %.2fM %s", m ? " | " : "", m, double(members_[size_t(m)].frames) / 1e6,
                  o ? Num(std::round(*o * 100) / 100).c_str() : "-");
    line += buf;
  }
  std::printf("stampede pbt: [%7.1fs]%s %s\n", Elapsed(), final_line ? " final:" : "", line.c_str());
  std::fflush(stdout);
}

int Population::Run() {
  std::vector<Hyper> start;
  if (const base::Status st = Setup(&start); !st.ok()) {
    base::LogError("stampede: %s\n", st.message().c_str());
    return 2;
  }
  const auto& p = cfg_.pbt();
  core_ = std::make_unique<PbtCore>(p, start, cfg_.seed());
  const auto objective = ChoiceOf<config::PbtObjective>(p.objective());
  std::printf("stampede pbt: %d members in %s, a decision every %lld frames of each (after %lld), objective %s\n",
              p.population(), dir_.c_str(), (long long)p.interval_frames(), (long long)p.start_frames(),
              p.objective().empty() ? "return_100" : p.objective().c_str());
  for (int m = 0; m < core_->size(); ++m) {
    if (resume_) {
      ReadRows(&members_[size_t(m)], objective, p.min_episodes());
      core_->OnFigures(m, members_[size_t(m)].frames, std::nullopt);
      if (members_[size_t(m)].frames >= cfg_.stop().total_env_frames()) {
        core_->OnExit(m, true, Clock::now());
        continue;
      }
      Lineage({{"event", "resume"}, {"member", m}, {"frames", members_[size_t(m)].frames}, {"hyper", HyperJson(start[size_t(m)])}});
      if (!Resume(m, start[size_t(m)])) Carry(core_->CannotResume(m, Clock::now()));
    } else {
      StartFresh(m);
      std::printf("  member %d: %s\n", m, HyperText(core_->hyper(m)).c_str());
    }
  }
  std::fflush(stdout);
  auto last_report = Clock::now();
  bool interrupted = false;
  while (!core_->AllEnded()) {
    if (base::StopFlag().load() && !interrupted) {
      interrupted = true;
      std::printf("stampede pbt: stopping every member (signal %d); stampede run --resume %s continues them\n",
                  base::StopSignal(), dir_.c_str());
      std::fflush(stdout);
      for (int m = 0; m < core_->size(); ++m) Stop(m);
    }
    if (interrupted) {
      bool any = false;
      for (auto& s : members_) {
        if (s.pid <= 0) continue;
        int status = 0;
        if (waitpid(s.pid, &status, WNOHANG) == s.pid) s.pid = -1;
        any = any || s.pid > 0;
      }
      if (!any) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    for (int m = 0; m < core_->size(); ++m) {
      MemberShell& s = members_[size_t(m)];
      ReadRows(&s, objective, p.min_episodes());
      core_->OnFigures(m, s.frames, s.objective);
      if (s.pid > 0) {
        int status = 0;
        if (waitpid(s.pid, &status, WNOHANG) == s.pid) OnExited(m, status);
      }
    }
    for (const PbtDecision& d : core_->Decide(Clock::now())) {
      Carry(d);
      if (tb_.is_open() && (d.kind == PbtDecision::Kind::kKeep || d.kind == PbtDecision::Kind::kExploit)) {
        std::vector<std::pair<std::string, double>> scalars = {
            {"pbt/member-" + std::to_string(d.member) + "/objective", d.objective}};
        for (const auto& [path, v] : d.new_hyper) scalars.emplace_back("pbt/member-" + std::to_string(d.member) + "/" + path, v);
        tb_.WriteScalars(d.frames, double(std::time(nullptr)), scalars);
      }
    }
    if (Clock::now() - last_report > std::chrono::seconds(5)) {
      Report(false);
      last_report = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Report(true);
  nlohmann::json summary = {{"population", core_->size()}, {"interrupted", interrupted}, {"given_up", given_up_},
                            {"objective", p.objective().empty() ? "return_100" : p.objective()}};
  int best = -1;
  for (int m = 0; m < core_->size(); ++m) {
    const MemberShell& s = members_[size_t(m)];
    nlohmann::json one = {{"frames", s.frames}, {"hyper", HyperJson(core_->hyper(m))}, {"exploits", s.exploits},
                          {"restarts", s.restarts}, {"exit_code", s.exit_code}, {"finished", core_->finished(m)}};
    if (s.objective) one["objective"] = *s.objective;
    if (s.objective && (best < 0 || *s.objective > *members_[size_t(best)].objective)) best = m;
    summary["members"][std::to_string(m)] = one;
  }
  if (best >= 0) {
    summary["best_member"] = best;
    summary["best_objective"] = *members_[size_t(best)].objective;
  }
  if (const base::Status st = base::WriteFileAtomically(dir_ + "/pbt_summary.json", summary.dump(2) + "\n"); !st.ok()) {
    base::LogError("stampede pbt: %s\n", st.message().c_str());
  }
  if (best >= 0) {
    std::printf("stampede pbt: done in %.1f s; best member %d: %s %.2f (%s)\n", Elapsed(), best,
                p.objective().empty() ? "return_100" : p.objective().c_str(), *members_[size_t(best)].objective,
                HyperText(core_->hyper(best)).c_str());
  }
  std::printf("stampede pbt: lineage in %s/pbt.jsonl\n", dir_.c_str());
  std::fflush(stdout);
  return interrupted || given_up_ > 0 ? 1 : 0;
}

}  // namespace

int RunPopulation(config::Config cfg, const std::string& config_path, const std::vector<std::string>& sets,
                  bool resume) {
  Population pop(std::move(cfg), config_path, sets, resume);
  return pop.Run();
}

}  // namespace stampede::coordinator
