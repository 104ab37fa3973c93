// MinAtar Space Invaders (minatar/environments/space_invaders.py): a cannon on the bottom
// row shoots at a block of aliens that marches sideways and steps down at the edges,
// the nearest alien shooting back. +1 per alien; the episode ends when the cannon is hit
// or the aliens reach it. Each cleared wave moves faster (ramping).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "envs/minatar.h"

namespace stampede::envs {
namespace {

constexpr int kShotCoolDown = 5, kEnemyMoveInterval = 12, kEnemyShotInterval = 10;
using Map = uint8_t[10][10];

class SpaceInvaders : public MinAtarGame {
 public:
  explicit SpaceInvaders(bool ramping) : ramping_(ramping) {}
  const char* name() const override { return "space_invaders"; }
  // cannon, alien, alien_left, alien_right, friendly_bullet, enemy_bullet
  int channels() const override { return 6; }
  std::vector<int> minimal_action_set() const override { return {kNoop, kLeft, kRight, kFire}; }
  int difficulty_ramp() const override { return ramp_index_; }

  void Reset(MinAtarDraws&) override {
    pos_ = 5;
    std::memset(f_bullets_, 0, sizeof(Map));
    std::memset(e_bullets_, 0, sizeof(Map));
    std::memset(aliens_, 0, sizeof(Map));
    FillAliens();
    alien_dir_ = -1;
    move_interval_ = kEnemyMoveInterval;
    alien_move_timer_ = move_interval_;
    alien_shot_timer_ = kEnemyShotInterval;
    ramp_index_ = 0;
    shot_timer_ = 0;
    terminal_ = false;
  }

  std::pair<int, bool> Act(int a, MinAtarDraws&) override {
    int r = 0;
    if (terminal_) return {r, terminal_};
    if (a == kFire && shot_timer_ == 0) {
      f_bullets_[9][pos_] = 1;
      shot_timer_ = kShotCoolDown;
    } else if (a == kLeft) {
      pos_ = std::max(0, pos_ - 1);
    } else if (a == kRight) {
      pos_ = std::min(9, pos_ + 1);
    }
    RollRows(f_bullets_, -1);
    std::memset(f_bullets_[9], 0, 10);
    RollRows(e_bullets_, 1);
    std::memset(e_bullets_[0], 0, 10);
    if (e_bullets_[9][pos_]) terminal_ = true;
    if (aliens_[9][pos_]) terminal_ = true;
    if (alien_move_timer_ == 0) {
      alien_move_timer_ = std::min(CountAliens(), move_interval_);
      if ((ColumnHasAlien(0) && alien_dir_ < 0) || (ColumnHasAlien(9) && alien_dir_ > 0)) {
        alien_dir_ = -alien_dir_;
        for (int x = 0; x < 10; ++x) {
          if (aliens_[9][x]) terminal_ = true;
        }
        RollRows(aliens_, 1);
      } else {
        RollColumns(aliens_, alien_dir_);
      }
      if (aliens_[9][pos_]) terminal_ = true;
    }
    if (alien_shot_timer_ == 0) {
      alien_shot_timer_ = kEnemyShotInterval;
      // The package's _nearest_alien: columns by distance to the cannon (ties: the left
      // one first), the lowest alien of the first column that has one. The block is never
      // empty here (it is refilled at the end of every step).
      for (int d = 0; d < 10; ++d) {
        bool found = false;
        for (int x : {pos_ - d, pos_ + d}) {
          if (x < 0 || x > 9 || (d == 0 && x != pos_) || !ColumnHasAlien(x)) continue;
          int y = 9;
          while (!aliens_[y][x]) --y;
          e_bullets_[y][x] = 1;
          found = true;
          break;
        }
        if (found) break;
      }
    }
    for (int y = 0; y < 10; ++y) {
      for (int x = 0; x < 10; ++x) {
        if (aliens_[y][x] && f_bullets_[y][x]) {
          ++r;
          aliens_[y][x] = f_bullets_[y][x] = 0;
        }
      }
    }
    if (shot_timer_ > 0) --shot_timer_;
    --alien_move_timer_;
    --alien_shot_timer_;
    if (CountAliens() == 0) {
      if (move_interval_ > 6 && ramping_) {
        --move_interval_;
        ++ramp_index_;
      }
      FillAliens();
    }
    return {r, terminal_};
  }

  void State(uint8_t* s, uint8_t on) const override {
    constexpr int N = kSize * kSize;
    std::memset(s, 0, size_t(channels()) * N);
    s[0 * N + 9 * kSize + pos_] = on;
    const int side = alien_dir_ < 0 ? 2 : 3;
    for (int y = 0; y < 10; ++y) {
      for (int x = 0; x < 10; ++x) {
        const int i = y * kSize + x;
        if (aliens_[y][x]) s[1 * N + i] = s[side * N + i] = on;
        if (f_bullets_[y][x]) s[4 * N + i] = on;
        if (e_bullets_[y][x]) s[5 * N + i] = on;
      }
    }
  }

 private:
  // numpy.roll(m, shift, axis=0) and axis=1, shift +-1: what leaves one side enters the other.
  static void RollRows(Map m, int shift) {
    Map out;
    for (int y = 0; y < 10; ++y) std::memcpy(out[(y + shift + 10) % 10], m[y], 10);
    std::memcpy(m, out, sizeof(Map));
  }
  static void RollColumns(Map m, int shift) {
    Map out;
    for (int y = 0; y < 10; ++y) {
      for (int x = 0; x < 10; ++x) out[y][(x + shift + 10) % 10] = m[y][x];
    }
    std::memcpy(m, out, sizeof(Map));
  }
  void FillAliens() {
    for (int y = 0; y < 4; ++y) {
      for (int x = 2; x < 8; ++x) aliens_[y][x] = 1;
    }
  }
  int CountAliens() const {
    int n = 0;
    for (const auto& row : aliens_) {
      for (uint8_t v : row) n += v != 0;
    }
    return n;
  }
  bool ColumnHasAlien(int x) const {
    for (int y = 0; y < 10; ++y) {
      if (aliens_[y][x]) return true;
    }
    return false;
  }
  bool ramping_;
  int pos_ = 5, alien_dir_ = -1, move_interval_ = kEnemyMoveInterval;
  int alien_move_timer_ = 0, alien_shot_timer_ = 0, ramp_index_ = 0, shot_timer_ = 0;
  Map f_bullets_ = {}, e_bullets_ = {}, aliens_ = {};
  bool terminal_ = false;
};

}  // namespace

std::unique_ptr<MinAtarGame> MakeMinAtarSpaceInvaders(bool ramping) {
  return std::make_unique<SpaceInvaders>(ramping);
}

STAMPEDE_REGISTER_ENV("MinAtar-SpaceInvaders", [](const EnvOptions& o) {
  return std::make_unique<MinAtarEnv>("MinAtar-SpaceInvaders", "space_invaders", o);
});

}  // namespace stampede::envs
