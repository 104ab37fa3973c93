// The one Stampede binary: `stampede run CONFIG` (the coordinator), `suite` (a run plus
// its report), `report`, `eval`, `export`, the single roles (`actor`, `learner`, `ps`)
// for launching by hand or by a cluster manager, `spec` (the env's resolved spec), `keys`
// (CURVE keys for roles started by hand), `scale` (a running fleet's actor count) and `bench`. `stampede help` lists them.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "actors/actor.h"
#include "actors/evaluate.h"
#include "actors/inference.h"
#include "base/huge_pages.h"
#include "base/log.h"
#include "base/signals.h"
#include "base/status.h"
#include "coordinator/pbt_run.h"
#include "coordinator/run.h"
#include "coordinator/spec.h"
#include "envs/env.h"
#include "learner/role.h"
#include "ps/role.h"
#include "tools/bench.h"
#include "tools/eval.h"
#include "tools/launch.h"
#include "tools/pbt_report.h"
#include "tools/report.h"
#include "tools/sweep.h"
#include "wire/auth.h"
#include "config/config.h"
#include "base/exit_codes.h"
#include "base/trace.h"

namespace {

// Loads and checks the config; the env name is checked here too (wire/ knows no envs).
bool Load(const std::string& path, const std::vector<std::string>& sets,
          stampede::LoadedConfig* out) {
  if (const stampede::base::Status st = stampede::LoadConfig(path, sets, out); !st.ok()) {
    stampede::base::LogError("%s\n", st.message().c_str());
    return false;
  }
  const auto names = stampede::envs::RegisteredEnvs();
  auto check = [&](const stampede::config::EnvConfig& env, const std::string& path) {
    if (!env.plugin().empty() || !env.gym_id().empty()) return true;
    if (std::find(names.begin(), names.end(), env.name()) != names.end()) return true;
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    stampede::base::LogError("%s: %s: unknown environment \"%s\", expected one of: %s\n",
                 out->Where(path).c_str(), path.c_str(), env.name().c_str(), known.c_str());
    return false;
  };
  if (out->config.tasks_size() == 0) return check(out->config.env(), "env.name");
  for (int t = 0; t < out->config.tasks_size(); ++t) {
    if (!check(out->config.tasks(t).env(), "tasks[" + std::to_string(t) + "].env.name")) return false;
  }
  return true;
}

bool NeedsEndpoints(const stampede::config::Config& cfg, const char* role) {
  if (!cfg.cluster().learner().empty() && cfg.cluster().ps_size() > 0) return true;
  stampede::base::LogError("stampede %s: cluster.learner and cluster.ps must be set in the config "
               "(`stampede run` fills them in RUN_DIR/config.textproto)\n",
               role);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else (the exec replaces the process): malloc asks for huge pages.
  stampede::base::ReexecWithHugePages(argv);
  // First thing: a SIGTERM or Ctrl-C that arrives during start-up still means "stop
  // cleanly", never the default abrupt death.
  stampede::base::InstallStopHandlers();
  // A write past a file-size limit (ulimit -f, a quota) fails with EFBIG and is
  // reported like a full disk, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Stampede: IMPALA-style distributed reinforcement learning"};
  app.require_subcommand(1);
  app.add_subcommand("help", "List the subcommands (`stampede SUBCOMMAND --help` for one's options)");
  std::string config_path;
  std::vector<std::string> sets;
  int task_index = 0;
  int restarts = 0;

  auto* run = app.add_subcommand("run", "Start and supervise a whole fleet from one config");
  run->add_option("config", config_path, "Config file (protobuf text format)");
  std::string resume_dir;
  run->add_option("--resume", resume_dir,
                  "Continue the stopped run in this directory from its newest complete checkpoint (its "
                  "config.textproto; --set may raise the budget)");
  std::string run_dir;
  run->add_option("--run-dir", run_dir, "Run directory (same as --set run_dir=...)");
  bool trace = false;
  run->add_flag("--trace", trace, "Write a Chrome/Perfetto timeline of every process to RUN_DIR/trace.json "
                                  "(same as --set trace=true)");

  auto* coordinator = app.add_subcommand(
      "coordinator", "Run only the coordinator (status, progress, metrics, budget, stop) for processes started "
                     "elsewhere, by hand or by a cluster scheduler; every cluster endpoint must be set");
  coordinator->add_option("config", config_path, "Config file with every cluster endpoint")->required();
  coordinator->add_option("--run-dir", run_dir, "Run directory (same as --set run_dir=...)");
  coordinator->add_flag("--trace", trace, "Processes write Chrome/Perfetto timelines (RUN_DIR/trace)");

  auto* suite = app.add_subcommand("suite", "Run a multi-task config to its budget, then write its report "
                                             "(report.md, report.csv, report.png) into the run directory");
  suite->add_option("config", config_path, "Config file with tasks { ... }")->required();
  suite->add_option("--run-dir", run_dir, "Run directory (same as --set run_dir=...)");
  suite->add_flag("--trace", trace, "Write a Chrome/Perfetto timeline (RUN_DIR/trace.json)");

  std::string report_dir;
  auto* report = app.add_subcommand("report", "Make report.md, report.csv and report.png of a finished or "
                                              "interrupted run from its metrics.jsonl");
  report->add_option("run_dir", report_dir, "The run directory")->required();

  stampede::tools::EvalOptions eval_opt;
  auto* eval = app.add_subcommand("eval", "Run a checkpoint's policy without learning; print per-task mean +- std return");
  eval->add_option("checkpoint", eval_opt.checkpoint, "RUN_DIR/checkpoint.bin")->required();
  eval->add_option("--config", eval_opt.config, "The run's config (default: config.textproto beside the checkpoint)");
  eval->add_option("--task", eval_opt.task, "Only this task (default: every task)");
  eval->add_option("--episodes", eval_opt.episodes, "Episodes per task")->default_val(10)->check(CLI::Range(1, 1000000));
  eval->add_flag("--greedy", eval_opt.greedy, "Take the most likely action instead of sampling");
  eval->add_option("--record", eval_opt.record, "Save the first episode as an animated GIF (image observations)");
  eval->add_option("--seed", eval_opt.seed, "Seed of the envs and the sampling")->default_val(12345);
  eval->add_option("--max-steps", eval_opt.max_steps,
                   "End an episode after this many agent steps (counted as such in the output)")
      ->default_val(10000)->check(CLI::Range(1, 100000000));

  std::string export_ckpt, export_out, export_config;
  auto* exporter = app.add_subcommand("export", "Write a checkpoint's policy as ONNX (OUT.onnx) or its tensors, named by the network's layout, as a numpy .npz (OUT.npz)");
  exporter->add_option("checkpoint", export_ckpt, "RUN_DIR/checkpoint.bin")->required();
  exporter->add_option("out", export_out, "Output: .onnx or .npz")->required();
  exporter->add_option("--config", export_config, "The run's config (default: config.textproto beside the checkpoint)");

  auto* checkpoints = app.add_subcommand(
      "checkpoints", "Print the newest complete checkpoint of a run directory (what --resume continues from); "
                     "exit 1 if there is none or a newer one is incomplete");
  std::string checkpoints_dir;
  checkpoints->add_option("run_dir", checkpoints_dir, "The run directory")->required();

  auto* scale = app.add_subcommand(
      "scale", "Change a running fleet's actor count (`stampede run` or `stampede coordinator`): new actors start "
               "(with keys made for them), removed ones (the highest indices) send the unroll they hold and stop");
  std::string scale_dir;
  int scale_actors = 0;
  double scale_timeout = 10;
  scale->add_option("run_dir", scale_dir, "The running run's directory")->required();
  scale->add_option("--actors", scale_actors, "The actor count to go to")->required()->check(CLI::Range(1, 1024));
  scale->add_option("--timeout", scale_timeout, "Seconds to wait for the coordinator's answer")
      ->default_val(10.0)->check(CLI::Range(0.1, 3600.0));

  auto* ps_plan = app.add_subcommand("ps-plan", "Print where the network's tensors go on the PS shards "
                                                "(ps.placement), bytes per shard and the imbalance");
  ps_plan->add_option("config", config_path, "Config file (protobuf text format)")->required();

  auto* spec = app.add_subcommand("spec", "Print the env's resolved spec (what `run` writes into the config)");
  spec->add_option("config", config_path, "Config file (protobuf text format)")->required();

  auto* show_config = app.add_subcommand(
      "config", "Print the whole config as the run takes it: presets (env.atari: the Atari protocol and recipe) "
                "applied and every field written out, its default where the config leaves it unset");
  show_config->add_option("config", config_path, "Config file (protobuf text format)")->required();

  auto* keys = app.add_subcommand(
      "keys", "Make the CURVE keys of every process the config implies, for roles started by hand "
              "(set cluster.keys_dir to the directory on every host)");
  keys->add_option("config", config_path, "Config file (protobuf text format)")->required();
  std::string keys_dir;
  keys->add_option("dir", keys_dir, "Directory to write the keys into (made mode 0700)")->required();

  std::vector<CLI::App*> roles;
  for (const char* role : {"actor", "learner", "ps", "evaluator"}) {
    auto* sub = app.add_subcommand(role, std::string("Run one ") + role + " process");
    sub->add_option("--config", config_path, "Config file")->required();
    sub->add_option("--task-index", task_index, "Index of this process within its role")
        ->default_val(0);
    sub->add_option("--restarts", restarts, "Times this process was restarted after dying (the coordinator sets it)")
        ->default_val(0)->check(CLI::Range(0, 1000000));
    roles.push_back(sub);
  }
  auto* bench = app.add_subcommand("bench", "Measure env, actor and fleet throughput");
  stampede::tools::BenchOptions bench_opt;
  bench->add_option("--config", bench_opt.config_path, "Config for the fleet benchmark")
      ->default_val("configs/cartpole.textproto");
  bench->add_option("--seconds", bench_opt.seconds, "Seconds per micro-benchmark")->default_val(2.0);
  bench->add_flag("--networks", bench_opt.networks,
                  "Measure every network's CPU inference and learner step instead");
  bench->add_flag("--gpu", bench_opt.gpu, "Measure the CUDA learner step instead");
  bench->add_flag("--broadcast", bench_opt.broadcast,
                  "Measure how long 16 clients take to fetch a 1M- and 10M-parameter version from 1, 2, 4 PS shards");
  bench->add_flag("--minatar", bench_opt.minatar,
                  "Measure the C++ MinAtar games' steps/s against the minatar package's instead");
  bench->add_flag("--allreduce", bench_opt.allreduce,
                  "Measure the learners' ring-allreduce alone (2-4 learners, 1M and 10M floats) against ZeroMQ's loopback bandwidth");
  bench->add_flag("--gemm", bench_opt.gemm,
                  "Measure float32 GEMM GFLOP/s on one thread for Eigen, OpenBLAS and BLIS (where installed) instead");
  bench->add_option("--copies", bench_opt.copies,
                    "Run the env, actor and learner parts in N processes at once, timed together; print the mean "
                    "per process (a part's speed with N cores busy)")
      ->default_val(1)->check(CLI::Range(1, 256));
  bench->add_option("--fleet-frames", bench_opt.fleet_frames,
                    "Frame budget of the end-to-end fleet run (0 skips it)")
      ->default_val(1000000);
  stampede::tools::SweepOptions sweep_opt;
  auto* sweep = app.add_subcommand("sweep", "Run every point of a grid of config values (x seeds), each a normal run "
                                            "under one sweep directory; write sweep.md, sweep.csv and sweep.png");
  sweep->add_option("config", sweep_opt.config_path, "Config file")->required();
  sweep->add_option("--grid", sweep_opt.grids, "field=v1,v2,... (repeatable: the grid is the product)")
      ->allow_extra_args(false);
  sweep->add_option("--seeds", sweep_opt.seeds, "Seeds per point (seed = 1..N)")->default_val(1)->check(CLI::Range(1, 1000));
  sweep->add_option("--parallel", sweep_opt.parallel, "Runs at a time")->default_val(1)->check(CLI::Range(1, 256));
  sweep->add_option("--dir", sweep_opt.dir, "Sweep directory (default runs/sweep-CONFIG-TIME)");
  sweep->add_option("--target", sweep_opt.target, "Return for 'frames to target' (default: stop.target_return)");
  auto* launch = app.add_subcommand("launch", "Write (and submit) a cluster job for a config: `launch slurm`");
  launch->require_subcommand(1);
  stampede::tools::SlurmLaunchOptions slurm_opt;
  auto* slurm = launch->add_subcommand(
      "slurm", "Write RUN_DIR/job.sbatch, a heterogeneous Slurm job (coordinator, PS and learners on one node; "
               "actors on --actor-nodes x --actors-per-node); --submit runs sbatch");
  slurm->add_option("config", slurm_opt.config_path, "Config file")->required();
  slurm->add_option("--run-dir", slurm_opt.run_dir, "The job's run directory (shared by every node)")->required();
  slurm->add_option("--actor-nodes", slurm_opt.actor_nodes, "Nodes for the actors")->default_val(1)->check(CLI::Range(1, 100000));
  slurm->add_option("--actors-per-node", slurm_opt.actors_per_node, "Actor processes per actor node")
      ->default_val(2)->check(CLI::Range(1, 4096));
  slurm->add_option("--partition", slurm_opt.partition, "Slurm partition");
  slurm->add_option("--time", slurm_opt.time, "Time limit (Slurm's syntax, e.g. 4:00:00)");
  slurm->add_option("--learner-gres", slurm_opt.learner_gres, "GRES for the learner's node, e.g. gpu:1");
  slurm->add_option("--learner-constraint", slurm_opt.learner_constraint, "Node feature for the learner's node");
  slurm->add_option("--actor-constraint", slurm_opt.actor_constraint, "Node feature for the actors' nodes");
  slurm->add_option("--sweep-grid", slurm_opt.sweep_grids,
                    "field=v1,v2,... (repeatable): a job array, one grid point per task, each in RUN_DIR/pNNN")
      ->allow_extra_args(false);
  slurm->add_flag("--requeue", slurm_opt.requeue, "Requeue on preemption or node failure; the job resumes from its newest checkpoint");
  slurm->add_flag("--submit", slurm_opt.submit, "Run sbatch and print the job id");
  stampede::tools::K8sLaunchOptions k8s_opt;
  auto* k8s = launch->add_subcommand("k8s", "Write Kubernetes manifests for the fleet into --out DIR (kubectl apply -f DIR)");
  k8s->add_option("config", k8s_opt.config_path, "Config file")->required();
  k8s->add_option("--out", k8s_opt.out_dir, "Directory for the manifests")->required();
  k8s->add_option("--namespace", k8s_opt.ns, "Namespace")->default_val("default");
  k8s->add_option("--image", k8s_opt.image, "Container image with stampede on PATH")->default_val("stampede:latest");
  k8s->add_option("--name", k8s_opt.name, "Prefix of every object (default stampede-CONFIG)");
  k8s->add_option("--actors", k8s_opt.actors, "Actor pods (default: actors.num_actors)")->check(CLI::Range(1, 100000));
  k8s->add_option("--max-actors", k8s_opt.max_actors,
                  "Make keys for this many actors, so that the actor Job can be scaled up to it during the run "
                  "(kubectl patch its parallelism and completions; default: --actors)")
      ->check(CLI::Range(1, 1024));
  k8s->add_option("--learner-gpus", k8s_opt.learner_gpus, "nvidia.com/gpu per learner pod (and learner.device cuda: each learner on its pod's GPU)")
      ->default_val(0)->check(CLI::Range(0, 64));
  k8s->add_option("--storage", k8s_opt.storage, "Size of the run directory's ReadWriteMany claim")->default_val("10Gi");
  k8s->add_option("--storage-class", k8s_opt.storage_class, "Storage class of that claim (default: the cluster's)");
  k8s->add_option("--keys-dir", k8s_opt.keys_dir, "Use these CURVE keys (stampede keys) instead of fresh ones");
  for (auto* sub : {run, coordinator, suite, ps_plan, spec, show_config, keys, roles[0], roles[1], roles[2], bench, sweep, slurm, k8s}) {
    // One value per --set, so `--set a=1 CONFIG` leaves CONFIG to the positional.
    sub->add_option("--set", sets, "Override a config field: path=value (repeatable)")
        ->allow_extra_args(false);
  }
  // `stampede help`, and an unknown subcommand: say which exist.
  auto list = [&](std::FILE* out) {
    std::fprintf(out, "stampede subcommands:\n");
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      std::fprintf(out, "  %-8s %s\n", sub->get_name().c_str(), sub->get_description().c_str());
    }
    std::fprintf(out, "`stampede SUBCOMMAND --help` shows a subcommand's options.\n");
  };
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string name = argv[1];
    if (name == "help") {
      list(stdout);
      return 0;
    }
    bool known = false;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->get_name() == name;
    if (!known) {
      stampede::base::LogError("stampede: unknown subcommand \"%s\"\n", name.c_str());
      list(stderr);
      return 2;
    }
  }
  CLI11_PARSE(app, argc, argv);

  if (trace) sets.push_back("trace=true");
  if (run->parsed()) {
    stampede::coordinator::RunOptions opt;
    if (!resume_dir.empty()) {
      if (!config_path.empty() || !run_dir.empty()) {
        stampede::base::LogError("stampede run: --resume RUN_DIR takes the run's own config.textproto and directory; "
                             "give no CONFIG or --run-dir with it\n");
        return 2;
      }
      if (std::filesystem::exists(resume_dir + "/" + stampede::coordinator::kPopulationConfig)) {
        // A population: every member resumes from its own directory.
        stampede::LoadedConfig loaded;
        sets.push_back("run_dir=" + resume_dir);
        if (!Load(resume_dir + "/" + stampede::coordinator::kPopulationConfig, sets, &loaded)) return 2;
        const int code = stampede::coordinator::RunPopulation(loaded.config, loaded.source, sets, true);
        if (code != 2) stampede::tools::RunPbtReport(resume_dir);  // a missing plot says why; the run's code stands
        return code;
      }
      config_path = resume_dir + "/config.textproto";
      run_dir = resume_dir;
      opt.resume = true;
      // The stopped run's loopback endpoints go (the resumed run picks fresh ones), before
      // the user's --set: another ps.num_shards must not be checked against the old list.
      const std::vector<std::string> fresh = {"cluster.coordinator=", "cluster.control=", "cluster.learner=",
                                              "cluster.learners=",    "cluster.ps=",      "cluster.inference=",
                                              "cluster.allreduce="};
      sets.insert(sets.begin(), fresh.begin(), fresh.end());
    } else if (config_path.empty()) {
      stampede::base::LogError("stampede run: a CONFIG (or --resume RUN_DIR) is required\n");
      return 2;
    }
    if (!run_dir.empty()) sets.push_back("run_dir=" + run_dir);
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    if (loaded.config.pbt().population() > 0 && !opt.resume) {
      std::vector<std::string> member_sets = sets;
      if (!run_dir.empty()) member_sets.pop_back();  // each member's directory is its own
      if (loaded.config.run_dir().empty()) {
        loaded.config.set_run_dir(
            stampede::coordinator::DefaultRunDir("pbt-" + std::filesystem::path(config_path).stem().string()));
      }
      const int code = stampede::coordinator::RunPopulation(loaded.config, config_path, member_sets, false);
      if (code != 2) stampede::tools::RunPbtReport(loaded.config.run_dir());  // a missing plot says why; the run's code stands
      return code;
    }
    opt.config_name = std::filesystem::path(config_path).stem().string();
    return stampede::coordinator::RunCoordinator(loaded.config, opt).exit_code;
  }
  if (coordinator->parsed()) {
    if (!run_dir.empty()) sets.push_back("run_dir=" + run_dir);
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    const auto& cl = loaded.config.cluster();
    std::string missing;
    if (cl.coordinator().empty()) missing += " cluster.coordinator";
    if (cl.control().empty()) missing += " cluster.control";
    if (stampede::LearnerEndpoint(loaded.config, 0).empty() ||
        (loaded.config.learner().num_learners() > 1 && cl.learners_size() == 0)) {
      missing += loaded.config.learner().num_learners() > 1 ? " cluster.learners" : " cluster.learner";
    }
    if (cl.ps_size() == 0) missing += " cluster.ps";
    if (loaded.config.run_dir().empty()) missing += " run_dir";
    if (!missing.empty()) {
      stampede::base::LogError("stampede coordinator: %s: the processes started elsewhere need fixed endpoints and a run "
                           "directory; not set:%s\n", config_path.c_str(), missing.c_str());
      return 2;
    }
    stampede::coordinator::RunOptions opt;
    opt.standalone = true;
    opt.config_name = std::filesystem::path(config_path).stem().string();
    return stampede::coordinator::RunCoordinator(loaded.config, opt).exit_code;
  }
  if (suite->parsed()) {
    if (!run_dir.empty()) sets.push_back("run_dir=" + run_dir);
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    stampede::coordinator::RunOptions opt;
    opt.config_name = std::filesystem::path(config_path).stem().string();
    const auto result = stampede::coordinator::RunCoordinator(loaded.config, opt);
    if (result.run_dir.empty()) return result.exit_code;
    const int report_code = stampede::tools::RunReportCommand(result.run_dir);
    return result.exit_code != 0 ? result.exit_code : report_code;
  }
  if (report->parsed()) {
    if (std::filesystem::exists(report_dir + "/pbt.jsonl")) return stampede::tools::RunPbtReport(report_dir);
    return stampede::tools::RunReportCommand(report_dir);
  }
  if (checkpoints->parsed()) {
    stampede::LoadedConfig loaded;
    if (!Load(checkpoints_dir + "/config.textproto", {"run_dir=" + checkpoints_dir}, &loaded)) return 2;
    return stampede::coordinator::RunCheckpointsCommand(loaded.config);
  }
  if (scale->parsed()) return stampede::coordinator::RunScaleCommand(scale_dir, scale_actors, scale_timeout);
  if (ps_plan->parsed()) {
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    return stampede::coordinator::RunPsPlanCommand(loaded.config);
  }
  if (eval->parsed()) return stampede::tools::RunEvalCommand(eval_opt, stampede::coordinator::SelfExePath());
  if (exporter->parsed()) return stampede::tools::RunExportCommand(export_ckpt, export_out, export_config);
  if (spec->parsed()) {
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    return stampede::coordinator::RunSpecCommand(loaded.config);
  }
  if (show_config->parsed()) {
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    std::printf("# %s as the run takes it (stampede config)\n%s", config_path.c_str(),
                stampede::ResolvedConfigText(loaded.config).c_str());
    return 0;
  }
  if (keys->parsed()) {
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    const auto ids = stampede::wire::RunIdentities(loaded.config);
    if (const stampede::base::Status made = stampede::wire::GenerateKeys(keys_dir, ids); !made.ok()) {
      stampede::base::LogError("stampede keys: %s\n", made.message().c_str());
      return 2;
    }
    std::printf("stampede keys: %zu keypairs in %s (", ids.size(), keys_dir.c_str());
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%s", i ? ", " : "", ids[i].c_str());
    std::printf(")\nEach host needs the .pub files and the .key files of the processes it runs.\n");
    return 0;
  }
  if (k8s->parsed()) {
    k8s_opt.sets = sets;
    return stampede::tools::LaunchK8s(k8s_opt);
  }
  if (slurm->parsed()) {
    slurm_opt.sets = sets;
    return stampede::tools::LaunchSlurm(slurm_opt);
  }
  if (sweep->parsed()) {
    sweep_opt.sets = sets;
    return stampede::tools::RunSweep(sweep_opt);
  }
  if (bench->parsed()) {
    bench_opt.sets = sets;
    if (bench_opt.networks) return stampede::tools::RunNetworkBench(bench_opt);
    if (bench_opt.gpu) return stampede::tools::RunGpuBench(bench_opt);
    if (bench_opt.broadcast) return stampede::tools::RunBroadcastBench(bench_opt);
    if (bench_opt.minatar) return stampede::tools::RunMinAtarBench(bench_opt);
    if (bench_opt.gemm) return stampede::tools::RunGemmBench(bench_opt);
    if (bench_opt.allreduce) return stampede::tools::RunAllreduceBench(bench_opt);
    return stampede::tools::RunBench(bench_opt);
  }
  for (auto* sub : roles) {
    if (!sub->parsed()) continue;
    stampede::LoadedConfig loaded;
    if (!Load(config_path, sets, &loaded)) return 2;
    const std::string role = sub->get_name();
    stampede::base::SetLogRole(role + " " + std::to_string(task_index));
    if (!NeedsEndpoints(loaded.config, role.c_str())) return 2;
    if (!loaded.config.run_dir().empty()) {
      // Started by hand on a host of its own: the run directory it writes to is made here.
      std::error_code ec;
      std::filesystem::create_directories(loaded.config.run_dir(), ec);
      if (ec) {
        stampede::base::LogError("stampede %s: cannot create the run directory %s: %s\n", role.c_str(),
                     loaded.config.run_dir().c_str(), ec.message().c_str());
        return 2;
      }
    }
    if (loaded.config.trace() && !loaded.config.run_dir().empty()) {
      const std::string again = restarts > 0 ? "-r" + std::to_string(restarts) : "";
      const stampede::base::Status traced = stampede::base::Trace::Open(
          loaded.config.run_dir() + "/trace/" + role + "-" + std::to_string(task_index) + again + ".json",
          role + " " + std::to_string(task_index));
      if (!traced.ok()) stampede::base::LogError("stampede %s: %s\n", role.c_str(), traced.message().c_str());
    }
    // The role's Status becomes the exit code here and only here (base::ExitCode); a failure
    // is said once, named after the role.
    auto exit_with = [&](const stampede::base::Status& status) {
      if (!status.ok()) stampede::base::LogError("%s %d: %s\n", role.c_str(), task_index, status.message().c_str());
      return stampede::base::ExitCode(status);
    };
    if (role == "actor") return exit_with(stampede::actors::RunActor(loaded.config, task_index, stampede::base::StopFlag()));
    if (role == "evaluator") {
      if (loaded.config.evaluation().interval_frames() <= 0) {
        stampede::base::LogError("stampede evaluator: the config has no evaluation (evaluation.interval_frames is 0)\n");
        return 2;
      }
      return exit_with(stampede::actors::RunEvaluator(loaded.config, task_index, stampede::base::StopFlag()));
    }
    if (role == "learner") {
      // actors.inference "central": this learner's actors act through a server on a
      // thread of this process (SEED RL's learner-side inference).
      std::optional<stampede::actors::InferenceServer> inference;
      if (stampede::InferenceOf(loaded.config) == stampede::config::Inference::central) {
        inference.emplace(loaded.config, task_index, stampede::base::StopFlag());
        if (const stampede::base::Status st = inference->Start(); !st.ok()) {
          return exit_with(stampede::base::InvalidArgument(st.message()));
        }
      }
      const stampede::base::Status status =
          stampede::learner::RunLearnerRole(loaded.config, task_index, restarts, stampede::base::StopFlag());
      if (inference) {
        inference->Stop();
        const int64_t batches = inference->batches();
        stampede::base::LogError("learner %d: inference server: %lld batches, %.1f envs per batch, %lld requests refused\n",
                     task_index, (long long)batches, batches > 0 ? double(inference->envs()) / double(batches) : 0.0,
                     (long long)inference->errors());
      }
      return exit_with(status);
    }
    return exit_with(stampede::ps::RunPsRole(loaded.config, task_index, restarts, stampede::base::StopFlag()));
  }
  return 2;
}
