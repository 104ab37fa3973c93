#include "tools/sweep.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "envs/python_env.h"
#include "config/config.h"

namespace stampede::tools {

namespace {

struct Axis {
  std::string field;
  std::vector<std::string> values;
};

struct RunResult {
  int point = 0, seed = 0;
  std::string dir;
  int exit_code = 0;
  double final_return = NAN, best_return = NAN, frames_per_s = 0;
  int64_t frames = 0, frames_to_target = -1;
};

base::StatusOr<Axis> ParseGrid(const std::string& g) {
  const auto eq = g.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
    return base::InvalidArgument("--grid " + g + ": expected field=v1,v2,...");
  }
  Axis axis;
  axis.field = g.substr(0, eq);
  std::stringstream ss(g.substr(eq + 1));
  for (std::string v; std::getline(ss, v, ',');) {
    if (v.empty()) return base::InvalidArgument("--grid " + g + ": an empty value");
    axis.values.push_back(v);
  }
  return axis;
}

// Final, best and frames-to-target from a run's metrics.jsonl; frames to the config's own
// target from summary.json, which has the learner's exact count (rows come every
// progress interval: hundreds of thousands of CartPole frames apart).
void ReadMetrics(RunResult* r, double target, bool has_target) {
  {
    std::ifstream summary(r->dir + "/summary.json");
    try {
      const auto s = nlohmann::json::parse(summary);
      if (has_target && s.contains("target_return") && s["target_return"].get<double>() == target &&
          s.contains("frames_to_target") && s["frames_to_target"].get<int64_t>() > 0) {
        r->frames_to_target = s["frames_to_target"].get<int64_t>();
      }
    } catch (const std::exception&) {
    }
  }
  std::ifstream in(r->dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      continue;  // a line cut by a kill
    }
    if (!row.contains("env_frames")) continue;
    const int64_t frames = row["env_frames"].get<int64_t>();
    r->frames = std::max(r->frames, frames);
    if (row.contains("elapsed_s") && row["elapsed_s"].get<double>() > 0) {
      r->frames_per_s = double(frames) / row["elapsed_s"].get<double>();
    }
    if (!row.contains("returns_counted") || row["returns_counted"].get<int64_t>() < 100) continue;
    const double ret = row["mean_return_100"].get<double>();
    r->final_return = ret;
    r->best_return = std::isnan(r->best_return) ? ret : std::max(r->best_return, ret);
    if (has_target && r->frames_to_target < 0 && ret >= target) r->frames_to_target = frames;
  }
}

std::string Fmt(double x, int digits = 2) {
  if (std::isnan(x)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string MeanStd(const std::vector<double>& v, int digits = 2) {
  std::vector<double> x;
  for (double d : v) {
    if (!std::isnan(d)) x.push_back(d);
  }
  if (x.empty()) return "-";
  double m = 0, s = 0;
  for (double d : x) m += d;
  m /= double(x.size());
  for (double d : x) s += (d - m) * (d - m);
  s = x.size() > 1 ? std::sqrt(s / double(x.size() - 1)) : 0;
  return Fmt(m, digits) + " +- " + Fmt(s, digits) + (x.size() < v.size() ? " (" + std::to_string(x.size()) + "/" + std::to_string(v.size()) + ")" : "");
}

}  // namespace

base::StatusOr<std::vector<std::vector<std::string>>> GridPoints(const std::vector<std::string>& grids) {
  std::vector<Axis> axes;
  for (const auto& g : grids) {
    ASSIGN_OR_RETURN(Axis a, ParseGrid(g));
    axes.push_back(std::move(a));
  }
  std::vector<std::vector<std::string>> points(1);
  for (const Axis& a : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points) {
      for (const auto& v : a.values) {
        auto q = p;
        q.push_back(a.field + "=" + v);
        next.push_back(q);
      }
    }
    points = next;
  }
  return points;
}

int RunSweep(const SweepOptions& opt) {
  const base::StatusOr<std::vector<std::vector<std::string>>> grid = GridPoints(opt.grids);
  if (!grid.ok()) {
    base::LogError("stampede sweep: %s\n", grid.status().message().c_str());
    return 2;
  }
  const std::vector<std::vector<std::string>>& points = *grid;
  std::vector<std::string> fields;  // the tables' columns: each grid's field
  for (const auto& g : opt.grids) fields.push_back(g.substr(0, g.find('=')));
  // Every point must make a valid config before anything runs.
  double target = opt.target;
  bool has_target = opt.target != 0;
  for (const auto& p : points) {
    std::vector<std::string> sets = opt.sets;
    sets.insert(sets.end(), p.begin(), p.end());
    LoadedConfig loaded;
    if (const base::Status st = LoadConfig(opt.config_path, sets, &loaded); !st.ok()) {
      base::LogError("stampede sweep: point %s: %s\n", p.empty() ? "(none)" : p[0].c_str(), st.message().c_str());
      return 2;
    }
    if (!has_target && loaded.config.stop().target_return() != 0) {
      target = loaded.config.stop().target_return();
      has_target = true;
    }
  }
  std::string dir = opt.dir;
  if (dir.empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    dir = "runs/sweep-" + std::filesystem::path(opt.config_path).stem().string() + "-" + stamp;
  }
  std::filesystem::create_directories(dir);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  std::vector<RunResult> runs;
  for (size_t p = 0; p < points.size(); ++p) {
    for (int s = 1; s <= opt.seeds; ++s) {
      RunResult r;
      r.point = int(p);
      r.seed = s;
      char name[64];
      std::snprintf(name, sizeof name, "p%03zu-s%d", p, s);
      r.dir = dir + "/" + name;
      runs.push_back(r);
    }
  }
  std::printf("stampede sweep: %zu points x %d seeds = %zu runs, %d at a time, in %s\n", points.size(), opt.seeds,
              runs.size(), opt.parallel, dir.c_str());
  std::map<pid_t, size_t> running;
  size_t next = 0, done = 0;
  while (done < runs.size()) {
    while (next < runs.size() && int(running.size()) < opt.parallel) {
      RunResult& r = runs[next];
      std::vector<std::string> args = {self, "run", opt.config_path, "--run-dir", r.dir};
      for (const auto& s : opt.sets) args.insert(args.end(), {"--set", s});
      for (const auto& s : points[size_t(r.point)]) args.insert(args.end(), {"--set", s});
      args.insert(args.end(), {"--set", "seed=" + std::to_string(r.seed)});
      const pid_t pid = fork();
      if (pid == 0) {
        const std::string log = r.dir + ".log";
        if (FILE* f = std::freopen(log.c_str(), "w", stdout)) dup2(fileno(f), 2);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(self.c_str(), argv.data());
        _exit(127);
      }
      running[pid] = next++;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    auto it = running.find(pid);
    if (it == running.end()) continue;
    RunResult& r = runs[it->second];
    running.erase(it);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ReadMetrics(&r, target, has_target);
    ++done;
    std::string point;
    for (const auto& s : points[size_t(r.point)]) point += s + " ";
    std::printf("  [%zu/%zu] %sseed %d: final %s, best %s, frames to %s %s, %.0f frames/s%s\n", done, runs.size(),
                point.c_str(), r.seed, Fmt(r.final_return).c_str(), Fmt(r.best_return).c_str(),
                has_target ? Fmt(target, 1).c_str() : "-",
                r.frames_to_target >= 0 ? std::to_string(r.frames_to_target).c_str() : "not reached", r.frames_per_s,
                r.exit_code ? (" (exit " + std::to_string(r.exit_code) + ", see " + r.dir + ".log)").c_str() : "");
    std::fflush(stdout);
  }

  std::ofstream csv(dir + "/sweep.csv");
  csv << "point,seed";
  for (const auto& f : fields) csv << "," << f;
  csv << ",final_return_100,best_return_100,frames_to_target,env_frames,frames_per_s,exit_code,run_dir\n";
  for (const RunResult& r : runs) {
    csv << r.point << "," << r.seed;
    for (const auto& s : points[size_t(r.point)]) csv << "," << s.substr(s.find('=') + 1);
    csv << "," << Fmt(r.final_return, 4) << "," << Fmt(r.best_return, 4) << "," << r.frames_to_target << ","
        << r.frames << "," << Fmt(r.frames_per_s, 0) << "," << r.exit_code << "," << r.dir << "\n";
  }
  std::ofstream md(dir + "/sweep.md");
  md << "# Sweep of " << opt.config_path << "\n\n" << opt.seeds << " seed(s) per point";
  if (!opt.sets.empty()) {
    md << "; every run with";
    for (const auto& s : opt.sets) md << " `" << s << "`";
  }
  md << ". Returns are 100-episode means; mean +- std over the seeds";
  if (has_target) md << "; frames to " << Fmt(target, 1) << ": mean over the seeds that reached it";
  md << ".\n\n| point |";
  for (const auto& f : fields) md << " " << f << " |";
  md << " final | best | frames to target | reached | frames/s |\n|---|";
  for (size_t i = 0; i < fields.size(); ++i) md << "---|";
  md << "---|---|---|---|---|\n";
  for (size_t p = 0; p < points.size(); ++p) {
    std::vector<double> fin, best, ftt, fps;
    int reached = 0, n = 0;
    for (const RunResult& r : runs) {
      if (r.point != int(p)) continue;
      ++n;
      fin.push_back(r.final_return);
      best.push_back(r.best_return);
      fps.push_back(r.frames_per_s);
      if (r.frames_to_target >= 0) {
        ftt.push_back(double(r.frames_to_target));
        ++reached;
      }
    }
    md << "| " << p << " |";
    for (const auto& s : points[p]) md << " " << s.substr(s.find('=') + 1) << " |";
    md << " " << MeanStd(fin) << " | " << MeanStd(best) << " | " << (ftt.empty() ? "-" : MeanStd(ftt, 0)) << " | "
       << reached << "/" << n << " | " << MeanStd(fps, 0) << " |\n";
  }
  md.close();
  csv.close();
  const std::string why = envs::PythonUnavailableReason(envs::PythonVenvPath(""));
  if (why.empty()) {
    const std::string cmd = envs::PythonVenvPath("") + "/bin/python " STAMPEDE_SOURCE_DIR "/tools/plot_sweep.py " +
                            dir + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) std::printf("stampede sweep: the plot failed (%s)\n", cmd.c_str());
  } else {
    std::printf("stampede sweep: no plot (%s)\n", why.c_str());
  }
  std::printf("stampede sweep: wrote %s/sweep.md, sweep.csv%s\n", dir.c_str(), why.empty() ? ", sweep.png" : "");
  std::ifstream show(dir + "/sweep.md");
  std::printf("%s", std::string(std::istreambuf_iterator<char>(show), {}).c_str());
  int failed = 0;
  for (const RunResult& r : runs) failed += r.exit_code != 0;
  return failed ? 1 : 0;
}

}  // namespace stampede::tools
