// Catch from bsuite: a ball falls from the top row of a 10x5 grid, one row per step;
// the agent moves a paddle on the bottom row left, not at all, or right (actions 0, 1, 2).
// Reward +1 if the paddle is under the ball when it reaches the bottom, else -1; 9 steps.
#pragma once


#include "envs/env.h"
#include "envs/rng.h"

namespace stampede::envs {

class Catch : public Env {
 public:
  static constexpr int kRows = 10, kColumns = 5;
  explicit Catch(const EnvOptions& options);
  int ball_x() const { return ball_x_; }
  int ball_y() const { return ball_y_; }
  int paddle_x() const { return paddle_x_; }

 protected:
  void DoReset(uint64_t seed, void* obs) override;
  StepResult DoStep(int action, void* obs) override;

 private:
  void Write(void* obs) const;
  int ball_x_ = 0, ball_y_ = 0, paddle_x_ = kColumns / 2;
  SplitMix64 rng_;
};

}  // namespace stampede::envs
