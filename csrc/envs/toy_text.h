// Toy-text envs with Gymnasium 1.4's dynamics, rewards, terminations and infos.
//
// Gymnasium builds a full transition table `P[s][a]` in every env and samples
// one entry per step.  Here the same outcomes are computed on the fly from the
// state: the tables would cost kilobytes per env (Taxi: 500 x 6 x 3 entries)
// for work that is a handful of integer operations, and a pool holds
// thousands of envs.  What each step reports (next state, reward,
// termination and the probability `prob` of the outcome taken) is exactly
// the entry of `P[s][a]` that Gymnasium would have sampled; only the random
// numbers differ, since they come from the pool's per-env Rng.
//
// Discrete observations are int64 scalars (Gymnasium's `int(s)`); Blackjack's
// Tuple(Discrete(32), Discrete(11), Discrete(2)) becomes an int64 vector of
// three entries in the tuple's order.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../env.h"

namespace torchfrag {
namespace toy_text {

// A Discrete(n) observation: one int64 in [0, n).
inline ArraySpec discrete_obs(int64_t n) {
  ArraySpec s;
  s.name = "obs";
  s.dtype = DType::kInt64;
  s.shape = {};
  s.low = {0.0};
  s.high = {static_cast<double>(n - 1)};
  return s;
}

// Gymnasium's info "prob": the probability of the transition taken.
inline ArraySpec prob_info() {
  ArraySpec s;
  s.name = "prob";
  s.dtype = DType::kFloat64;
  s.shape = {};
  s.low = {0.0};
  s.high = {1.0};
  return s;
}

// One outcome of a slippery move: the direction actually taken and the
// probability Gymnasium's table gives that branch.
struct Slip {
  int direction;
  double prob;
};

// Gymnasium's slippery grids list the outcomes of action `a` as the
// directions (a - 1) % 4, a, (a + 1) % 4 with probabilities fail, success,
// fail; sampling by the cumulative sum keeps that order.
inline Slip slip(int a, double success, double fail, Rng& rng) {
  const double u = rng.uniform();
  if (u < fail) return {(a + 3) % 4, fail};
  if (u < fail + success) return {a, success};
  return {(a + 1) % 4, fail};
}

// --------------------------------------------------------------- FrozenLake --
class FrozenLake : public Env {
 public:
  // Actions as Gymnasium numbers them.
  enum : int { kLeft = 0, kDown = 1, kRight = 2, kUp = 3 };

  // `map_name` gives the default of the id (FrozenLake-v1: 4x4,
  // FrozenLake8x8-v1: 8x8); everything else is shared.
  static EnvSpec SpecFor(const Options* opts, const char* default_map, int64_t max_steps,
                         double threshold) {
    EnvSpec s;
    s.options = {
        opt_str("map_name", default_map, "predefined map: '4x4' or '8x8'"),
        opt_str("desc", "",
                "custom map as rows of S/F/H/G separated by ',' (e.g. 'SFFF,FHFH,FFFH,HFFG'); "
                "overrides map_name"),
        opt_bool("is_slippery", true, "move perpendicular to the intended direction sometimes"),
        opt_float("success_rate", 1.0 / 3.0,
                  "probability of moving in the intended direction when slippery")};
    const std::vector<std::string> rows =
        opts ? board(opts->str("map_name"), opts->str("desc")) : board(default_map, "");
    s.obs = discrete_obs(static_cast<int64_t>(rows.size() * rows[0].size()));
    s.infos = {prob_info()};
    s.action = discrete_action(4);
    s.max_episode_steps = max_steps;
    s.reward_threshold = threshold;
    return s;
  }

  FrozenLake(const EnvSpec&, const EnvOptions& o)
      : slippery_(o.b("is_slippery")), success_(o.f("success_rate")) {
    if (!(success_ >= 0.0 && success_ <= 1.0)) {
      throw std::invalid_argument("success_rate must be in [0, 1], got " +
                                  format_number(success_));
    }
    // Gymnasium's fail_rate, computed the same way so `prob` matches bit for bit.
    fail_ = (1.0 - success_) / 2.0;
    const auto rows = board(o.s("map_name"), o.s("desc"));
    nrow_ = static_cast<int>(rows.size());
    ncol_ = static_cast<int>(rows[0].size());
    for (const auto& r : rows) tiles_ += r;
    for (int i = 0; i < nrow_ * ncol_; ++i) {
      if (tiles_[i] == 'S') starts_.push_back(i);
    }
  }

  void reset(Rng& rng, const Row& out) override {
    // Gymnasium draws the start uniformly among the S tiles.
    s_ = starts_.size() == 1 ? starts_[0] : starts_[rng.integer(starts_.size())];
    write(out, 1.0);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    StepResult r;
    const char here = tiles_[s_];
    if (here == 'G' || here == 'H') {
      // Gymnasium's table keeps a finished state where it is; the pool resets
      // before this can happen, but a stray step must not move the agent.
      r.terminated = true;
      write(out, 1.0);
      return r;
    }
    int direction = static_cast<int>(a.discrete);
    double prob = 1.0;
    if (slippery_) {
      const Slip sl = slip(direction, success_, fail_, rng);
      direction = sl.direction;
      prob = sl.prob;
    }
    s_ = move(s_, direction);
    const char tile = tiles_[s_];
    r.terminated = tile == 'G' || tile == 'H';
    r.reward = tile == 'G' ? 1.0 : 0.0;
    write(out, prob);
    return r;
  }

  bool render(RenderData* out) override {
    out->state = {static_cast<double>(s_)};
    return true;
  }

 private:
  // The map as rows: `desc` when given, else the named one.
  static std::vector<std::string> board(const std::string& map_name, const std::string& desc) {
    if (desc.empty()) {
      if (map_name == "4x4") return {"SFFF", "FHFH", "FFFH", "HFFG"};
      if (map_name == "8x8") {
        return {"SFFFFFFF", "FFFFFFFF", "FFFHFFFF", "FFFFFHFF",
                "FFFHFFFF", "FHHFFFHF", "FHFFHFHF", "FFFHFFFG"};
      }
      throw std::invalid_argument("map_name must be '4x4' or '8x8', got '" + map_name + "'");
    }
    std::vector<std::string> rows(1);
    for (char c : desc) {
      if (c == ',') {
        rows.emplace_back();
      } else if (c == 'S' || c == 'F' || c == 'H' || c == 'G') {
        rows.back() += c;
      } else {
        throw std::invalid_argument(
            "desc may hold only the tiles S, F, H, G and ',' between rows, got '" + desc + "'");
      }
    }
    bool has_start = false;
    for (const auto& r : rows) {
      if (r.empty() || r.size() != rows[0].size()) {
        throw std::invalid_argument("desc rows must be non-empty and of equal length, got '" +
                                    desc + "'");
      }
      has_start = has_start || r.find('S') != std::string::npos;
    }
    if (!has_start) throw std::invalid_argument("desc needs a start tile 'S', got '" + desc + "'");
    return rows;
  }

  // The cell reached from `s` in `direction`; the border stops the agent.
  int move(int s, int direction) const {
    int row = s / ncol_, col = s % ncol_;
    switch (direction) {
      case kLeft: col = std::max(col - 1, 0); break;
      case kDown: row = std::min(row + 1, nrow_ - 1); break;
      case kRight: col = std::min(col + 1, ncol_ - 1); break;
      default: row = std::max(row - 1, 0); break;
    }
    return row * ncol_ + col;
  }

  void write(const Row& out, double prob) const {
    *out.obs<int64_t>() = s_;
    *out.info<double>(0) = prob;
  }

  bool slippery_;
  double success_, fail_ = 0.0;
  int nrow_ = 0, ncol_ = 0;
  std::string tiles_;  // row-major
  std::vector<int> starts_;
  int s_ = 0;
};

struct FrozenLake4x4 : FrozenLake {
  using FrozenLake::FrozenLake;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, "4x4", 100, 0.70); }
};

struct FrozenLake8x8 : FrozenLake {
  using FrozenLake::FrozenLake;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, "8x8", 200, 0.85); }
};

// ------------------------------------------------------------- CliffWalking --
class CliffWalking : public Env {
 public:
  // Actions as Gymnasium numbers them (clockwise from up).
  enum : int { kUp = 0, kRight = 1, kDown = 2, kLeft = 3 };

  static EnvSpec SpecFor(bool slippery_default) {
    EnvSpec s;
    s.options = {opt_bool("is_slippery", slippery_default,
                          "move in the intended or either perpendicular direction, 1/3 each")};
    s.obs = discrete_obs(kRows * kCols);
    s.infos = {prob_info()};
    s.action = discrete_action(4);
    s.max_episode_steps = 0;  // Gymnasium registers no time limit
    return s;
  }

  CliffWalking(const EnvSpec&, const EnvOptions& o) : slippery_(o.b("is_slippery")) {}

  void reset(Rng&, const Row& out) override {
    s_ = kStart;
    write(out, 1.0);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    int direction = static_cast<int>(a.discrete);
    double prob = 1.0;
    if (slippery_) {
      // Three equally likely branches; Gymnasium's prob is 1 / len(deltas).
      const Slip sl = slip(direction, 1.0 / 3.0, 1.0 / 3.0, rng);
      direction = sl.direction;
      prob = 1.0 / 3.0;
    }
    int row = s_ / kCols, col = s_ % kCols;
    switch (direction) {
      case kUp: row = std::max(row - 1, 0); break;
      case kRight: col = std::min(col + 1, kCols - 1); break;
      case kDown: row = std::min(row + 1, kRows - 1); break;
      default: col = std::max(col - 1, 0); break;
    }
    StepResult r;
    if (row == kRows - 1 && col > 0 && col < kCols - 1) {
      // The cliff: a large penalty and back to the start, but no termination.
      s_ = kStart;
      r.reward = -100.0;
    } else {
      s_ = row * kCols + col;
      r.reward = -1.0;
      r.terminated = s_ == kGoal;
    }
    write(out, prob);
    return r;
  }

  bool render(RenderData* out) override {
    out->state = {static_cast<double>(s_)};
    return true;
  }

 private:
  static constexpr int kRows = 4, kCols = 12;
  static constexpr int kStart = (kRows - 1) * kCols;     // (3, 0)
  static constexpr int kGoal = kRows * kCols - 1;        // (3, 11)

  void write(const Row& out, double prob) const {
    *out.obs<int64_t>() = s_;
    *out.info<double>(0) = prob;
  }

  bool slippery_;
  int s_ = kStart;
};

struct CliffWalkingDry : CliffWalking {
  using CliffWalking::CliffWalking;
  static EnvSpec Spec(const Options*) { return SpecFor(false); }
};

struct CliffWalkingSlippery : CliffWalking {
  using CliffWalking::CliffWalking;
  static EnvSpec Spec(const Options*) { return SpecFor(true); }
};

// --------------------------------------------------------------------- Taxi --
class Taxi : public Env {
 public:
  // 0 south, 1 north, 2 east, 3 west, 4 pickup, 5 dropoff.
  enum : int { kSouth = 0, kNorth = 1, kEast = 2, kWest = 3, kPickup = 4, kDropoff = 5 };

  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.options = {
        opt_bool("is_rainy", false, "moves go sideways with probability 1 - rainy_probability"),
        opt_bool("fickle_passenger", false,
                 "the passenger may change destination on the first move after pickup"),
        opt_float("rainy_probability", 0.8, "probability of moving as intended when rainy"),
        opt_float("fickle_probability", 0.3, "probability that an episode's passenger is fickle")};
    s.obs = discrete_obs(500);
    ArraySpec mask;
    // Gymnasium's mask is int8; the pool has no int8, and uint8 holds the same 0/1.
    mask.name = "action_mask";
    mask.dtype = DType::kUInt8;
    mask.shape = {6};
    mask.low = {0.0};
    mask.high = {1.0};
    s.infos = {prob_info(), mask};
    s.action = discrete_action(6);
    s.max_episode_steps = 200;
    s.reward_threshold = 8.0;
    return s;
  }

  Taxi(const EnvSpec&, const EnvOptions& o)
      : rainy_(o.b("is_rainy")),
        fickle_(o.b("fickle_passenger")),
        rainy_p_(o.f("rainy_probability")),
        fickle_p_(o.f("fickle_probability")) {
    for (const char* name : {"rainy_probability", "fickle_probability"}) {
      const double p = o.f(name);
      if (!(p >= 0.0 && p <= 1.0)) {
        throw std::invalid_argument(std::string(name) + " must be in [0, 1], got " +
                                    format_number(p));
      }
    }
    lateral_p_ = (1.0 - rainy_p_) / 2.0;  // as Gymnasium computes it
  }

  void reset(Rng& rng, const Row& out) override {
    // Uniform over the 300 states whose passenger waits at a pad that is not
    // the destination.
    const int cell = static_cast<int>(rng.integer(25));
    row_ = cell / 5;
    col_ = cell % 5;
    pass_ = static_cast<int>(rng.integer(4));
    dest_ = other_pad(pass_, rng);
    fickle_step_ = fickle_ && rng.uniform() < fickle_p_;
    write(out, 1.0);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    const int act = static_cast<int>(a.discrete);
    const int old_row = row_, old_col = col_, old_pass = pass_;
    StepResult r;
    r.reward = -1.0;
    double prob = 1.0;
    if (act == kPickup) {
      if (pass_ < 4 && at_pad(pass_)) {
        pass_ = 4;
      } else {
        r.reward = -10.0;
      }
    } else if (act == kDropoff) {
      const int pad = pad_here();
      if (pass_ == 4 && pad == dest_) {
        pass_ = dest_;
        r.reward = 20.0;
        r.terminated = true;
      } else if (pass_ == 4 && pad >= 0) {
        pass_ = pad;  // drops the passenger at another pad: no penalty
      } else {
        r.reward = -10.0;
      }
    } else if (!rainy_) {
      if (open(act)) step_to(act);
    } else if (open(act)) {
      // Rainy: the intended move, or a sideways one that walls and the grid
      // edge may block.  A blocked intended move blocks the drift too.
      const double u = rng.uniform();
      if (u < rainy_p_) {
        prob = rainy_p_;
        step_to(act);
      } else {
        prob = lateral_p_;
        const int side = sideways(act, u < rainy_p_ + lateral_p_ ? 0 : 1);
        if (open(side)) step_to(side);
      }
    } else {
      // Gymnasium still lists three branches (all staying put) for a blocked
      // rainy move; report the probability of the one drawn.
      prob = rng.uniform() < rainy_p_ ? rainy_p_ : lateral_p_;
    }
    if (fickle_step_ && old_pass == 4 && (row_ != old_row || col_ != old_col)) {
      fickle_step_ = false;
      dest_ = other_pad(dest_, rng);
    }
    write(out, prob);
    return r;
  }

  bool render(RenderData* out) override {
    out->state = {static_cast<double>(encode())};
    return true;
  }

 private:
  static constexpr int kPads[4][2] = {{0, 0}, {0, 4}, {4, 0}, {4, 3}};  // R, G, Y, B
  // Walls east of a cell: Gymnasium's map "|R: | : :G|" and so on.  A cell
  // (r, c) has a wall on its east side when kEastWall[r][c].
  static constexpr bool kEastWall[5][5] = {{false, true, false, false, true},
                                           {false, true, false, false, true},
                                           {false, false, false, false, true},
                                           {true, false, true, false, true},
                                           {true, false, true, false, true}};

  // A pad index in [0, 4) other than `excluded`, uniformly.
  static int other_pad(int excluded, Rng& rng) {
    const int k = static_cast<int>(rng.integer(3));
    return k < excluded ? k : k + 1;
  }

  // The sideways move of `act` (0: its left, 1: its right), in Gymnasium's
  // convention: south -> east/west, north -> west/east, east -> north/south,
  // west -> south/north.
  static int sideways(int act, int which) {
    static constexpr int kSide[4][2] = {
        {kEast, kWest}, {kWest, kEast}, {kNorth, kSouth}, {kSouth, kNorth}};
    return kSide[act][which];
  }

  // Whether a move leaves the cell: the grid edge blocks north/south, walls
  // and the edge block east/west.
  bool open(int move) const {
    switch (move) {
      case kSouth: return row_ < 4;
      case kNorth: return row_ > 0;
      case kEast: return !kEastWall[row_][col_];
      default: return col_ > 0 && !kEastWall[row_][col_ - 1];
    }
  }

  void step_to(int move) {
    switch (move) {
      case kSouth: ++row_; break;
      case kNorth: --row_; break;
      case kEast: ++col_; break;
      default: --col_; break;
    }
  }

  bool at_pad(int pad) const { return row_ == kPads[pad][0] && col_ == kPads[pad][1]; }
  int pad_here() const {
    for (int k = 0; k < 4; ++k) {
      if (at_pad(k)) return k;
    }
    return -1;
  }

  int encode() const { return ((row_ * 5 + col_) * 5 + pass_) * 4 + dest_; }

  void write(const Row& out, double prob) const {
    *out.obs<int64_t>() = encode();
    *out.info<double>(0) = prob;
    uint8_t* mask = out.info<uint8_t>(1);
    for (int m = 0; m < 4; ++m) mask[m] = open(m) ? 1 : 0;
    mask[kPickup] = pass_ < 4 && at_pad(pass_);
    mask[kDropoff] = pass_ == 4 && pad_here() >= 0;
  }

  bool rainy_, fickle_;
  double rainy_p_, fickle_p_, lateral_p_ = 0.0;
  int row_ = 0, col_ = 0, pass_ = 0, dest_ = 1;
  bool fickle_step_ = false;
};

// ---------------------------------------------------------------- Blackjack --
// Sutton & Barto's blackjack (Example 5.1) on an infinite deck.  Hands are
// kept as counts per card value, which is all Gymnasium's scoring looks at
// (sum, whether an ace is held, whether the hand is exactly {ace, ten}); the
// counts are reported as the infos "player_cards" and "dealer_cards" (index
// v - 1 counts the cards of value v) so tests can score them with Gymnasium's
// own helpers.
class Blackjack : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.options = {opt_bool("natural", false, "a winning natural blackjack pays 1.5"),
                 opt_bool("sab", true,
                          "Sutton & Barto's rules: a natural beats a non-natural dealer hand "
                          "(+1), overrides natural")};
    s.obs.name = "obs";
    s.obs.dtype = DType::kInt64;
    s.obs.shape = {3};
    s.obs.low = {0.0};
    s.obs.high = {31.0, 10.0, 1.0};  // Discrete(32), Discrete(11), Discrete(2)
    for (const char* name : {"player_cards", "dealer_cards"}) {
      ArraySpec cards;
      cards.name = name;
      cards.dtype = DType::kInt64;
      cards.shape = {10};
      cards.low = {0.0};
      s.infos.push_back(cards);
    }
    s.action = discrete_action(2);  // 0 stick, 1 hit
    return s;
  }

  Blackjack(const EnvSpec&, const EnvOptions& o) : natural_(o.b("natural")), sab_(o.b("sab")) {}

  void reset(Rng& rng, const Row& out) override {
    dealer_ = Hand{};
    player_ = Hand{};
    // Gymnasium deals the dealer's two cards first; the first is the one shown.
    dealer_top_ = dealer_.draw(rng);
    dealer_.draw(rng);
    player_.draw(rng);
    player_.draw(rng);
    write(out);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    StepResult r;
    r.terminated = true;
    if (a.discrete == 1) {
      player_.draw(rng);
      r.terminated = player_.bust();
      r.reward = r.terminated ? -1.0 : 0.0;
    } else {
      while (dealer_.total() < 17) dealer_.draw(rng);
      const int p = player_.score(), d = dealer_.score();
      r.reward = p > d ? 1.0 : (p < d ? -1.0 : 0.0);
      if (sab_) {
        if (player_.natural() && !dealer_.natural()) r.reward = 1.0;
      } else if (natural_ && player_.natural() && r.reward == 1.0) {
        r.reward = 1.5;
      }
    }
    write(out);
    return r;
  }

  bool render(RenderData* out) override {
    out->state = {static_cast<double>(player_.total()), static_cast<double>(dealer_top_),
                  player_.usable_ace() ? 1.0 : 0.0};
    return true;
  }

 private:
  struct Hand {
    std::array<int64_t, 10> count{};  // count[v - 1]: cards of value v
    int sum = 0;                      // aces counted as 1
    int cards = 0;

    // One card of an infinite deck: ace to nine once each, four ten-valued.
    int draw(Rng& rng) {
      const int v = std::min(static_cast<int>(rng.integer(13)) + 1, 10);
      ++count[v - 1];
      sum += v;
      ++cards;
      return v;
    }
    bool usable_ace() const { return count[0] > 0 && sum + 10 <= 21; }
    int total() const { return usable_ace() ? sum + 10 : sum; }
    bool bust() const { return total() > 21; }
    int score() const { return bust() ? 0 : total(); }
    bool natural() const { return cards == 2 && count[0] == 1 && count[9] == 1; }
  };

  void write(const Row& out) const {
    int64_t* obs = out.obs<int64_t>();
    obs[0] = player_.total();
    obs[1] = dealer_top_;
    obs[2] = player_.usable_ace() ? 1 : 0;
    std::copy(player_.count.begin(), player_.count.end(), out.info<int64_t>(0));
    std::copy(dealer_.count.begin(), dealer_.count.end(), out.info<int64_t>(1));
  }

  bool natural_, sab_;
  Hand player_, dealer_;
  int dealer_top_ = 0;
};

}  // namespace toy_text
}  // namespace torchfrag
