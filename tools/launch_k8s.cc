// `stampede launch k8s`: the manifests (tools/launch.h says what each object is).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "coordinator/run.h"
#include "tools/launch.h"
#include "coordinator/spec.h"
#include "wire/auth.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "config/tasks.h"

namespace stampede::tools {

namespace fs = std::filesystem;

namespace {

constexpr int kStatusPort = 5000, kControlPort = 5001, kLearnerPort = 5100, kPsPort = 5200, kInferencePort = 5300,
              kAllreducePort = 5400;
constexpr const char* kConfigDir = "/stampede/config";
constexpr const char* kKeysDir = "/stampede/keys";
constexpr const char* kRunDir = "/stampede/run";

std::string Base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A DNS-1123 label from `s` (lower case, digits, '-'; at most 40 characters, leaving room
// for the suffixes).
std::string Label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 40) out.resize(40);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

// `s` as a YAML double-quoted scalar.
std::string DoubleQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Writer {
  std::string name, ns, image;

  std::string Labels(const std::string& role, int indent) const {
    const std::string pad(size_t(indent), ' ');
    return pad + "app.kubernetes.io/name: stampede\n" + pad + "app.kubernetes.io/instance: " + name + "\n" + pad +
           "app.kubernetes.io/component: " + role + "\n";
  }
  std::string Meta(const std::string& object, const std::string& role) const {
    return "metadata:\n  name: " + object + "\n  namespace: " + ns + "\n  labels:\n" + Labels(role, 4);
  }
  // The pod template's spec (indented under `template:`): one container running `args`
  // through a shell (for the task index), its ports, resources and the three volumes.
  std::string PodSpec(const std::string& role, const std::string& command, const std::string& index_env,
                      const std::string& restart_policy, const std::vector<std::pair<std::string, int>>& ports,
                      const std::string& cpu, const std::string& memory, int gpus, const std::string& extra) const {
    std::ostringstream s;
    s << "    metadata:\n      labels:\n" << Labels(role, 8);
    s << "    spec:\n";
    s << extra;
    s << "      restartPolicy: " << restart_policy << "\n";
    s << "      containers:\n";
    s << "        - name: " << role << "\n";
    s << "          image: " << image << "\n";
    s << "          command: [\"/bin/sh\", \"-c\"]\n";
    s << "          args:\n            - " << DoubleQuoted(command) << "\n";
    if (!index_env.empty()) {
      s << "          env:\n            - name: STAMPEDE_TASK_INDEX\n              valueFrom:\n"
        << "                fieldRef:\n                  fieldPath: " << index_env << "\n";
    }
    if (!ports.empty()) {
      s << "          ports:\n";
      for (const auto& [port_name, port] : ports) {
        s << "            - name: " << port_name << "\n              containerPort: " << port << "\n";
      }
    }
    s << "          resources:\n            requests:\n              cpu: \"" << cpu << "\"\n              memory: "
      << memory << "\n";
    if (gpus > 0) s << "            limits:\n              nvidia.com/gpu: " << gpus << "\n";
    s << "          volumeMounts:\n"
      << "            - name: config\n              mountPath: " << kConfigDir << "\n              readOnly: true\n"
      << "            - name: keys\n              mountPath: " << kKeysDir << "\n              readOnly: true\n"
      << "            - name: run\n              mountPath: " << kRunDir << "\n";
    s << "      volumes:\n"
      << "        - name: config\n          configMap:\n            name: " << name << "-config\n"
      << "        - name: keys\n          secret:\n            secretName: " << name << "-keys\n            defaultMode: 0400\n"
      << "        - name: run\n          persistentVolumeClaim:\n            claimName: " << name << "-run\n";
    return s.str();
  }
  std::string HeadlessService(const std::string& role, const std::vector<std::pair<std::string, int>>& ports) const {
    std::ostringstream s;
    s << "apiVersion: v1\nkind: Service\n" << Meta(name + "-" + role, role);
    s << "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n" << Labels(role, 4);
    s << "  ports:\n";
    for (const auto& [port_name, port] : ports) {
      s << "    - name: " << port_name << "\n      port: " << port << "\n      targetPort: " << port << "\n";
    }
    return s.str();
  }
};

std::string Memory(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + "Mi"; }

}  // namespace

base::Status K8sManifests(const K8sLaunchOptions& opt, std::vector<std::pair<std::string, std::string>>* files) {
  std::vector<std::string> sets = opt.sets;
  if (opt.actors > 0) sets.push_back("actors.num_actors=" + std::to_string(opt.actors));
  LoadedConfig loaded;
  if (const base::Status st = LoadConfig(opt.config_path, sets, &loaded); !st.ok()) {
    return base::InvalidArgument(st.message());
  }
  if (loaded.config.pbt().population() > 0) {
    return base::InvalidArgument(opt.config_path + ": pbt.population " + std::to_string(loaded.config.pbt().population()) +
                               ": the Kubernetes manifests hold one fleet, not a population (run it with stampede run, "
                               "or under Slurm with stampede launch slurm)");
  }
  if (opt.learner_gpus < 0) {
    return base::InvalidArgument("--learner-gpus must be 0 or more");
  }
  if (opt.max_actors > config::kMaxActors) {
    return base::InvalidArgument("--max-actors " + std::to_string(opt.max_actors) + " is above the most a run takes (" +
             std::to_string(config::kMaxActors) + ")");
  }
  config::Config cfg = loaded.config;
  Writer w;
  w.name = opt.name.empty() ? Label("stampede-" + fs::path(opt.config_path).stem().string()) : Label(opt.name);
  w.ns = Label(opt.ns);
  w.image = opt.image;
  if (w.name.empty() || w.ns.empty() || opt.image.empty()) {
    return base::InvalidArgument("--name, --namespace and --image must not be empty");
  }
  // Each learner pod gets its own GPUs; learner.device "cuda" puts the learner on its pod's
  // GPU (learner i on GPU i mod the GPUs the pod sees: the first, with one per pod).
  if (opt.learner_gpus > 0) cfg.mutable_learner()->set_device("cuda");
  // The spec the actors' env has, resolved here, so every pod reads one finished config.
  if (const base::Status resolved = coordinator::ResolveEnvSpec(coordinator::SelfExePath(), &cfg); !resolved.ok()) {
    return base::InvalidArgument(resolved.message());
  }
  const std::string domain = "." + w.ns + ".svc.cluster.local";
  auto* cl = cfg.mutable_cluster();
  cl->clear_ps();
  cl->clear_learners();
  cl->clear_inference();
  cl->clear_allreduce();
  cl->set_coordinator("tcp://" + w.name + "-coordinator" + domain + ":" + std::to_string(kStatusPort));
  cl->set_control("tcp://" + w.name + "-coordinator" + domain + ":" + std::to_string(kControlPort));
  const int learners = cfg.learner().num_learners(), shards = cfg.ps().num_shards(), actors = cfg.actors().num_actors();
  for (int l = 0; l < learners; ++l) {
    const std::string ep = "tcp://" + w.name + "-learner-" + std::to_string(l) + "." + w.name + "-learner" + domain +
                           ":" + std::to_string(kLearnerPort);
    if (learners > 1) cl->add_learners(ep);
    if (l == 0) cl->set_learner(ep);
    if (InferenceOf(cfg) == config::Inference::central) {
      cl->add_inference("tcp://" + w.name + "-learner-" + std::to_string(l) + "." + w.name + "-learner" + domain + ":" +
                        std::to_string(kInferencePort));
    }
    if (UpdateModeOf(cfg) == config::UpdateMode::allreduce) {
      cl->add_allreduce("tcp://" + w.name + "-learner-" + std::to_string(l) + "." + w.name + "-learner" + domain + ":" +
                        std::to_string(kAllreducePort));
    }
  }
  for (int s = 0; s < shards; ++s) {
    cl->add_ps("tcp://" + w.name + "-ps-" + std::to_string(s) + "." + w.name + "-ps" + domain + ":" +
               std::to_string(kPsPort));
  }
  cl->set_bind_any(true);
  cl->set_launcher("local");
  cl->set_keys_dir(kKeysDir);
  cfg.set_run_dir(kRunDir);

  // The keys: made afresh into a scratch directory (or taken from --keys-dir), for every
  // process and for actors up to --max-actors (the actor Job scaled up later).
  std::vector<std::string> identities = wire::RunIdentities(cfg);
  for (int a = actors; a < opt.max_actors; ++a) identities.push_back(wire::Identity("actor", a));
  std::string keys_dir = opt.keys_dir;
  std::string scratch;
  if (cl->curve() && keys_dir.empty()) {
    scratch = (fs::temp_directory_path() / ("stampede-k8s-keys-" + std::to_string(::getpid()))).string();
    fs::remove_all(scratch);
    RETURN_IF_ERROR(wire::GenerateKeys(scratch, identities));
    keys_dir = scratch;
  }
  std::ostringstream secret;
  secret << "apiVersion: v1\nkind: Secret\n" << w.Meta(w.name + "-keys", "keys") << "type: Opaque\ndata:\n";
  if (cl->curve()) {
    for (const auto& id : identities) {
      for (const char* ext : {".key", ".pub"}) {
        const std::string path = keys_dir + "/" + id + ext;
        if (!fs::exists(path)) {
          if (!scratch.empty()) fs::remove_all(scratch);
          return base::InvalidArgument("keys: " + path + " is missing");
        }
        secret << "  " << id << ext << ": " << Base64(Slurp(path)) << "\n";
      }
    }
  } else {
    secret << "  none: " << Base64("cluster.curve is off") << "\n";
  }
  if (!scratch.empty()) fs::remove_all(scratch);

  files->clear();
  const std::string config_text = ConfigToText(cfg);
  std::ostringstream cm;
  cm << "apiVersion: v1\nkind: ConfigMap\n" << w.Meta(w.name + "-config", "config") << "data:\n  config.textproto: |\n";
  std::istringstream lines(config_text);
  for (std::string line; std::getline(lines, line);) cm << (line.empty() ? "" : "    " + line) << "\n";
  if (w.ns != "default") {
    files->push_back({"00-namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + w.ns + "\n"});
  }
  files->push_back({"01-config.yaml", cm.str()});
  files->push_back({"02-keys.yaml", secret.str()});
  std::ostringstream pvc;
  pvc << "apiVersion: v1\nkind: PersistentVolumeClaim\n" << w.Meta(w.name + "-run", "run")
      << "spec:\n  accessModes:\n    - ReadWriteMany\n";
  if (!opt.storage_class.empty()) pvc << "  storageClassName: " << opt.storage_class << "\n";
  pvc << "  resources:\n    requests:\n      storage: " << opt.storage << "\n";
  files->push_back({"03-run-volume.yaml", pvc.str()});
  std::vector<std::pair<std::string, int>> learner_ports = {{"trajectories", kLearnerPort}};
  if (InferenceOf(cfg) == config::Inference::central) learner_ports.push_back({"inference", kInferencePort});
  if (UpdateModeOf(cfg) == config::UpdateMode::allreduce) learner_ports.push_back({"allreduce", kAllreducePort});
  files->push_back({"04-services.yaml", w.HeadlessService("coordinator", {{"status", kStatusPort}, {"control", kControlPort}}) +
                                            "---\n" + w.HeadlessService("ps", {{"ps", kPsPort}}) + "---\n" +
                                            w.HeadlessService("learner", learner_ports)});

  const std::string config_file = std::string(kConfigDir) + "/config.textproto";
  // A server that started before in this run (its marker on the run volume: a kubelet
  // restart, or its pod moved) is told so with --restarts 1, so a relay learner restores
  // its checkpoint. A clean stop (the coordinator's order) leaves the container idle
  // rather than restarted into a finished run; a crash exits, and the kubelet restarts it.
  const auto server_command = [&](const char* role) {
    return std::string("m=") + kRunDir + "/.started-$(hostname); r=0; [ -e \"$m\" ] && r=1; touch \"$m\"; stampede " +
           role + " --config " + config_file + " --task-index \"$STAMPEDE_TASK_INDEX\" --restarts \"$r\" && exec sleep infinity";
  };
  const char* pod_index = "metadata.labels['apps.kubernetes.io/pod-index']";
  const auto stateful_set = [&](const std::string& role, int replicas, const std::string& body) {
    std::ostringstream s;
    s << "apiVersion: apps/v1\nkind: StatefulSet\n" << w.Meta(w.name + "-" + role, role);
    s << "spec:\n  serviceName: " << w.name << "-" << role << "\n  replicas: " << replicas
      << "\n  podManagementPolicy: Parallel\n  selector:\n    matchLabels:\n" << w.Labels(role, 6)
      << "  template:\n" << body;
    return s.str();
  };
  const int64_t replay_bytes = cfg.learner().replay().fraction() > 0 ? cfg.learner().replay().max_bytes() : 0;
  files->push_back({"05-ps.yaml", stateful_set("ps", shards,
                                               w.PodSpec("ps", server_command("ps"), pod_index, "Always",
                                                         {{"ps", kPsPort}}, "1", "1Gi", 0, ""))});
  files->push_back({"06-learner.yaml",
                    stateful_set("learner", learners,
                                 w.PodSpec("learner", server_command("learner"), pod_index, "Always",
                                           learner_ports, "2",
                                           Memory((int64_t(2) << 30) + replay_bytes), opt.learner_gpus, ""))});
  std::ostringstream actor_job;
  actor_job << "apiVersion: batch/v1\nkind: Job\n" << w.Meta(w.name + "-actors", "actor");
  actor_job << "spec:\n  completionMode: Indexed\n  completions: " << actors << "\n  parallelism: " << actors
            << "\n  backoffLimit: " << cfg.coordinator().max_actor_restarts() << "\n  template:\n"
            << w.PodSpec("actor",
                         "exec stampede actor --config " + config_file + " --task-index \"$JOB_COMPLETION_INDEX\"", "",
                         "OnFailure", {}, "1", "512Mi", 0, "");
  files->push_back({"07-actors.yaml", actor_job.str()});
  if (cfg.evaluation().interval_frames() > 0) {
    // Evaluation (config `evaluation`): one evaluator, restarted like an actor.
    std::ostringstream eval_job;
    eval_job << "apiVersion: batch/v1\nkind: Job\n" << w.Meta(w.name + "-evaluator", "evaluator");
    eval_job << "spec:\n  completions: 1\n  backoffLimit: " << cfg.coordinator().max_actor_restarts()
             << "\n  template:\n"
             << w.PodSpec("evaluator", "exec stampede evaluator --config " + config_file + " --task-index 0", "",
                          "OnFailure", {}, "1", "1Gi", 0, "");
    files->push_back({"07-evaluator.yaml", eval_job.str()});
  }
  std::ostringstream coord;
  coord << "apiVersion: batch/v1\nkind: Job\n" << w.Meta(w.name + "-coordinator", "coordinator");
  coord << "spec:\n  completions: 1\n  backoffLimit: 0\n  template:\n"
        << w.PodSpec("coordinator", "exec stampede coordinator " + config_file + " --run-dir " + kRunDir, "", "Never",
                     {{"status", kStatusPort}, {"control", kControlPort}}, "500m", "256Mi", 0, "");
  files->push_back({"08-coordinator.yaml", coord.str()});
  return base::OkStatus();
}

int LaunchK8s(const K8sLaunchOptions& opt) {
  std::vector<std::pair<std::string, std::string>> files;
  if (opt.out_dir.empty()) {
    base::LogError("stampede launch k8s: --out DIR is required\n");
    return 2;
  }
  if (const base::Status made = K8sManifests(opt, &files); !made.ok()) {
    base::LogError("stampede launch k8s: %s\n", made.message().c_str());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) {
    base::LogError("stampede launch k8s: cannot create %s: %s\n", opt.out_dir.c_str(), ec.message().c_str());
    return 2;
  }
  for (const auto& [name, text] : files) {
    const std::string path = opt.out_dir + "/" + name;
    if (const base::Status st = base::WriteFileAtomically(path, text); !st.ok()) {
      base::LogError("stampede launch k8s: %s\n", st.message().c_str());
      return 2;
    }
    if (name == "02-keys.yaml") fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, ec);
  }
  std::printf("stampede launch k8s: %zu manifests in %s; start the run with: kubectl apply -f %s\n", files.size(),
              opt.out_dir.c_str(), opt.out_dir.c_str());
  return 0;
}

}  // namespace stampede::tools
