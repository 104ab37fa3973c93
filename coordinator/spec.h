// Resolving the env spec: `stampede spec CONFIG` prints it; `stampede run` gets it from
// that command in a child process (so the coordinator never loads a plug-in or starts
// Python) and writes it into the config every role reads.
#pragma once

#include <string>

#include "base/status.h"
#include "config/config.pb.h"

namespace stampede::coordinator {

// The body of `stampede spec`: builds one env from `cfg`, prints its spec (protobuf
// text) on stdout. Exit code 0, or 2 with the env's error on stderr.
int RunSpecCommand(const config::Config& cfg);

// The body of `stampede ps-plan`: resolves the env's spec, builds the network and prints
// its placement on the PS shards (ps/placement.h). Exit code 0, or 2 with the error.
int RunPsPlanCommand(config::Config cfg);

// Runs `self_exe spec` on `cfg` in a child process and stores the result in
// cfg->env().resolved_spec(); makes a relative plug-in path absolute first. Invalid
// argument, with the child's error (naming the env), on failure or when the spec cannot
// be trained on.
base::Status ResolveEnvSpec(const std::string& self_exe, config::Config* cfg);

// The config's network builds for its resolved env spec (a CNN on vector observations,
// an image too small for the torso are refused), the run's messages fit
// cluster.max_message_bytes, the fleet fits this machine's memory, and learner.device
// names a device this machine has (queried in a child process). Invalid argument, naming
// the field, otherwise.
base::Status CheckNetworkAndDevice(const config::Config& cfg);

// `stampede run --resume` of a sharded run (sync/async) whose ps.num_shards, ps.placement
// or ps.partition_bytes differ from its newest checkpoint's: writes a new checkpoint with
// the same parameters and optimizer state laid out for the new shards
// (ps::ReshardCheckpoint), and raises every new shard's version mark to the highest any
// shard had, so the run continues at the same version. *said: a line for the user, empty
// when nothing needed doing.
base::Status ReshardForResume(const config::Config& cfg, std::string* said);

}  // namespace stampede::coordinator
