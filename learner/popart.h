// PopArt (van Hasselt et al. 2016; per task as in Hessel et al. 2019): running mean and
// second moment of each task's value targets, kept in the parameters' "popart/stats"
// tensor [2, num_tasks] (row 0 means, row 1 scales), and the rescaling of the value
// head's last layer that keeps every unnormalised output scale * n(x) + mean exactly as
// it was when the statistics move ("preserving outputs precisely").
#pragma once

#include <cstdint>

#include "net/kernel_math.h"
#include "net/layout.h"

namespace stampede::learner {

struct PopArtSlots {
  int64_t stats = -1;  // offset of "popart/stats"
  int64_t w = -1, b = -1;  // "baseline/w" [feature, V] and "baseline/b" [V]
  int feature = 0, num_values = 0;
};
// Throws std::out_of_range if the layout has no PopArt tensors.
PopArtSlots PopArtSlotsOf(const net::ParamLayout& layout);

using net::kPopArtMaxScale;  // the bounds of a scale (net/kernel_math.h: the CUDA trainer's too)
using net::kPopArtMinScale;

// One update of task k from a batch of its targets (their mean and mean square):
// mean' = (1 - beta) mean + beta m1, second' = (1 - beta)(scale^2 + mean^2) + beta m2,
// scale' = sqrt(second' - mean'^2) clipped to [kPopArtMinScale, kPopArtMaxScale];
// then w[:, k] *= scale / scale', b[k] = (scale b[k] + mean - mean') / scale'. Without
// `preserve_outputs` the head is left as it is, so its outputs move with the statistics
// (a fresh head's first update: its values start at the targets' mean).
void PopArtUpdate(const PopArtSlots& slots, float* params, int task, double target_mean,
                  double target_square_mean, double beta, bool preserve_outputs = true);

// The step size of a task's update number `updates` (0 for its first) since the learner
// started: on statistics that start fresh (mean 0, scale 1, never updated) the running
// averages are first plain means of every batch so far, max(beta, 1 / (updates + 1)), so
// the first batch sets them and a slow beta does not leave them near their start for
// thousands of steps; on statistics that were restored, beta.
double PopArtStepSize(double beta, int64_t updates, bool fresh);

}  // namespace stampede::learner
