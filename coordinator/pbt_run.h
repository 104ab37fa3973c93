// `stampede run` of a config with pbt.population > 0: the population's shell around the
// decision core (pbt.h). It starts every member as its own `stampede run` in
// RUN_DIR/member-K (logs in RUN_DIR/member-K.log), reads each member's metrics.jsonl for
// its frames and objective, and carries out the core's decisions: an exploit stops the
// member's fleet in order (SIGTERM; RUN_DIR/stop.request for a job step), writes the leader's newest checkpoint with the
// member's own frame and step counts as the member's checkpoint, and resumes the member
// with the new hyperparameters (`stampede run --resume member-K --set ...`). Writes
// RUN_DIR/pbt.jsonl (the lineage), TensorBoard scalars (RUN_DIR/tb: pbt/member-K/...),
// RUN_DIR/pbt_summary.json and, where the venv has matplotlib, pbt.png. Each member runs
// in its own process group (SpawnLogged): a terminal's Ctrl-C reaches the population,
// which stops every member in order.
#pragma once

#include <string>
#include <vector>

#include "config/config.pb.h"

namespace stampede::coordinator {

// The population's config as given (pbt set), written to RUN_DIR/population.textproto.
inline constexpr const char* kPopulationConfig = "population.textproto";

// `cfg` is the population's config as loaded from `config_path` with `sets` (each member
// starts from the same file and overrides, its own on top). `resume`: RUN_DIR holds a
// stopped population; every member not yet at its budget resumes from its checkpoint.
// 0: every member spent its budget; 1: a member was given up, or the run was interrupted
// (then `stampede run --resume RUN_DIR` continues every member); 2: bad input.
int RunPopulation(config::Config cfg, const std::string& config_path, const std::vector<std::string>& sets,
                  bool resume);

}  // namespace stampede::coordinator
