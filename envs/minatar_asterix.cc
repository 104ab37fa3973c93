// MinAtar Asterix (minatar/environments/asterix.py): the player moves on rows 1-8;
// enemies and gold spawn at either edge of a free row and cross it. Gold gives +1, an
// enemy ends the episode. Spawning and movement speed up every 100 steps (ramping).
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "envs/minatar.h"

namespace stampede::envs {
namespace {

constexpr int kRampInterval = 100, kInitSpawnSpeed = 10, kInitMoveInterval = 5;

class Asterix : public MinAtarGame {
 public:
  explicit Asterix(bool ramping) : ramping_(ramping) {}
  const char* name() const override { return "asterix"; }
  int channels() const override { return 4; }  // player, enemy, trail, gold
  std::vector<int> minimal_action_set() const override { return {kNoop, kLeft, kUp, kRight, kDown}; }
  int difficulty_ramp() const override { return ramp_index_; }

  void Reset(MinAtarDraws&) override {
    player_x_ = player_y_ = 5;
    for (auto& e : entities_) e.reset();
    spawn_speed_ = spawn_timer_ = kInitSpawnSpeed;
    move_speed_ = move_timer_ = kInitMoveInterval;
    ramp_timer_ = kRampInterval;
    ramp_index_ = 0;
    terminal_ = false;
  }

  std::pair<int, bool> Act(int a, MinAtarDraws& draws) override {
    int r = 0;
    if (terminal_) return {r, terminal_};
    if (spawn_timer_ == 0) {
      Spawn(draws);
      spawn_timer_ = spawn_speed_;
    }
    if (a == kLeft) player_x_ = std::max(0, player_x_ - 1);
    else if (a == kRight) player_x_ = std::min(9, player_x_ + 1);
    else if (a == kUp) player_y_ = std::max(1, player_y_ - 1);
    else if (a == kDown) player_y_ = std::min(8, player_y_ + 1);
    for (auto& e : entities_) {
      if (e && e->x == player_x_ && e->y == player_y_) Collide(e, &r);
    }
    if (move_timer_ == 0) {
      move_timer_ = move_speed_;
      for (auto& e : entities_) {
        if (!e) continue;
        e->x += e->right ? 1 : -1;
        if (e->x < 0 || e->x > 9) {
          e.reset();
        } else if (e->x == player_x_ && e->y == player_y_) {
          Collide(e, &r);
        }
      }
    }
    --spawn_timer_;
    --move_timer_;
    if (ramping_ && (spawn_speed_ > 1 || move_speed_ > 1)) {
      if (ramp_timer_ >= 0) {
        --ramp_timer_;
      } else {
        if (move_speed_ > 1 && ramp_index_ % 2) --move_speed_;
        if (spawn_speed_ > 1) --spawn_speed_;
        ++ramp_index_;
        ramp_timer_ = kRampInterval;
      }
    }
    return {r, terminal_};
  }

  void State(uint8_t* s, uint8_t on) const override {
    constexpr int N = kSize * kSize;
    std::memset(s, 0, size_t(channels()) * N);
    s[0 * N + player_y_ * kSize + player_x_] = on;
    for (const auto& e : entities_) {
      if (!e) continue;
      s[(e->gold ? 3 : 1) * N + e->y * kSize + e->x] = on;
      const int back_x = e->right ? e->x - 1 : e->x + 1;
      if (back_x >= 0 && back_x <= 9) s[2 * N + e->y * kSize + back_x] = on;
    }
  }

 private:
  struct Entity {
    int x, y;
    bool right, gold;
  };
  void Collide(std::optional<Entity>& e, int* r) {
    if (e->gold) {
      e.reset();
      *r += 1;
    } else {
      terminal_ = true;
    }
  }
  void Spawn(MinAtarDraws& draws) {
    const bool lr = draws.Rand() < 1.0 / 2;
    const bool gold = draws.Rand() < 1.0 / 3;
    int free[8], n = 0;
    for (int i = 0; i < 8; ++i) {
      if (!entities_[size_t(i)]) free[n++] = i;
    }
    if (n == 0) return;
    const int slot = free[draws.RandInt(0, n)];
    entities_[size_t(slot)] = Entity{lr ? 0 : 9, slot + 1, lr, gold};
  }
  bool ramping_;
  int player_x_ = 5, player_y_ = 5;
  std::array<std::optional<Entity>, 8> entities_;
  int spawn_speed_ = 0, spawn_timer_ = 0, move_speed_ = 0, move_timer_ = 0;
  int ramp_timer_ = 0, ramp_index_ = 0;
  bool terminal_ = false;
};

}  // namespace

std::unique_ptr<MinAtarGame> MakeMinAtarAsterix(bool ramping) { return std::make_unique<Asterix>(ramping); }

STAMPEDE_REGISTER_ENV("MinAtar-Asterix", [](const EnvOptions& o) {
  return std::make_unique<MinAtarEnv>("MinAtar-Asterix", "asterix", o);
});

}  // namespace stampede::envs
