// Which learner statuses the coordinator believes, and how several learners' statuses
// make the run's figures. Pure functions of the statuses and the config.
#pragma once

#include <map>
#include <string>

#include "base/metrics.h"
#include "coordinator/core.h"
#include "config/config.pb.h"
#include "wire/messages.pb.h"

namespace stampede::coordinator {

// Empty if `s`'s counters are believable, else why not: frames never go back within one
// learner process, and never run ahead of what the actors say they made (with room for
// what they have not reported yet and for messages in flight).
std::string Implausible(const config::Config& cfg, const std::map<int, wire::Status>& learners,
                        const ActorCounts& actors, const wire::Status& s);

// The run's learner figures from every learner's newest status: counts add up, window
// means are weighted by returns counted, the step is the PS's global version (sync and
// async) or the learners' steps summed (relay). One learner: its status as it is.
// Targets are met over the learners' windows together once they hold 100 returns.
// The step metrics (base/metrics.h) each merge as their declaration says.
wire::Status MergeLearners(const config::Config& cfg, const std::map<int, wire::Status>& learners);

// A status's step metrics by declaration; 0 for one it does not carry.
base::StepFigures StepFiguresOf(const wire::Status& s);

}  // namespace stampede::coordinator
