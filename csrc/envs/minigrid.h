// MiniGrid with the `minigrid` 3.2 package's layouts, dynamics and observations.
//
// One family holds EnvPool's MiniGrid set (Empty, DoorKey, FourRooms, LavaGap,
// Lava/SimpleCrossing, KeyCorridor, MultiRoom, Dynamic-Obstacles, Fetch,
// GoToDoor, Memory, DistShift, Unlock, UnlockPickup, BlockedUnlockPickup,
// RedBlueDoors, GoToObject, PutNear, LockedRoom, Playground, ObstructedMaze v0
// and v1, the six WFC presets of minigrid_wfc.h) under minigrid's ids.  A cell
// is stored as its 3-byte encoding (object, colour, state) plus what a box
// holds, so the observation is a copy of cells and needs no per-object lookups.
//
// Layouts (and Dynamic-Obstacles' moves) are drawn from a NumpyRandom, the
// same stream as Gymnasium's `np_random`, with minigrid's draws in minigrid's
// order: with the same seed the envs build the same layouts as the package.
// By default that stream is seeded at every reset from the pool's per-env Rng
// (so the pool's seeding rules hold); the per-env option `reference_seed`
// seeds it once instead, as `minigrid_env.reset(seed=reference_seed)` does.
//
// Observation: the 7x7x3 egocentric image (`obs`), with `direction` and
// `mission` (an index into the id's mission list, see torchfrag.envs.minigrid)
// as per-step infos.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../env.h"
#include "minigrid_wfc.h"
#include "numpy_random.h"

namespace torchfrag {
namespace minigrid {

// minigrid's OBJECT_TO_IDX and COLOR_TO_IDX.
enum Obj : uint8_t {
  kUnseen = 0, kEmpty = 1, kWall = 2, kFloor = 3, kDoor = 4,
  kKey = 5, kBall = 6, kBox = 7, kGoal = 8, kLava = 9
};
enum Color : uint8_t { kRed = 0, kGreen = 1, kBlue = 2, kPurple = 3, kYellow = 4, kGrey = 5 };
enum DoorState : uint8_t { kOpen = 0, kClosed = 1, kLocked = 2 };
// minigrid's COLOR_NAMES is sorted by name; random colours index that list.
constexpr std::array<uint8_t, 6> kColorNames = {kBlue, kGreen, kGrey, kPurple, kRed, kYellow};
inline int color_name_index(uint8_t c) {
  for (int i = 0; i < 6; ++i) {
    if (kColorNames[i] == c) return i;
  }
  return 0;
}

// minigrid's ["key", "ball", "box"]: the order in which its envs draw object types.
constexpr std::array<uint8_t, 3> kObjectTypes = {kKey, kBall, kBox};

enum Act : int { kLeft = 0, kRight = 1, kForward = 2, kPickup = 3, kDrop = 4, kToggle = 5,
                    kDone = 6 };

// A cell as minigrid encodes it.  `type == kEmpty` is minigrid's None.  A
// box also holds the type and colour of what it contains (kEmpty: nothing);
// the encoding does not show it, toggling the box puts it in the box's place.
struct Cell {
  uint8_t type = kEmpty, color = 0, state = 0;
  uint8_t content_type = kEmpty, content_color = 0;
  bool empty() const { return type == kEmpty; }
  Cell content() const { return Cell{content_type, content_color, 0, kEmpty, 0}; }
  bool can_overlap() const {
    return type == kEmpty || type == kGoal || type == kFloor || type == kLava ||
           (type == kDoor && state == kOpen);
  }
  bool can_pickup() const { return type == kKey || type == kBall || type == kBox; }
  bool see_behind() const { return !(type == kWall || (type == kDoor && state != kOpen)); }
};
constexpr Cell kNone{kEmpty, 0, 0, kEmpty, 0};
constexpr Cell kWallCell{kWall, kGrey, 0, kEmpty, 0};
constexpr Cell kGoalCell{kGoal, kGreen, 0, kEmpty, 0};
constexpr Cell kLavaCell{kLava, kRed, 0, kEmpty, 0};
inline Cell make(uint8_t type, uint8_t color, uint8_t state = 0) {
  return Cell{type, color, state, kEmpty, 0};
}
// A box of `color` holding `inside` (minigrid's Box(color) with `contains` set).
inline Cell make_box(uint8_t color, Cell inside) {
  return Cell{kBox, color, 0, inside.type, inside.color};
}

struct Pos {
  int x = -1, y = -1;
  bool operator==(const Pos& o) const { return x == o.x && y == o.y; }
  bool operator!=(const Pos& o) const { return !(*this == o); }
};

// minigrid's DIR_TO_VEC: right, down, left, up.
constexpr int kDx[4] = {1, 0, -1, 0};
constexpr int kDy[4] = {0, 1, 0, -1};

class Grid {
 public:
  void reset(int w, int h) {
    w_ = w;
    h_ = h;
    cells_.assign(static_cast<size_t>(w) * h, kNone);
  }
  int width() const { return w_; }
  int height() const { return h_; }
  // Outside the grid reads as a wall (minigrid's slice does the same).
  Cell get(int x, int y) const {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return kWallCell;
    return cells_[static_cast<size_t>(y) * w_ + x];
  }
  void set(int x, int y, Cell c) { cells_[static_cast<size_t>(y) * w_ + x] = c; }
  void horz_wall(int x, int y, int length = -1, Cell c = kWallCell) {
    if (length < 0) length = w_ - x;
    for (int i = 0; i < length; ++i) set(x + i, y, c);
  }
  void vert_wall(int x, int y, int length = -1, Cell c = kWallCell) {
    if (length < 0) length = h_ - y;
    for (int j = 0; j < length; ++j) set(x, y + j, c);
  }
  void wall_rect(int x, int y, int w, int h) {
    horz_wall(x, y, w);
    horz_wall(x, y + h - 1, w);
    vert_wall(x, y, h);
    vert_wall(x + w - 1, y, h);
  }

 private:
  int w_ = 0, h_ = 0;
  std::vector<Cell> cells_;
};

// Which generator and step rules an id uses.
enum class Kind { kEmpty, kDoorKey, kFourRooms, kLavaGap, kCrossing, kKeyCorridor, kMultiRoom,
                  kDynamicObstacles, kFetch, kGoToDoor, kMemory, kDistShift, kUnlock,
                  kUnlockPickup, kBlockedUnlockPickup, kRedBlueDoors,
                  kGoToObject, kPutNear, kLockedRoom, kPlayground, kObstructedMaze, kWFC };

// One registered id: its generator and minigrid's constructor arguments.
struct Config {
  Kind kind = Kind::kEmpty;
  int width = 8, height = 8;
  int max_steps = 100;
  int num_actions = 7;
  bool see_through_walls = false;
  bool random_start = false;  // Empty/Dynamic-Obstacles "Random", Memory "Random"
  int n = 0;                   // crossings, obstacles, objects, rooms, DistShift's strip row
  int room_size = 0;           // RoomGrid (KeyCorridor, Unlock*) room size, MultiRoom max size
  Cell obstacle = kLavaCell;   // Crossing: lava or wall
  int num_missions = 1;
  // ObstructedMaze: quarters 0 is the 1x2-room "1D" layout, 1-4 the 3x3-room
  // one with that many side rooms; keys_last is v1's order (every door and
  // blocking ball first, then the keys, so no ball lands on a key).
  int quarters = 0;
  Pos agent_room{0, 0};
  bool key_in_box = false, blocked = false, keys_last = false;
  int wfc_preset = -1;  // WFC: index into wfc_data::kPresets
};

constexpr int kView = 7;  // minigrid's default agent_view_size

class MiniGridEnv : public Env {
 public:
  MiniGridEnv(const Config& cfg, const EnvOptions& o)
      : cfg_(cfg),
        max_steps_(o.i("max_episode_steps")),
        reference_seed_(o.i("reference_seed")) {
    if (cfg_.kind == Kind::kWFC) {
      // WFCEnv solves a wave inside its one-cell wall border.
      wfc_ = std::make_unique<wfc::Generator>(wfc_data::kPresets[cfg_.wfc_preset],
                                              cfg_.height - 2, cfg_.width - 2);
    }
    if (max_steps_ <= 0) {
      // minigrid's reward 1 - 0.9 * steps / max_steps needs a limit.
      throw std::invalid_argument("MiniGrid envs need max_episode_steps >= 1, got " +
                                  std::to_string(max_steps_));
    }
  }

  void reset(Rng& rng, const Row& out) override {
    if (reference_seed_ < 0) {
      np_.seed(rng.next());
    } else if (!seeded_) {
      np_.seed(static_cast<uint64_t>(reference_seed_));
    }
    seeded_ = true;
    agent_ = Pos{-1, -1};
    dir_ = -1;
    carrying_ = kNone;
    mission_ = 0;
    obstacles_.clear();
    gen_grid();
    step_count_ = 0;
    write(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override {
    int action = static_cast<int>(a.discrete);
    StepResult r;
    bool not_clear = false;
    if (cfg_.kind == Kind::kDynamicObstacles) {
      const Cell front = grid_.get(agent_.x + kDx[dir_], agent_.y + kDy[dir_]);
      not_clear = !front.empty() && front.type != kGoal;
      move_obstacles();
    }
    if (cfg_.kind == Kind::kMemory && action == kPickup) action = kToggle;
    const bool red_before = is_open(target_pos_), blue_before = is_open(success_pos_);
    const Cell carried_before = carrying_;
    base_step(action, &r);
    switch (cfg_.kind) {
      case Kind::kDynamicObstacles:
        if (action == kForward && not_clear) {
          r.reward = -1.0;
          r.terminated = true;
        }
        break;
      case Kind::kFetch:
        if (!carrying_.empty()) {
          r.reward = carrying_.color == target_.color && carrying_.type == target_.type
                         ? success_reward() : 0.0;
          r.terminated = true;
        }
        break;
      case Kind::kGoToDoor:
      case Kind::kGoToObject:
        if (action == kToggle) r.terminated = true;
        if (action == kDone) {
          if ((agent_.x == target_pos_.x && std::abs(agent_.y - target_pos_.y) == 1) ||
              (agent_.y == target_pos_.y && std::abs(agent_.x - target_pos_.x) == 1)) {
            r.reward = success_reward();
          }
          r.terminated = true;
        }
        break;
      case Kind::kMemory:
        if (agent_ == success_pos_) {
          r.reward = success_reward();
          r.terminated = true;
        }
        if (agent_ == failure_pos_) {
          r.reward = 0.0;
          r.terminated = true;
        }
        break;
      case Kind::kKeyCorridor:
        // The target is the only ball in the grid: carrying a ball is carrying it.
        if (action == kPickup && carrying_.type == kBall) {
          r.reward = success_reward();
          r.terminated = true;
        }
        break;
      case Kind::kUnlock:
        if (action == kToggle && grid_.get(target_pos_.x, target_pos_.y).state == kOpen) {
          r.reward = success_reward();
          r.terminated = true;
        }
        break;
      case Kind::kPutNear:
        // target_ is the object to move, target_pos_ where the other one was placed.
        if (action == kPickup && !carrying_.empty() &&
            (carrying_.type != target_.type || carrying_.color != target_.color)) {
          r.terminated = true;
        }
        if (action == kDrop && !carried_before.empty()) {
          const Pos o{agent_.x + kDx[dir_], agent_.y + kDy[dir_]};
          // carrying_ emptied: the object now lies in front (minigrid's `is preCarrying`).
          if (carrying_.empty() && std::abs(o.x - target_pos_.x) <= 1 &&
              std::abs(o.y - target_pos_.y) <= 1) {
            r.reward = success_reward();
          }
          r.terminated = true;
        }
        break;
      case Kind::kRedBlueDoors:
        // Blue opened: a win after red, a loss before; red opened after blue: a loss.
        if (is_open(success_pos_)) {
          r.reward = red_before ? success_reward() : 0.0;
          r.terminated = true;
        } else if (is_open(target_pos_) && blue_before) {
          r.reward = 0.0;
          r.terminated = true;
        }
        break;
      case Kind::kObstructedMaze:
        // The target is the only blue ball (blocking balls are green).
        if (action == kPickup && carrying_.type == kBall && carrying_.color == kBlue) {
          r.reward = success_reward();
          r.terminated = true;
        }
        break;
      case Kind::kUnlockPickup:
      case Kind::kBlockedUnlockPickup:
        // The target is the only box in the grid.
        if (action == kPickup && carrying_.type == kBox) {
          r.reward = success_reward();
          r.terminated = true;
        }
        break;
      default: break;
    }
    write(out);
    return r;
  }

  bool render(RenderData* out) override {
    // What minigrid's get_frame reads (torchfrag/envs/rendering.py puts it into
    // a minigrid env): agent pose, grid size, the carried object's encoding,
    // then the grid's encoding row by row.
    out->state = {static_cast<double>(agent_.x), static_cast<double>(agent_.y),
                  static_cast<double>(dir_), static_cast<double>(grid_.width()),
                  static_cast<double>(grid_.height()), double(carrying_.type),
                  double(carrying_.color), double(carrying_.state)};
    out->state.reserve(out->state.size() + 3 * static_cast<size_t>(grid_.width()) * grid_.height());
    for (int y = 0; y < grid_.height(); ++y) {
      for (int x = 0; x < grid_.width(); ++x) {
        const Cell c = grid_.get(x, y);
        out->state.insert(out->state.end(), {double(c.type), double(c.color), double(c.state)});
      }
    }
    return true;
  }

 private:
  double success_reward() const {
    return 1.0 - 0.9 * (static_cast<double>(step_count_) / static_cast<double>(max_steps_));
  }

  // Whether the cell at `p` is an open door (RedBlueDoors' red and blue doors).
  bool is_open(Pos p) const {
    if (cfg_.kind != Kind::kRedBlueDoors) return false;
    const Cell c = grid_.get(p.x, p.y);
    return c.type == kDoor && c.state == kOpen;
  }

  int rand_int(int low, int high) { return static_cast<int>(np_.integers(low, high)); }
  uint8_t rand_color() { return kColorNames[rand_int(0, 6)]; }

  // minigrid's place_obj: rejection sampling over the rectangle; `reject`
  // filters positions, `max_tries` < 0 means no limit.  False when it gives up.
  template <typename Reject>
  bool place_obj(Cell obj, Pos* where, Pos top, Pos size, Reject reject, int max_tries) {
    top = Pos{std::max(top.x, 0), std::max(top.y, 0)};
    const int hx = std::min(top.x + size.x, grid_.width());
    const int hy = std::min(top.y + size.y, grid_.height());
    for (int tries = 0;; ++tries) {
      if (max_tries >= 0 && tries > max_tries) return false;
      Pos p;
      p.x = rand_int(top.x, hx);
      p.y = rand_int(top.y, hy);
      if (!grid_.get(p.x, p.y).empty()) continue;
      if (p == agent_) continue;
      if (reject(p)) continue;
      grid_.set(p.x, p.y, obj);
      *where = p;
      return true;
    }
  }
  Pos place_obj(Cell obj, Pos top = Pos{0, 0}, Pos size = Pos{-1, -1}, int max_tries = -1) {
    if (size.x < 0) size = Pos{grid_.width(), grid_.height()};
    Pos p;
    if (!place_obj(obj, &p, top, size, [](Pos) { return false; }, max_tries)) {
      throw std::runtime_error("rejection sampling failed in place_obj");
    }
    return p;
  }
  void place_agent(Pos top = Pos{0, 0}, Pos size = Pos{-1, -1}, int max_tries = -1) {
    agent_ = Pos{-1, -1};
    const Pos p = place_obj(kNone, top, size, max_tries);
    agent_ = p;
    dir_ = rand_int(0, 4);
  }

  void gen_grid() {
    const int w = cfg_.width, h = cfg_.height;
    grid_.reset(w, h);
    switch (cfg_.kind) {
      case Kind::kEmpty: gen_empty(w, h); break;
      case Kind::kDoorKey: gen_door_key(w, h); break;
      case Kind::kFourRooms: gen_four_rooms(w, h); break;
      case Kind::kLavaGap: gen_lava_gap(w, h); break;
      case Kind::kCrossing: gen_crossing(w, h); break;
      case Kind::kKeyCorridor: gen_key_corridor(); break;
      case Kind::kMultiRoom: gen_multi_room(w, h); break;
      case Kind::kDynamicObstacles: gen_dynamic_obstacles(w, h); break;
      case Kind::kFetch: gen_fetch(w, h); break;
      case Kind::kGoToDoor: gen_go_to_door(w, h); break;
      case Kind::kMemory: gen_memory(w, h); break;
      case Kind::kDistShift: gen_dist_shift(w, h); break;
      case Kind::kUnlock:
      case Kind::kUnlockPickup:
      case Kind::kBlockedUnlockPickup: gen_unlock(); break;
      case Kind::kRedBlueDoors: gen_red_blue_doors(h); break;
      case Kind::kGoToObject:
      case Kind::kPutNear: gen_objects(w, h); break;
      case Kind::kLockedRoom: gen_locked_room(w, h); break;
      case Kind::kPlayground: gen_playground(w, h); break;
      case Kind::kObstructedMaze: gen_obstructed_maze(); break;
      case Kind::kWFC: gen_wfc(w, h); break;
    }
  }

  // WFCEnv._gen_grid: the solved layout (row r, column c of the wave is cell
  // x = r + 1, y = c + 1: minigrid decodes its (row, column) array as (x, y)).
  void gen_wfc(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    const wfc::Layout layout = wfc_->generate(np_);
    const int cols = w - 2;
    for (int r = 0; r < h - 2; ++r) {
      for (int c = 0; c < cols; ++c) {
        if (layout.wall[static_cast<size_t>(r) * cols + c]) grid_.set(r + 1, c + 1, kWallCell);
      }
    }
    grid_.set(layout.goal_r + 1, layout.goal_c + 1, kGoalCell);
    agent_ = Pos{layout.start_r + 1, layout.start_c + 1};
    dir_ = rand_int(0, 4);
  }

  void gen_empty(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    grid_.set(w - 2, h - 2, kGoalCell);
    if (cfg_.random_start) {
      place_agent();
    } else {
      agent_ = Pos{1, 1};
      dir_ = 0;
    }
  }

  void gen_door_key(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    grid_.set(w - 2, h - 2, kGoalCell);
    const int split = rand_int(2, w - 2);
    grid_.vert_wall(split, 0);
    place_agent(Pos{0, 0}, Pos{split, h});
    const int door = rand_int(1, h - 2);
    grid_.set(split, door, make(kDoor, kYellow, kLocked));
    place_obj(make(kKey, kYellow), Pos{0, 0}, Pos{split, h});
  }

  void gen_four_rooms(int w, int h) {
    grid_.horz_wall(0, 0);
    grid_.horz_wall(0, h - 1);
    grid_.vert_wall(0, 0);
    grid_.vert_wall(w - 1, 0);
    const int rw = w / 2, rh = h / 2;
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 2; ++i) {
        const int xl = i * rw, yt = j * rh, xr = xl + rw, yb = yt + rh;
        if (i + 1 < 2) {
          grid_.vert_wall(xr, yt, rh);
          grid_.set(xr, rand_int(yt + 1, yb), kNone);
        }
        if (j + 1 < 2) {
          grid_.horz_wall(xl, yb, rw);
          grid_.set(rand_int(xl + 1, xr), yb, kNone);
        }
      }
    }
    place_agent();
    place_obj(kGoalCell);
  }

  void gen_lava_gap(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    agent_ = Pos{1, 1};
    dir_ = 0;
    grid_.set(w - 2, h - 2, kGoalCell);
    const int gx = rand_int(2, w - 2);
    const int gy = rand_int(1, h - 1);
    grid_.vert_wall(gx, 1, h - 2, kLavaCell);
    grid_.set(gx, gy, kNone);
  }

  void gen_crossing(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    agent_ = Pos{1, 1};
    dir_ = 0;
    grid_.set(w - 2, h - 2, kGoalCell);
    // Rivers as (vertical?, position), in minigrid's list order before its shuffle.
    std::vector<std::pair<bool, int>> rivers;
    for (int i = 2; i < h - 2; i += 2) rivers.emplace_back(true, i);
    for (int j = 2; j < w - 2; j += 2) rivers.emplace_back(false, j);
    np_.shuffle(rivers);
    rivers.resize(std::min<size_t>(rivers.size(), static_cast<size_t>(cfg_.n)));
    std::vector<int> rv, rh;
    for (const auto& r : rivers) (r.first ? rv : rh).push_back(r.second);
    std::sort(rv.begin(), rv.end());
    std::sort(rh.begin(), rh.end());
    for (int j : rh) {
      for (int i = 1; i < w - 1; ++i) grid_.set(i, j, cfg_.obstacle);
    }
    for (int i : rv) {
      for (int j = 1; j < h - 1; ++j) grid_.set(i, j, cfg_.obstacle);
    }
    // minigrid's path markers: `h` (1) steps to the next column of rooms, `v` (0) to the next row.
    std::vector<char> path;
    path.insert(path.end(), rv.size(), 1);
    path.insert(path.end(), rh.size(), 0);
    np_.shuffle(path);
    std::vector<int> lim_v{0}, lim_h{0};
    lim_v.insert(lim_v.end(), rv.begin(), rv.end());
    lim_v.push_back(h - 1);
    lim_h.insert(lim_h.end(), rh.begin(), rh.end());
    lim_h.push_back(w - 1);
    int ri = 0, rj = 0;
    for (char horizontal : path) {
      int i, j;
      if (horizontal) {
        i = lim_v[ri + 1];
        j = rand_int(lim_h[rj] + 1, lim_h[rj + 1]);
        ++ri;
      } else {
        i = rand_int(lim_v[ri] + 1, lim_v[ri + 1]);
        j = lim_h[rj + 1];
        ++rj;
      }
      grid_.set(i, j, kNone);
    }
  }

  // ---- RoomGrid (KeyCorridor) ----
  struct Room {
    Pos top, size;
    std::array<int, 4> door{0, 0, 0, 0};  // 0: none, 1: opening or door
    std::array<Pos, 4> door_pos{};
    std::array<int, 4> neighbor{-1, -1, -1, -1};
    bool locked = false;
  };

  void gen_dist_shift(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    grid_.set(w - 2, 1, kGoalCell);
    for (int i = 0; i < w - 6; ++i) {
      grid_.set(3 + i, 1, kLavaCell);
      grid_.set(3 + i, cfg_.n, kLavaCell);
    }
    agent_ = Pos{1, 1};
    dir_ = 0;
  }

  // GoToObject and PutNear: cfg_.n distinct (type, colour) objects, PutNear's
  // not next to each other; mission indices as torchfrag/envs/minigrid.py lists them.
  void gen_objects(int w, int h) {
    const bool put_near = cfg_.kind == Kind::kPutNear;
    grid_.wall_rect(0, 0, w, h);
    std::vector<Cell> objs;
    std::vector<Pos> at;
    auto type_index = [](const Cell& c) { return c.type == kKey ? 0 : c.type == kBall ? 1 : 2; };
    while (static_cast<int>(objs.size()) < cfg_.n) {
      const uint8_t type = kObjectTypes[rand_int(0, 3)];  // type first, then colour, as minigrid
      const Cell obj = make(type, rand_color());
      if (std::any_of(objs.begin(), objs.end(), [&obj](const Cell& o) {
            return o.type == obj.type && o.color == obj.color;
          })) {
        continue;
      }
      auto near = [&at, put_near](Pos q) {
        return put_near && std::any_of(at.begin(), at.end(), [q](Pos o) {
                 return std::abs(q.x - o.x) <= 1 && std::abs(q.y - o.y) <= 1;
               });
      };
      Pos p;
      if (!place_obj(obj, &p, Pos{0, 0}, Pos{w, h}, near, -1)) {
        throw std::runtime_error("rejection sampling failed in place_obj");
      }
      objs.push_back(obj);
      at.push_back(p);
    }
    place_agent();
    const int n = static_cast<int>(objs.size());
    const int idx = rand_int(0, n);
    const Cell& chosen = objs[static_cast<size_t>(idx)];
    const int chosen_code = color_name_index(chosen.color) * 3 + type_index(chosen);
    if (!put_near) {
      target_pos_ = at[static_cast<size_t>(idx)];
      mission_ = chosen_code;
      return;
    }
    int other = idx;
    while (other == idx) other = rand_int(0, n);
    target_ = chosen;
    target_pos_ = at[static_cast<size_t>(other)];
    const Cell& near_to = objs[static_cast<size_t>(other)];
    mission_ = chosen_code * 18 + color_name_index(near_to.color) * 3 + type_index(near_to);
  }

  // 3x3 rooms joined by closed doors of random colours, 12 random objects, no task.
  void gen_playground(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    const int rw = w / 3, rh = h / 3;
    for (int j = 0; j < 3; ++j) {
      for (int i = 0; i < 3; ++i) {
        const int xl = i * rw, yt = j * rh, xr = xl + rw, yb = yt + rh;
        if (i + 1 < 3) {
          grid_.vert_wall(xr, yt, rh);
          const int y = rand_int(yt + 1, yb - 1);
          grid_.set(xr, y, make(kDoor, rand_color(), kClosed));
        }
        if (j + 1 < 3) {
          grid_.horz_wall(xl, yb, rw);
          const int x = rand_int(xl + 1, xr - 1);
          grid_.set(x, yb, make(kDoor, rand_color(), kClosed));
        }
      }
    }
    place_agent();
    for (int k = 0; k < 12; ++k) {
      const uint8_t type = kObjectTypes[rand_int(0, 3)];  // type first, then colour, as minigrid
      place_obj(make(type, rand_color()));
    }
  }

  // Six side rooms with coloured doors off a central hall; one is locked and
  // holds the goal, another its key.
  void gen_locked_room(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    const int lw = w / 2 - 2, rw = w / 2 + 2;
    grid_.vert_wall(lw, 0, h);
    grid_.vert_wall(rw, 0, h);
    struct SideRoom {
      Pos top, door;
    };
    std::vector<SideRoom> rooms;
    for (int n = 0; n < 3; ++n) {
      const int j = n * (h / 3);
      grid_.horz_wall(0, j, lw);
      grid_.horz_wall(rw, j, w - rw);
      rooms.push_back({Pos{0, j}, Pos{lw, j + 3}});
      rooms.push_back({Pos{rw, j}, Pos{rw, j + 3}});
    }
    const Pos size{lw + 1, h / 3 + 1};
    // LockedRoom.rand_pos: a cell inside the room's walls, x drawn first.
    auto rand_pos = [&](const SideRoom& r) {
      const int x = rand_int(r.top.x + 1, r.top.x + size.x - 1);
      const int y = rand_int(r.top.y + 1, r.top.y + size.y - 1);
      return Pos{x, y};
    };
    const int locked = rand_int(0, 6);
    const Pos goal = rand_pos(rooms[static_cast<size_t>(locked)]);
    grid_.set(goal.x, goal.y, kGoalCell);
    // Each room draws a colour from those left, in minigrid's sorted-name order.
    std::vector<uint8_t> left(kColorNames.begin(), kColorNames.end());
    std::vector<uint8_t> colors;
    for (size_t k = 0; k < rooms.size(); ++k) {
      const int idx = rand_int(0, static_cast<int>(left.size()));
      colors.push_back(left[static_cast<size_t>(idx)]);
      left.erase(left.begin() + idx);
      grid_.set(rooms[k].door.x, rooms[k].door.y,
                make(kDoor, colors.back(), static_cast<int>(k) == locked ? kLocked : kClosed));
    }
    int key_room = locked;
    while (key_room == locked) key_room = rand_int(0, 6);
    const uint8_t key_color = colors[static_cast<size_t>(locked)];
    const Pos key = rand_pos(rooms[static_cast<size_t>(key_room)]);
    grid_.set(key.x, key.y, make(kKey, key_color));
    place_agent(Pos{lw, 0}, Pos{rw - lw, h});
    mission_ = color_name_index(key_color) * 6 +
               color_name_index(colors[static_cast<size_t>(key_room)]);
  }

  // A room between a red door (target_pos_) and a blue one (success_pos_).
  void gen_red_blue_doors(int size) {
    grid_.wall_rect(0, 0, 2 * size, size);
    grid_.wall_rect(size / 2, 0, size, size);
    place_agent(Pos{size / 2, 0}, Pos{size, size});
    target_pos_ = Pos{size / 2, rand_int(1, size - 1)};
    grid_.set(target_pos_.x, target_pos_.y, make(kDoor, kRed, kClosed));
    success_pos_ = Pos{size / 2 + size - 1, rand_int(1, size - 1)};
    grid_.set(success_pos_.x, success_pos_.y, make(kDoor, kBlue, kClosed));
  }

  // Unlock, UnlockPickup, BlockedUnlockPickup: two rooms, a locked door between.
  void gen_unlock() {
    gen_room_grid(1, 2);
    Cell box;
    if (cfg_.kind != Kind::kUnlock) {
      box = make(kBox, rand_color());
      place_in_room(1, 0, box);
    }
    const uint8_t door_color = rand_color();
    add_door(0, 0, 0, door_color, true);
    target_pos_ = rooms_[0].door_pos[0];
    if (cfg_.kind == Kind::kBlockedUnlockPickup) {
      grid_.set(target_pos_.x - 1, target_pos_.y, make(kBall, rand_color()));
    }
    place_in_room(0, 0, make(kKey, door_color));
    place_agent_in_room(0, 0);
    mission_ = cfg_.kind == Kind::kUnlock ? 0 : color_name_index(box.color);
  }

  // RoomGrid._gen_grid: rows x cols rooms of cfg_.room_size sharing walls, a door
  // position drawn on each inner wall, the agent in the middle room.
  void gen_room_grid(int rows, int cols) {
    const int s = cfg_.room_size;
    room_cols_ = cols;
    rooms_.assign(static_cast<size_t>(rows * cols), Room{});
    auto room = [&](int i, int j) -> Room& { return rooms_[static_cast<size_t>(j * cols + i)]; };
    for (int j = 0; j < rows; ++j) {
      for (int i = 0; i < cols; ++i) {
        Room& r = room(i, j);
        r.top = Pos{i * (s - 1), j * (s - 1)};
        r.size = Pos{s, s};
        grid_.wall_rect(r.top.x, r.top.y, s, s);
      }
    }
    for (int j = 0; j < rows; ++j) {
      for (int i = 0; i < cols; ++i) {
        Room& r = room(i, j);
        const int xl = r.top.x + 1, yl = r.top.y + 1;
        const int xm = r.top.x + s - 1, ym = r.top.y + s - 1;
        if (i < cols - 1) {
          r.neighbor[0] = j * cols + i + 1;
          r.door_pos[0] = Pos{xm, rand_int(yl, ym)};
        }
        if (j < rows - 1) {
          r.neighbor[1] = (j + 1) * cols + i;
          r.door_pos[1] = Pos{rand_int(xl, xm), ym};
        }
        if (i > 0) {
          r.neighbor[2] = j * cols + i - 1;
          r.door_pos[2] = room(i - 1, j).door_pos[0];
        }
        if (j > 0) {
          r.neighbor[3] = (j - 1) * cols + i;
          r.door_pos[3] = room(i, j - 1).door_pos[1];
        }
      }
    }
    agent_ = Pos{cols / 2 * (s - 1) + s / 2, rows / 2 * (s - 1) + s / 2};
    dir_ = 0;
  }

  void gen_key_corridor() {
    const int s = cfg_.room_size, rows = cfg_.n, cols = 3;
    gen_room_grid(rows, cols);
    auto room = [&](int i, int j) -> Room& { return rooms_[static_cast<size_t>(j * cols + i)]; };
    // The corridor: the middle column's rooms open into each other.
    for (int j = 1; j < rows; ++j) {
      Room& r = room(1, j);
      for (int k = 1; k < s - 1; ++k) grid_.set(r.top.x + k, r.top.y, kNone);
      r.door[3] = 1;
      rooms_[static_cast<size_t>(r.neighbor[3])].door[1] = 1;
    }
    const int room_idx = rand_int(0, rows);
    const uint8_t door_color = rand_color();
    add_door(2, room_idx, 2, door_color, true);
    const uint8_t ball_color = rand_color();
    place_in_room(2, room_idx, make(kBall, ball_color));
    const int key_room = rand_int(0, rows);
    place_in_room(0, key_room, make(kKey, door_color));
    place_agent_in_room(1, rows / 2);
    connect_all(rows, cols);
    mission_ = color_name_index(ball_color);
  }

  // RoomGrid.place_agent(i, j): retry until nothing but a wall or floor is in front.
  void place_agent_in_room(int i, int j) {
    const Room& start = rooms_[static_cast<size_t>(j * room_cols_ + i)];
    while (true) {
      place_agent(start.top, start.size, 1000);
      const Cell front = grid_.get(agent_.x + kDx[dir_], agent_.y + kDy[dir_]);
      if (front.empty() || front.type == kWall) break;
    }
  }

  void add_door(int i, int j, int k, uint8_t color, bool locked) {
    Room& r = rooms_[static_cast<size_t>(j * room_cols_ + i)];
    r.locked = locked;
    grid_.set(r.door_pos[k].x, r.door_pos[k].y, make(kDoor, color, locked ? kLocked : kClosed));
    r.door[k] = 1;
    rooms_[static_cast<size_t>(r.neighbor[k])].door[(k + 2) % 4] = 1;
  }

  void place_in_room(int i, int j, Cell obj) {
    const Room& r = rooms_[static_cast<size_t>(j * room_cols_ + i)];
    const Pos a = agent_;
    Pos p;
    // roomgrid's reject_next_to: not within Manhattan distance 1 of the agent.
    auto next_to = [a](Pos q) { return std::abs(a.x - q.x) + std::abs(a.y - q.y) < 2; };
    if (!place_obj(obj, &p, r.top, r.size, next_to, 1000)) {
      throw std::runtime_error("rejection sampling failed in place_obj");
    }
  }

  void connect_all(int rows, int cols) {
    const int s = cfg_.room_size;
    const int start = (agent_.y / (s - 1)) * cols + agent_.x / (s - 1);
    std::vector<char> reach;
    for (int itrs = 0;; ++itrs) {
      if (itrs > 5000) throw std::runtime_error("connect_all failed");
      reach.assign(rooms_.size(), 0);
      std::vector<int> stack{start};
      size_t count = 0;
      while (!stack.empty()) {
        const int r = stack.back();
        stack.pop_back();
        if (reach[static_cast<size_t>(r)]) continue;
        reach[static_cast<size_t>(r)] = 1;
        ++count;
        for (int k = 0; k < 4; ++k) {
          if (rooms_[static_cast<size_t>(r)].door[k]) {
            stack.push_back(rooms_[static_cast<size_t>(r)].neighbor[k]);
          }
        }
      }
      if (count == rooms_.size()) break;
      const int i = rand_int(0, cols);
      const int j = rand_int(0, rows);
      const int k = rand_int(0, 4);
      const Room& r = rooms_[static_cast<size_t>(j * cols + i)];
      if (r.neighbor[k] < 0 || r.door[k]) continue;  // no door position there, or taken
      if (r.locked || rooms_[static_cast<size_t>(r.neighbor[k])].locked) continue;
      const uint8_t color = rand_color();
      add_door(i, j, k, color, false);
    }
  }

  // ---- ObstructedMaze ----
  // A locked door of room (i, j) on wall k; with cfg_.blocked a green ball
  // stands in front of it inside the room (overwriting whatever is there, as
  // minigrid's grid.set does).
  void add_locked_door(int i, int j, int k, uint8_t color) {
    add_door(i, j, k, color, true);
    if (cfg_.blocked) {
      const Pos d = rooms_[static_cast<size_t>(j * room_cols_ + i)].door_pos[k];
      grid_.set(d.x - kDx[k], d.y - kDy[k], make(kBall, kColorNames[1]));
    }
  }
  // The key of a door of `color`, hidden in a grey box with cfg_.key_in_box.
  void add_key(int i, int j, uint8_t color) {
    const Cell key = make(kKey, color);
    place_in_room(i, j, cfg_.key_in_box ? make_box(kColorNames[2], key) : key);
  }

  void gen_obstructed_maze() {
    const bool full = cfg_.quarters > 0;
    gen_room_grid(full ? 3 : 1, full ? 3 : 2);
    // minigrid's _rand_subset(COLOR_NAMES, 6): a random order of the six colours.
    std::vector<uint8_t> left(kColorNames.begin(), kColorNames.end());
    std::vector<uint8_t> door_colors;
    while (!left.empty()) {
      const int idx = rand_int(0, static_cast<int>(left.size()));
      door_colors.push_back(left[static_cast<size_t>(idx)]);
      left.erase(left.begin() + idx);
    }
    const Cell target = make(kBall, kColorNames[0]);
    if (!full) {
      add_locked_door(0, 0, 0, door_colors[0]);
      add_key(0, 0, door_colors[0]);
      place_in_room(1, 0, target);
      place_agent_in_room(0, 0);
      return;
    }
    const Pos side_rooms[4] = {{2, 1}, {1, 2}, {0, 1}, {1, 0}};
    for (int i = 0; i < cfg_.quarters; ++i) {
      const Pos side = side_rooms[i];
      add_door(1, 1, i, door_colors[static_cast<size_t>(i)], false);
      for (int pass = 0; pass < (cfg_.keys_last ? 2 : 1); ++pass) {
        for (int k : {-1, 1}) {
          const int wall = (i + k + 4) % 4;
          // minigrid's (i + k) % 6: Python's modulo, so i = 0, k = -1 is colour 5 on wall 3.
          const uint8_t color = door_colors[static_cast<size_t>((i + k + 6) % 6)];
          // v0: door, ball, key per wall; v1: both doors and balls (pass 0), then both keys.
          if (pass == 0) add_locked_door(side.x, side.y, wall, color);
          if (!cfg_.keys_last || pass == 1) add_key(side.x, side.y, color);
        }
      }
    }
    const Pos corners[4] = {{2, 0}, {2, 2}, {0, 2}, {0, 0}};
    const Pos ball_room = corners[rand_int(0, cfg_.quarters)];
    place_in_room(ball_room.x, ball_room.y, target);
    place_agent_in_room(cfg_.agent_room.x, cfg_.agent_room.y);
  }

  // ---- MultiRoom ----
  struct MRoom {
    Pos top, size, entry;
  };

  bool place_room(int num_left, std::vector<MRoom>& rooms, int min_sz, int max_sz, int entry_wall,
                  Pos entry) {
    const int sx = rand_int(min_sz, max_sz + 1);
    const int sy = rand_int(min_sz, max_sz + 1);
    int tx, ty;
    if (rooms.empty()) {
      tx = entry.x;
      ty = entry.y;
    } else if (entry_wall == 0) {
      tx = entry.x - sx + 1;
      ty = rand_int(entry.y - sy + 2, entry.y);
    } else if (entry_wall == 1) {
      tx = rand_int(entry.x - sx + 2, entry.x);
      ty = entry.y - sy + 1;
    } else if (entry_wall == 2) {
      tx = entry.x;
      ty = rand_int(entry.y - sy + 2, entry.y);
    } else {
      tx = rand_int(entry.x - sx + 2, entry.x);
      ty = entry.y;
    }
    if (tx < 0 || ty < 0) return false;
    if (tx + sx > cfg_.width || ty + sy >= cfg_.height) return false;
    for (size_t k = 0; k + 1 < rooms.size(); ++k) {
      const MRoom& r = rooms[k];
      const bool apart = tx + sx < r.top.x || r.top.x + r.size.x <= tx ||
                         ty + sy < r.top.y || r.top.y + r.size.y <= ty;
      if (!apart) return false;
    }
    rooms.push_back(MRoom{Pos{tx, ty}, Pos{sx, sy}, entry});
    if (num_left == 1) return true;
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::vector<int> walls;
      for (int wl = 0; wl < 4; ++wl) {
        if (wl != entry_wall) walls.push_back(wl);
      }
      const int exit_wall = walls[static_cast<size_t>(rand_int(0, 3))];
      const int next_entry = (exit_wall + 2) % 4;
      Pos exit;
      if (exit_wall == 0) {
        exit = Pos{tx + sx - 1, ty + rand_int(1, sy - 1)};
      } else if (exit_wall == 1) {
        exit = Pos{tx + rand_int(1, sx - 1), ty + sy - 1};
      } else if (exit_wall == 2) {
        exit = Pos{tx, ty + rand_int(1, sy - 1)};
      } else {
        exit = Pos{tx + rand_int(1, sx - 1), ty};
      }
      if (place_room(num_left - 1, rooms, min_sz, max_sz, next_entry, exit)) break;
    }
    return true;
  }

  void gen_multi_room(int w, int) {
    std::vector<MRoom> best;
    const int num_rooms = rand_int(cfg_.n, cfg_.n + 1);
    while (static_cast<int>(best.size()) < num_rooms) {
      std::vector<MRoom> cur;
      Pos entry;
      entry.x = rand_int(0, w - 2);
      entry.y = rand_int(0, w - 2);  // minigrid draws both from the width
      place_room(num_rooms, cur, 4, cfg_.room_size, 2, entry);
      if (cur.size() > best.size()) best = cur;
    }
    int prev_color = -1;
    for (size_t idx = 0; idx < best.size(); ++idx) {
      const MRoom& r = best[idx];
      for (int i = 0; i < r.size.x; ++i) {
        grid_.set(r.top.x + i, r.top.y, kWallCell);
        grid_.set(r.top.x + i, r.top.y + r.size.y - 1, kWallCell);
      }
      for (int j = 0; j < r.size.y; ++j) {
        grid_.set(r.top.x, r.top.y + j, kWallCell);
        grid_.set(r.top.x + r.size.x - 1, r.top.y + j, kWallCell);
      }
      if (idx > 0) {
        std::vector<uint8_t> colors;
        for (uint8_t c : kColorNames) {
          if (c != prev_color) colors.push_back(c);
        }
        const int pick = rand_int(0, static_cast<int>(colors.size()));
        const uint8_t color = colors[static_cast<size_t>(pick)];
        grid_.set(r.entry.x, r.entry.y, make(kDoor, color, kClosed));
        prev_color = color;
      }
    }
    place_agent(best.front().top, best.front().size);
    place_obj(kGoalCell, best.back().top, best.back().size);
  }

  // ---- Dynamic-Obstacles ----
  void gen_dynamic_obstacles(int w, int h) {
    grid_.wall_rect(0, 0, w, h);
    grid_.set(w - 2, h - 2, kGoalCell);
    if (cfg_.random_start) {
      place_agent();
    } else {
      agent_ = Pos{1, 1};
      dir_ = 0;
    }
    for (int k = 0; k < cfg_.n; ++k) {
      obstacles_.push_back(place_obj(make(kBall, kBlue), Pos{0, 0}, Pos{-1, -1}, 100));
    }
  }

  // Each ball tries to hop within its 3x3 neighbourhood; one that finds no
  // free cell in 101 draws stays (minigrid swallows place_obj's error).
  void move_obstacles() {
    for (Pos& old : obstacles_) {
      Pos p;
      if (place_obj(make(kBall, kBlue), &p, Pos{old.x - 1, old.y - 1}, Pos{3, 3},
                    [](Pos) { return false; }, 100)) {
        grid_.set(old.x, old.y, kNone);
        old = p;
      }
    }
  }

  // ---- Fetch ----
  void gen_fetch(int w, int h) {
    grid_.horz_wall(0, 0);
    grid_.horz_wall(0, h - 1);
    grid_.vert_wall(0, 0);
    grid_.vert_wall(w - 1, 0);
    std::vector<Cell> objs;
    while (static_cast<int>(objs.size()) < cfg_.n) {
      const uint8_t type = rand_int(0, 2) == 0 ? kKey : kBall;
      const uint8_t color = kColorNames[static_cast<size_t>(rand_int(0, 6))];
      place_obj(make(type, color));
      objs.push_back(make(type, color));
    }
    place_agent();
    target_ = objs[static_cast<size_t>(rand_int(0, static_cast<int>(objs.size())))];
    const int syntax = rand_int(0, 5);
    mission_ = syntax * 12 + color_name_index(target_.color) * 2 + (target_.type == kKey ? 0 : 1);
  }

  // ---- GoToDoor ----
  void gen_go_to_door(int, int) {
    const int w = rand_int(5, cfg_.width + 1);
    const int h = rand_int(5, cfg_.height + 1);
    grid_.wall_rect(0, 0, w, h);
    std::array<Pos, 4> doors;
    doors[0] = Pos{rand_int(2, w - 2), 0};
    doors[1] = Pos{rand_int(2, w - 2), h - 1};
    doors[2] = Pos{0, rand_int(2, h - 2)};
    doors[3] = Pos{w - 1, rand_int(2, h - 2)};
    std::vector<uint8_t> colors;
    while (colors.size() < 4) {
      const uint8_t c = rand_color();
      if (std::find(colors.begin(), colors.end(), c) == colors.end()) colors.push_back(c);
    }
    for (size_t k = 0; k < 4; ++k) {
      grid_.set(doors[k].x, doors[k].y, make(kDoor, colors[k], kClosed));
    }
    place_agent(Pos{0, 0}, Pos{w, h});
    const int idx = rand_int(0, 4);
    target_pos_ = doors[static_cast<size_t>(idx)];
    mission_ = color_name_index(colors[static_cast<size_t>(idx)]);
  }

  // ---- Memory ----
  void gen_memory(int w, int h) {
    grid_.horz_wall(0, 0);
    grid_.horz_wall(0, h - 1);
    grid_.vert_wall(0, 0);
    grid_.vert_wall(w - 1, 0);
    const int upper = h / 2 - 2, lower = h / 2 + 2;
    const int end = cfg_.random_start ? rand_int(4, w - 2) : w - 3;
    for (int i = 1; i < 5; ++i) {
      grid_.set(i, upper, kWallCell);
      grid_.set(i, lower, kWallCell);
    }
    grid_.set(4, upper + 1, kWallCell);
    grid_.set(4, lower - 1, kWallCell);
    for (int i = 5; i < end; ++i) {
      grid_.set(i, upper + 1, kWallCell);
      grid_.set(i, lower - 1, kWallCell);
    }
    for (int j = 0; j < h; ++j) {
      if (j != h / 2) grid_.set(end, j, kWallCell);
      grid_.set(end + 2, j, kWallCell);
    }
    agent_ = Pos{rand_int(1, end + 1), h / 2};
    dir_ = 0;
    const uint8_t start_obj = rand_int(0, 2) == 0 ? kKey : kBall;
    grid_.set(1, h / 2 - 1, make(start_obj, kGreen));
    // minigrid picks [Ball, Key] or [Key, Ball] for the two ends.
    const uint8_t first = rand_int(0, 2) == 0 ? kBall : kKey;
    const uint8_t second = first == kBall ? kKey : kBall;
    const Pos p0{end + 1, h / 2 - 2}, p1{end + 1, h / 2 + 2};
    grid_.set(p0.x, p0.y, make(first, kGreen));
    grid_.set(p1.x, p1.y, make(second, kGreen));
    if (start_obj == first) {
      success_pos_ = Pos{p0.x, p0.y + 1};
      failure_pos_ = Pos{p1.x, p1.y - 1};
    } else {
      success_pos_ = Pos{p1.x, p1.y - 1};
      failure_pos_ = Pos{p0.x, p0.y + 1};
    }
  }

  // minigrid's MiniGridEnv.step (without its time limit: the pool's
  // max_episode_steps truncates at the same count).
  void base_step(int action, StepResult* r) {
    ++step_count_;
    const Pos fwd{agent_.x + kDx[dir_], agent_.y + kDy[dir_]};
    const Cell cell = grid_.get(fwd.x, fwd.y);
    switch (action) {
      case kLeft: dir_ = (dir_ + 3) % 4; break;
      case kRight: dir_ = (dir_ + 1) % 4; break;
      case kForward:
        if (cell.can_overlap()) agent_ = fwd;
        if (cell.type == kGoal) {
          r->terminated = true;
          r->reward = success_reward();
        }
        if (cell.type == kLava) r->terminated = true;
        break;
      case kPickup:
        if (cell.can_pickup() && carrying_.empty()) {
          carrying_ = cell;
          grid_.set(fwd.x, fwd.y, kNone);
        }
        break;
      case kDrop:
        if (cell.empty() && !carrying_.empty()) {
          grid_.set(fwd.x, fwd.y, carrying_);
          carrying_ = kNone;
        }
        break;
      case kToggle:
        if (cell.type == kDoor) {
          Cell d = cell;
          if (d.state == kLocked) {
            if (carrying_.type == kKey && carrying_.color == d.color) d.state = kOpen;
          } else {
            d.state = d.state == kOpen ? kClosed : kOpen;
          }
          grid_.set(fwd.x, fwd.y, d);
        } else if (cell.type == kBox) {
          grid_.set(fwd.x, fwd.y, cell.content());  // kNone for an empty box
        }
        break;
      default: break;  // done
    }
  }

  // The observation: minigrid's gen_obs_grid + encode, computed in place.
  void write(const Row& out) const {
    // View cell (vx, vy) is world cell t + vx * right - vy * forward, where t is
    // the view's far-left corner (minigrid's get_view_coords, inverted).
    const int dx = kDx[dir_], dy = kDy[dir_];
    const int rx = -dy, ry = dx;
    const int hs = kView / 2;
    const int tx = agent_.x + dx * (kView - 1) - rx * hs;
    const int ty = agent_.y + dy * (kView - 1) - ry * hs;
    Cell view[kView][kView];
    for (int vx = 0; vx < kView; ++vx) {
      for (int vy = 0; vy < kView; ++vy) {
        view[vx][vy] = grid_.get(tx + vx * rx - vy * dx, ty + vx * ry - vy * dy);
      }
    }
    bool mask[kView][kView];
    if (cfg_.see_through_walls) {
      for (auto& col : mask) std::fill(col, col + kView, true);
    } else {
      process_vis(view, mask);
    }
    view[hs][kView - 1] = carrying_;
    uint8_t* img = out.obs<uint8_t>();
    for (int vx = 0; vx < kView; ++vx) {
      for (int vy = 0; vy < kView; ++vy) {
        uint8_t* px = img + (vx * kView + vy) * 3;
        if (mask[vx][vy]) {
          px[0] = view[vx][vy].type;
          px[1] = view[vx][vy].color;
          px[2] = view[vx][vy].state;
        } else {
          px[0] = px[1] = px[2] = 0;
        }
      }
    }
    *out.info<int64_t>(0) = dir_;
    *out.info<int64_t>(1) = mission_;
  }

  // minigrid's Grid.process_vis: light spreads from the agent (bottom middle)
  // row by row towards the top, stopped by cells that cannot be seen behind.
  static void process_vis(const Cell (&view)[kView][kView], bool (&mask)[kView][kView]) {
    for (auto& col : mask) std::fill(col, col + kView, false);
    mask[kView / 2][kView - 1] = true;
    for (int j = kView - 1; j >= 0; --j) {
      for (int i = 0; i < kView - 1; ++i) {
        if (!mask[i][j] || !view[i][j].see_behind()) continue;
        mask[i + 1][j] = true;
        if (j > 0) {
          mask[i + 1][j - 1] = true;
          mask[i][j - 1] = true;
        }
      }
      for (int i = kView - 1; i >= 1; --i) {
        if (!mask[i][j] || !view[i][j].see_behind()) continue;
        mask[i - 1][j] = true;
        if (j > 0) {
          mask[i - 1][j - 1] = true;
          mask[i][j - 1] = true;
        }
      }
    }
  }

  Config cfg_;
  int64_t max_steps_;
  int64_t reference_seed_;
  bool seeded_ = false;
  NumpyRandom np_;
  Grid grid_;
  Pos agent_;
  int dir_ = 0;
  Cell carrying_ = kNone;
  int64_t step_count_ = 0;
  int64_t mission_ = 0;
  std::vector<Pos> obstacles_;
  std::unique_ptr<wfc::Generator> wfc_;  // WFC ids only
  std::vector<Room> rooms_;
  int room_cols_ = 3;
  Cell target_ = kNone;
  Pos target_pos_, success_pos_, failure_pos_;
};

// Every id with minigrid 3.2's registration arguments and default max_steps.
inline const std::map<std::string, Config>& configs() {
  static const std::map<std::string, Config> table = [] {
    std::map<std::string, Config> t;
    auto add = [&t](const std::string& id, Config c) { t["MiniGrid-" + id + "-v0"] = c; };
    auto square = [](Kind k, int size, int steps_per_cell, bool see_through) {
      Config c;
      c.kind = k;
      c.width = c.height = size;
      c.max_steps = steps_per_cell * size * size;
      c.see_through_walls = see_through;
      return c;
    };
    for (int s : {5, 6, 8, 16}) {
      const std::string n = std::to_string(s);
      add("Empty-" + n + "x" + n, square(Kind::kEmpty, s, 4, true));
      add("DoorKey-" + n + "x" + n, square(Kind::kDoorKey, s, 10, false));
      Config d = square(Kind::kDynamicObstacles, s, 4, true);
      d.num_actions = 3;
      d.n = s == 5 ? 2 : s == 6 ? 3 : s == 8 ? 4 : 8;
      add("Dynamic-Obstacles-" + n + "x" + n, d);
      if (s <= 6) {
        Config e = square(Kind::kEmpty, s, 4, true);
        e.random_start = true;
        add("Empty-Random-" + n + "x" + n, e);
        d.random_start = true;
        add("Dynamic-Obstacles-Random-" + n + "x" + n, d);
      }
    }
    Config four = square(Kind::kFourRooms, 19, 0, false);
    four.max_steps = 100;
    add("FourRooms", four);
    for (int s : {5, 6, 7}) {
      add("LavaGapS" + std::to_string(s), square(Kind::kLavaGap, s, 4, false));
    }
    const std::pair<int, int> crossings[] = {{9, 1}, {9, 2}, {9, 3}, {11, 5}};
    for (const auto& sn : crossings) {
      Config c = square(Kind::kCrossing, sn.first, 4, false);
      c.n = sn.second;
      const std::string tail = "S" + std::to_string(sn.first) + "N" + std::to_string(sn.second);
      add("LavaCrossing" + tail, c);
      c.obstacle = kWallCell;
      add("SimpleCrossing" + tail, c);
    }
    const std::pair<int, int> corridors[] = {{3, 1}, {3, 2}, {3, 3}, {4, 3}, {5, 3}, {6, 3}};
    for (const auto& sr : corridors) {
      Config c;
      c.kind = Kind::kKeyCorridor;
      c.room_size = sr.first;
      c.n = sr.second;
      c.width = (sr.first - 1) * 3 + 1;
      c.height = (sr.first - 1) * sr.second + 1;
      c.max_steps = 30 * sr.first * sr.first;
      c.num_missions = 6;
      add("KeyCorridorS" + std::to_string(sr.first) + "R" + std::to_string(sr.second), c);
    }
    // MultiRoom-N4-S5-v0 is configured for 6 rooms in minigrid 3.2 (kept for compatibility).
    const std::tuple<const char*, int, int> multi[] = {
        {"MultiRoom-N2-S4", 2, 4}, {"MultiRoom-N4-S5", 6, 5}, {"MultiRoom-N6", 6, 10}};
    for (const auto& m : multi) {
      Config c = square(Kind::kMultiRoom, 25, 0, false);
      c.n = std::get<1>(m);
      c.room_size = std::get<2>(m);
      c.max_steps = 20 * c.n;
      add(std::get<0>(m), c);
    }
    const std::tuple<const char*, int, int> fetch[] = {
        {"Fetch-5x5-N2", 5, 2}, {"Fetch-6x6-N2", 6, 2}, {"Fetch-8x8-N3", 8, 3}};
    for (const auto& f : fetch) {
      Config c = square(Kind::kFetch, std::get<1>(f), 5, true);
      c.n = std::get<2>(f);
      c.num_missions = 60;
      add(std::get<0>(f), c);
    }
    for (int s : {5, 6, 8}) {
      Config c = square(Kind::kGoToDoor, s, 4, true);
      c.num_missions = 6;
      add("GoToDoor-" + std::to_string(s) + "x" + std::to_string(s), c);
    }
    for (int s : {6, 8}) {
      Config g = square(Kind::kGoToObject, s, 5, true);
      g.n = 2;
      g.num_missions = 18;
      add("GoToObject-" + std::to_string(s) + "x" + std::to_string(s) + "-N2", g);
      Config p = square(Kind::kPutNear, s, 0, true);
      p.n = s == 6 ? 2 : 3;
      p.max_steps = 5 * s;
      p.num_missions = 324;
      add("PutNear-" + std::to_string(s) + "x" + std::to_string(s) + "-N" + std::to_string(p.n), p);
      Config c;
      c.kind = Kind::kRedBlueDoors;
      c.width = 2 * s;
      c.height = s;
      c.max_steps = 20 * s * s;
      add("RedBlueDoors-" + std::to_string(s) + "x" + std::to_string(s), c);
    }
    Config playground = square(Kind::kPlayground, 19, 0, false);
    playground.max_steps = 100;
    add("Playground", playground);
    Config locked = square(Kind::kLockedRoom, 19, 0, false);
    locked.max_steps = 10 * 19;
    locked.num_missions = 36;
    add("LockedRoom", locked);
    for (int row : {2, 5}) {
      Config c;
      c.kind = Kind::kDistShift;
      c.width = 9;
      c.height = 7;
      c.max_steps = 4 * 9 * 7;
      c.see_through_walls = true;
      c.n = row;
      add(row == 2 ? "DistShift1" : "DistShift2", c);
    }
    const std::tuple<const char*, Kind, int> unlock[] = {
        {"Unlock", Kind::kUnlock, 8}, {"UnlockPickup", Kind::kUnlockPickup, 8},
        {"BlockedUnlockPickup", Kind::kBlockedUnlockPickup, 16}};
    for (const auto& u : unlock) {
      Config c;
      c.kind = std::get<1>(u);
      c.room_size = 6;
      c.width = 11;
      c.height = 6;
      c.max_steps = std::get<2>(u) * 36;
      c.num_missions = c.kind == Kind::kUnlock ? 1 : 6;
      add(std::get<0>(u), c);
    }
    // ObstructedMaze: (id, quarters, agent room, key in box, blocked, rooms visited).
    const std::tuple<const char*, int, Pos, bool, bool, int> mazes[] = {
        {"1Dl", 0, Pos{0, 0}, false, false, 2}, {"1Dlh", 0, Pos{0, 0}, true, false, 2},
        {"1Dlhb", 0, Pos{0, 0}, true, true, 2}, {"2Dl", 1, Pos{2, 1}, false, false, 4},
        {"2Dlh", 1, Pos{2, 1}, true, false, 4}, {"2Dlhb", 1, Pos{2, 1}, true, true, 4},
        {"1Q", 1, Pos{1, 1}, true, true, 5},   {"2Q", 2, Pos{2, 1}, true, true, 11},
        {"Full", 4, Pos{1, 1}, true, true, 25}};
    for (const auto& m : mazes) {
      Config c;
      c.kind = Kind::kObstructedMaze;
      c.room_size = 6;
      c.quarters = std::get<1>(m);
      c.width = c.quarters > 0 ? 16 : 11;
      c.height = c.quarters > 0 ? 16 : 6;
      c.agent_room = std::get<2>(m);
      c.key_in_box = std::get<3>(m);
      c.blocked = std::get<4>(m);
      c.max_steps = 4 * std::get<5>(m) * 6 * 6;
      const std::string name = std::string("MiniGrid-ObstructedMaze-") + std::get<0>(m);
      t[name + "-v0"] = c;
      // minigrid 3.2's v1 (keys placed after all doors) exists for the 3x3 layouts
      // with balls: 2Dlhb, 1Q, 2Q, Full.
      if (c.quarters > 0 && c.blocked) {
        c.keys_last = true;
        t[name + "-v1"] = c;
      }
    }
    // WFC: minigrid's default WFC_PRESETS (EnvPool's six), size 25, max_steps 20 * size.
    for (int k = 0; k < static_cast<int>(std::size(wfc_data::kPresets)); ++k) {
      Config c = square(Kind::kWFC, 25, 0, false);
      c.max_steps = 20 * 25;
      c.wfc_preset = k;
      add(std::string("WFC-") + wfc_data::kPresets[k].name, c);
    }
    for (int s : {7, 9, 11, 13, 17}) {
      Config c = square(Kind::kMemory, s, 5, false);
      if (s != 17) add("MemoryS" + std::to_string(s), c);
      if (s >= 13) {
        c.random_start = true;
        add("MemoryS" + std::to_string(s) + "Random", c);
      }
    }
    return t;
  }();
  return table;
}

class MiniGridFamily : public EnvFamily {
 public:
  std::vector<std::string> ids() const override {
    std::vector<std::string> out;
    for (const auto& kv : configs()) out.push_back(kv.first);
    return out;
  }

  EnvSpec spec(const std::string& id, const Options*) const override {
    const Config& c = configs().at(id);
    EnvSpec s;
    s.id = id;
    s.options = {
        in_range(opt_int("reference_seed", -1,
                         "seed minigrid's np_random once with this value, as "
                         "minigrid's reset(seed=reference_seed); -1: from the pool's seed at "
                         "every reset",
                         true),
                 -1, kMaxIntOption),
        in_range(opt_int("max_episode_steps", c.max_steps,
                         "minigrid's max_steps: the time limit and the reward's denominator"),
                 1, kMaxIntOption)};
    s.obs.name = "obs";
    s.obs.dtype = DType::kUInt8;
    s.obs.shape = {kView, kView, 3};
    s.obs.low = {0.0};
    s.obs.high = {255.0};
    ArraySpec direction;
    direction.name = "direction";
    direction.dtype = DType::kInt64;
    direction.low = {0.0};
    direction.high = {3.0};
    ArraySpec mission;
    mission.name = "mission";
    mission.dtype = DType::kInt64;
    mission.low = {0.0};
    mission.high = {static_cast<double>(c.num_missions - 1)};
    s.infos = {direction, mission};
    s.action = discrete_action(c.num_actions);
    s.max_episode_steps = c.max_steps;
    return s;
  }

  std::unique_ptr<Env> make(const std::string& id, const EnvSpec&,
                            const EnvOptions& options) const override {
    return std::make_unique<MiniGridEnv>(configs().at(id), options);
  }
};

}  // namespace minigrid
}  // namespace torchfrag
