// `stampede launch k8s`: the manifests against golden files (tests/golden/k8s; regenerate
// with STAMPEDE_UPDATE_GOLDEN=1 after a deliberate change) and against the Kubernetes API
// schemas (kubernetes-validate --strict, from the project venv).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/fleet/harness.h"

namespace fs = std::filesystem;
using namespace stampede::fleet;

namespace {
const char* kGolden = STAMPEDE_SOURCE_DIR "/tests/golden/k8s";

// The manifests for `config` in namespace rl with a GPU per learner (the golden case:
// Catch with 3 actors).
std::string Generate(const std::string& name, const std::string& config = "configs/catch.textproto",
                     const std::vector<std::string>& extra = {"--actors", "3"}) {
  const std::string out = FreshRunDir(name);
  std::vector<std::string> args = {"launch", "k8s", config, "--out", out, "--namespace", "rl", "--image",
                                   "registry.example/stampede:1", "--learner-gpus", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  Proc p = Start(args, out + ".log");
  const int code = Wait(p, std::chrono::seconds(60));
  INFO(Slurp(p.output_path));
  REQUIRE(code == 0);
  return out;
}
}  // namespace

TEST_CASE("k8s: launch k8s writes the golden manifests, and a Secret with every role's keys", "[k8s]") {
  const std::string out = Generate("k8s_golden");
  const bool update = std::getenv("STAMPEDE_UPDATE_GOLDEN") != nullptr;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"00-namespace.yaml", "01-config.yaml", "02-keys.yaml", "03-run-volume.yaml",
                                          "04-services.yaml", "05-ps.yaml", "06-learner.yaml", "07-actors.yaml",
                                          "08-coordinator.yaml"});
  for (const auto& n : names) {
    if (n == "02-keys.yaml") continue;  // fresh keys each time: checked below
    INFO(n);
    const std::string text = Slurp(out + "/" + n);
    if (update) std::ofstream(std::string(kGolden) + "/" + n) << text;
    CHECK(text == Slurp(std::string(kGolden) + "/" + n));
  }
  const std::string keys = Slurp(out + "/02-keys.yaml");
  INFO(keys);
  for (const char* id : {"actor-0", "actor-1", "actor-2", "learner-0", "ps-0", "ps-1", "coordinator"}) {
    for (const char* ext : {".key: ", ".pub: "}) CHECK_THAT(keys, Catch::Contains(std::string("  ") + id + ext));
  }
  // The endpoints name the pods' DNS names, which each role binds as 0.0.0.0.
  const std::string config = Slurp(out + "/01-config.yaml");
  CHECK_THAT(config, Catch::Contains("ps: \"tcp://stampede-catch-ps-1.stampede-catch-ps.rl.svc.cluster.local:5200\""));
  CHECK_THAT(config, Catch::Contains("bind_any: true"));
  CHECK_THAT(config, Catch::Contains("num_actors: 3"));
}

TEST_CASE("k8s: allreduce learners get ring endpoints on their pods, and a GPU each", "[k8s]") {
  const std::string out =
      Generate("k8s_allreduce", "configs/catch_2learners.textproto", {"--set", "learner.update_mode=allreduce"});
  const std::string config = Slurp(out + "/01-config.yaml");
  INFO(config);
  for (int l = 0; l < 2; ++l) {
    CHECK_THAT(config, Catch::Contains("allreduce: \"tcp://stampede-catch-2learners-learner-" + std::to_string(l) +
                                       ".stampede-catch-2learners-learner.rl.svc.cluster.local:5400\""));
  }
  CHECK_THAT(config, Catch::Contains("device: \"cuda\""));
  const std::string services = Slurp(out + "/04-services.yaml");
  INFO(services);
  CHECK_THAT(services, Catch::Contains("name: allreduce") && Catch::Contains("port: 5400"));
}

TEST_CASE("k8s: every manifest passes kubernetes-validate --strict against Kubernetes 1.30", "[k8s]") {
  const char* configured = std::getenv("STAMPEDE_VENV");
  const std::string venv = configured && *configured ? configured : std::string(STAMPEDE_SOURCE_DIR) + "/.venv";
  const std::string tool = venv + "/bin/kubernetes-validate";
  if (!fs::exists(tool)) {
    std::printf("SKIPPED: needs %s (tools/setup.sh installs kubernetes-validate into the venv)\n", tool.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  const std::string out = Generate("k8s_validate");
  const std::string log = out + ".validate";
  const int status = std::system((tool + " --strict -k 1.30.0 " + out + "/*.yaml > " + log + " 2>&1").c_str());
  const std::string said = Slurp(log);
  INFO(said);
  CHECK(status == 0);
  // One "passed" per object: a namespace, config, keys, volume, three services, two
  // StatefulSets and two Jobs.
  size_t passed = 0;
  for (size_t at = 0; (at = said.find(" passed for resource ", at)) != std::string::npos; ++at) ++passed;
  CHECK(passed == 11);
}
