// MinAtar Seaquest (minatar/environments/seaquest.py): a submarine shoots fish and enemy
// subs (+1 each) that cross rows 1-8, picks up divers, and must surface before its
// oxygen runs out; surfacing with six divers scores the oxygen left. Enemies speed up
// with every surfacing (ramping).
//
// The package keeps its objects in Python lists that it edits while walking them
// backwards, and removes by value (the first equal element). Both matter to what happens
// when two objects coincide, so this file walks and removes the same way
// (ReverseWalk, EraseFirstEqual) rather than with the obvious C++ idioms.
#include <algorithm>
#include <cstring>
#include <vector>

#include "envs/minatar.h"

namespace stampede::envs {
namespace {

constexpr int kMaxOxygen = 200, kInitSpawnSpeed = 20, kDiverSpawnSpeed = 30, kInitMoveInterval = 5;
constexpr int kShotCoolDown = 5, kEnemyShotInterval = 10, kDiverMoveInterval = 5;

struct Bullet {  // friendly and enemy bullets: [x, y, moving right]
  int x, y;
  bool right;
  bool operator==(const Bullet&) const = default;
};
struct Mover {  // fish and divers: [x, y, moving right, move timer]
  int x, y;
  bool right;
  int timer;
  bool operator==(const Mover&) const = default;
};
struct Sub {  // enemy subs: [x, y, moving right, move timer, shot timer]
  int x, y;
  bool right;
  int timer, shot;
  bool operator==(const Sub&) const = default;
};

// list.remove(value): erases the first element equal to `value`; returns its index.
template <class T>
size_t EraseFirstEqual(std::vector<T>& v, const T& value) {
  const size_t j = size_t(std::find(v.begin(), v.end(), value) - v.begin());
  v.erase(v.begin() + long(j));
  return j;
}

// `for item in reversed(v)` while the body removes from v: Python's reverse iterator
// visits index size-1, size-2, ... and stops at the first index past the end. `body`
// gets the index; it may erase elements at or before it.
template <class T, class F>
void ReverseWalk(std::vector<T>& v, F body) {
  for (long i = long(v.size()) - 1; i >= 0 && i < long(v.size()); --i) body(size_t(i));
}

// Removes v[i] as `v.remove(item)` does and returns where the item lives afterwards:
// still in v (at i-1) when an equal element before it went instead, else `removed`.
template <class T>
T* RemoveItem(std::vector<T>& v, size_t i, T* removed) {
  *removed = v[i];
  const size_t j = EraseFirstEqual(v, *removed);
  return j == i ? removed : &v[i - 1];
}

class Seaquest : public MinAtarGame {
 public:
  explicit Seaquest(bool ramping) : ramping_(ramping) {}
  const char* name() const override { return "seaquest"; }
  // sub_front, sub_back, friendly_bullet, trail, enemy_bullet, enemy_fish, enemy_sub,
  // oxygen_guage, diver_guage, diver
  int channels() const override { return 10; }
  std::vector<int> minimal_action_set() const override { return {kNoop, kLeft, kUp, kRight, kDown, kFire}; }
  int difficulty_ramp() const override { return ramp_index_; }

  void Reset(MinAtarDraws&) override {
    oxygen_ = kMaxOxygen;
    diver_count_ = 0;
    sub_x_ = 5;
    sub_y_ = 0;
    sub_or_ = false;
    f_bullets_.clear();
    e_bullets_.clear();
    e_fish_.clear();
    e_subs_.clear();
    divers_.clear();
    e_spawn_speed_ = e_spawn_timer_ = kInitSpawnSpeed;
    d_spawn_timer_ = kDiverSpawnSpeed;
    move_speed_ = kInitMoveInterval;
    ramp_index_ = 0;
    shot_timer_ = 0;
    surface_ = true;
    terminal_ = false;
  }

  std::pair<int, bool> Act(int a, MinAtarDraws& draws) override {
    int r = 0;
    if (terminal_) return {r, terminal_};
    if (e_spawn_timer_ == 0) {
      SpawnEnemy(draws);
      e_spawn_timer_ = e_spawn_speed_;
    }
    if (d_spawn_timer_ == 0) {
      SpawnDiver(draws);
      d_spawn_timer_ = kDiverSpawnSpeed;
    }
    if (a == kFire && shot_timer_ == 0) {
      f_bullets_.push_back({sub_x_, sub_y_, sub_or_});
      shot_timer_ = kShotCoolDown;
    } else if (a == kLeft) {
      sub_x_ = std::max(0, sub_x_ - 1);
      sub_or_ = false;
    } else if (a == kRight) {
      sub_x_ = std::min(9, sub_x_ + 1);
      sub_or_ = true;
    } else if (a == kUp) {
      sub_y_ = std::max(0, sub_y_ - 1);
    } else if (a == kDown) {
      sub_y_ = std::min(8, sub_y_ + 1);
    }
    auto at_sub = [&](int x, int y) { return x == sub_x_ && y == sub_y_; };

    ReverseWalk(f_bullets_, [&](size_t i) {
      Bullet& bullet = f_bullets_[i];
      bullet.x += bullet.right ? 1 : -1;
      if (bullet.x < 0 || bullet.x > 9) {
        EraseFirstEqual(f_bullets_, Bullet(bullet));
        return;
      }
      const Bullet b = bullet;
      for (size_t k = 0; k < e_fish_.size(); ++k) {
        if (b.x == e_fish_[k].x && b.y == e_fish_[k].y) {
          e_fish_.erase(e_fish_.begin() + long(k));
          EraseFirstEqual(f_bullets_, b);
          r += 1;
          return;
        }
      }
      for (size_t k = 0; k < e_subs_.size(); ++k) {
        if (b.x == e_subs_[k].x && b.y == e_subs_[k].y) {
          e_subs_.erase(e_subs_.begin() + long(k));
          EraseFirstEqual(f_bullets_, b);
          r += 1;
          return;
        }
      }
    });

    ReverseWalk(divers_, [&](size_t i) {
      Mover& diver = divers_[i];
      if (at_sub(diver.x, diver.y) && diver_count_ < 6) {
        EraseFirstEqual(divers_, Mover(diver));
        ++diver_count_;
      } else if (diver.timer == 0) {
        diver.timer = kDiverMoveInterval;
        diver.x += diver.right ? 1 : -1;
        if (diver.x < 0 || diver.x > 9) {
          EraseFirstEqual(divers_, Mover(diver));
        } else if (at_sub(diver.x, diver.y) && diver_count_ < 6) {
          EraseFirstEqual(divers_, Mover(diver));
          ++diver_count_;
        }
      } else {
        diver.timer -= 1;
      }
    });

    ReverseWalk(e_subs_, [&](size_t i) {
      Sub removed;
      Sub* sub = &e_subs_[i];
      if (at_sub(sub->x, sub->y)) terminal_ = true;
      if (sub->timer == 0) {
        sub->timer = move_speed_;
        sub->x += sub->right ? 1 : -1;
        if (sub->x < 0 || sub->x > 9) {
          sub = RemoveItem(e_subs_, i, &removed);
        } else if (at_sub(sub->x, sub->y)) {
          terminal_ = true;
        } else {
          for (size_t k = 0; k < f_bullets_.size(); ++k) {
            if (sub->x == f_bullets_[k].x && sub->y == f_bullets_[k].y) {
              sub = RemoveItem(e_subs_, i, &removed);
              f_bullets_.erase(f_bullets_.begin() + long(k));
              r += 1;
              break;
            }
          }
        }
      } else {
        sub->timer -= 1;
      }
      // A sub that has just been removed still shoots, as in the package.
      if (sub->shot == 0) {
        sub->shot = kEnemyShotInterval;
        e_bullets_.push_back({sub->x, sub->y, sub->right});
      } else {
        sub->shot -= 1;
      }
    });

    ReverseWalk(e_bullets_, [&](size_t i) {
      Bullet& bullet = e_bullets_[i];
      if (at_sub(bullet.x, bullet.y)) terminal_ = true;
      bullet.x += bullet.right ? 1 : -1;
      if (bullet.x < 0 || bullet.x > 9) {
        EraseFirstEqual(e_bullets_, Bullet(bullet));
      } else if (at_sub(bullet.x, bullet.y)) {
        terminal_ = true;
      }
    });

    ReverseWalk(e_fish_, [&](size_t i) {
      Mover& fish = e_fish_[i];
      if (at_sub(fish.x, fish.y)) terminal_ = true;
      if (fish.timer == 0) {
        fish.timer = move_speed_;
        fish.x += fish.right ? 1 : -1;
        if (fish.x < 0 || fish.x > 9) {
          EraseFirstEqual(e_fish_, Mover(fish));
        } else if (at_sub(fish.x, fish.y)) {
          terminal_ = true;
        } else {
          for (size_t k = 0; k < f_bullets_.size(); ++k) {
            if (fish.x == f_bullets_[k].x && fish.y == f_bullets_[k].y) {
              EraseFirstEqual(e_fish_, Mover(fish));
              f_bullets_.erase(f_bullets_.begin() + long(k));
              r += 1;
              break;
            }
          }
        }
      } else {
        fish.timer -= 1;
      }
    });

    if (e_spawn_timer_ > 0) --e_spawn_timer_;
    if (d_spawn_timer_ > 0) --d_spawn_timer_;
    if (shot_timer_ > 0) --shot_timer_;
    if (oxygen_ <= 0) terminal_ = true;
    if (sub_y_ > 0) {
      oxygen_ -= 1;
      surface_ = false;
    } else if (!surface_) {
      if (diver_count_ == 0) {
        terminal_ = true;
      } else {
        r += Surface();
      }
    }
    return {r, terminal_};
  }

  void State(uint8_t* s, uint8_t on) const override {
    constexpr int N = kSize * kSize;
    std::memset(s, 0, size_t(channels()) * N);
    auto set = [&](int c, int y, int x) { s[c * N + y * kSize + x] = on; };
    set(0, sub_y_, sub_x_);
    int back_x = sub_or_ ? sub_x_ - 1 : sub_x_ + 1;
    if (back_x < 0) back_x += 10;  // numpy's negative index (the sub never gets there)
    if (back_x <= 9) set(1, sub_y_, back_x);
    for (int x = 0; x < std::max(0, oxygen_) * 10 / kMaxOxygen && x < 10; ++x) set(7, 9, x);
    // Python's slice [9 - diver_count : 9]: empty once diver_count is negative, as it is
    // after surfacing with six divers (the package counts down from 0 there).
    for (int x = std::max(0, 9 - diver_count_); x < 9; ++x) set(8, 9, x);
    for (const Bullet& b : f_bullets_) set(2, b.y, b.x);
    for (const Bullet& b : e_bullets_) set(4, b.y, b.x);
    auto trail = [&](int x, int y, bool right) {
      const int bx = right ? x - 1 : x + 1;
      if (bx >= 0 && bx <= 9) set(3, y, bx);
    };
    for (const Mover& f : e_fish_) {
      set(5, f.y, f.x);
      trail(f.x, f.y, f.right);
    }
    for (const Sub& e : e_subs_) {
      set(6, e.y, e.x);
      trail(e.x, e.y, e.right);
    }
    for (const Mover& d : divers_) {
      set(9, d.y, d.x);
      trail(d.x, d.y, d.right);
    }
  }

 private:
  int Surface() {
    surface_ = true;
    int r = 0;
    if (diver_count_ == 6) {
      diver_count_ = 0;
      r = oxygen_ * 10 / kMaxOxygen;
    }
    oxygen_ = kMaxOxygen;
    diver_count_ -= 1;
    if (ramping_ && (e_spawn_speed_ > 1 || move_speed_ > 2)) {
      if (move_speed_ > 2 && ramp_index_ % 2) --move_speed_;
      if (e_spawn_speed_ > 1) --e_spawn_speed_;
      ++ramp_index_;
    }
    return r;
  }
  void SpawnEnemy(MinAtarDraws& draws) {
    const bool lr = draws.Rand() < 1.0 / 2;
    const bool is_sub = draws.Rand() < 1.0 / 3;
    const int x = lr ? 0 : 9;
    const int y = int(draws.RandInt(1, 9));
    for (const Sub& z : e_subs_) {
      if (z.y == y && z.right != lr) return;
    }
    for (const Mover& z : e_fish_) {
      if (z.y == y && z.right != lr) return;
    }
    if (is_sub) {
      e_subs_.push_back({x, y, lr, move_speed_, kEnemyShotInterval});
    } else {
      e_fish_.push_back({x, y, lr, move_speed_});
    }
  }
  void SpawnDiver(MinAtarDraws& draws) {
    const bool lr = draws.Rand() < 1.0 / 2;
    const int x = lr ? 0 : 9;
    const int y = int(draws.RandInt(1, 9));
    divers_.push_back({x, y, lr, kDiverMoveInterval});
  }
  bool ramping_;
  int oxygen_ = kMaxOxygen, diver_count_ = 0, sub_x_ = 5, sub_y_ = 0;
  bool sub_or_ = false;
  std::vector<Bullet> f_bullets_, e_bullets_;
  std::vector<Mover> e_fish_, divers_;
  std::vector<Sub> e_subs_;
  int e_spawn_speed_ = 0, e_spawn_timer_ = 0, d_spawn_timer_ = 0, move_speed_ = 0;
  int ramp_index_ = 0, shot_timer_ = 0;
  bool surface_ = true, terminal_ = false;
};

}  // namespace

std::unique_ptr<MinAtarGame> MakeMinAtarSeaquest(bool ramping) { return std::make_unique<Seaquest>(ramping); }

STAMPEDE_REGISTER_ENV("MinAtar-Seaquest", [](const EnvOptions& o) {
  return std::make_unique<MinAtarEnv>("MinAtar-Seaquest", "seaquest", o);
});

}  // namespace stampede::envs
