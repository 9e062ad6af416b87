// MiniGrid's Wave Function Collapse layouts (minigrid 3.2's WFCEnv), draw for draw.
//
// WFCEnv builds a level in three stages, each reproduced here:
//  1. execute_wfc: an overlapping-model WFC solve of a (rows x cols) wave over
//     the preset's patterns (precomputed by build_tools/wfc_patterns.py into
//     minigrid_wfc_data.h).  Draws: `random((rows, cols)) * 0.1` once (the
//     entropy heuristic's noise), then one `choice(n, p=...)` per observed cell,
//     across up to 1000 attempts that restart on a contradiction.
//  2. The largest 4-connected component of empty cells is kept (the rest
//     becomes wall), as networkx orders components and their nodes.
//  3. `permutation(len(nodes))[:2]` picks start and goal among those nodes, then
//     `integers(0, 4)` the agent's direction.
// The node order of stage 3 is row-major, except when the largest component
// holds less than half of the empty cells: networkx then iterates the node set
// of a subgraph view, i.e. a CPython `set` of (row, col) tuples, so that order
// is reproduced with CPython's tuple hash and set probing (PySetOrder).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "minigrid_wfc_data.h"
#include "numpy_random.h"

namespace torchfrag {
namespace minigrid {
namespace wfc {

// WFCEnv's max_attempts.
constexpr int kAttemptLimit = 1000;
// execute_wfc's direction_offsets as (d_row, d_col).
constexpr int kDr[4] = {0, 1, 0, -1};
constexpr int kDc[4] = {-1, 0, 1, 0};

// The iteration order of a CPython 3.11 `set` of (int, int) tuples built by
// successive `add`s of distinct keys (no deletions): tuple hash (xxHash-style
// lanes), 9 linear probes then perturbed jumps, growth at 3/5 fill to 4x used.
class PySetOrder {
 public:
  void add(int r, int c) {
    const uint64_t h = tuple_hash(r, c);
    size_t mask = table_.size() - 1;
    size_t i = static_cast<size_t>(h) & mask;
    uint64_t perturb = h;
    for (;;) {
      const size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
      for (size_t j = i; j <= i + probes; ++j) {
        if (!table_[j].used) {
          table_[j] = Slot{true, r, c, h};
          ++used_;
          if (used_ * 5 >= mask * 3) resize(used_ * 4);
          return;
        }
      }
      perturb >>= kPerturbShift;
      i = (i * 5 + 1 + perturb) & mask;
    }
  }
  // The keys in iteration order.
  std::vector<std::pair<int, int>> items() const {
    std::vector<std::pair<int, int>> out;
    out.reserve(used_);
    for (const Slot& s : table_) {
      if (s.used) out.emplace_back(s.r, s.c);
    }
    return out;
  }

 private:
  struct Slot {
    bool used = false;
    int r = 0, c = 0;
    uint64_t hash = 0;
  };
  static constexpr size_t kLinearProbes = 9;
  static constexpr int kPerturbShift = 5;

  static uint64_t tuple_hash(int r, int c) {
    constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull;
    constexpr uint64_t kP5 = 2870177450012600261ull;
    uint64_t acc = kP5;
    for (const uint64_t lane : {static_cast<uint64_t>(r), static_cast<uint64_t>(c)}) {
      acc += lane * kP2;
      acc = (acc << 31) | (acc >> 33);
      acc *= kP1;
    }
    acc += 2u ^ (kP5 ^ 3527539ull);
    return acc == ~0ull ? 1546275796ull : acc;
  }

  void resize(size_t min_used) {
    size_t size = 8;
    while (size <= min_used) size <<= 1;
    std::vector<Slot> old(size);
    old.swap(table_);
    const size_t mask = size - 1;
    for (const Slot& s : old) {  // set_insert_clean, in the old table's order
      if (!s.used) continue;
      size_t i = static_cast<size_t>(s.hash) & mask;
      uint64_t perturb = s.hash;
      for (;;) {
        const size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
        size_t j = i;
        while (j < i + probes && table_[j].used) ++j;
        if (!table_[j].used) {
          table_[j] = s;
          break;
        }
        perturb >>= kPerturbShift;
        i = (i * 5 + 1 + perturb) & mask;
      }
    }
  }

  std::vector<Slot> table_ = std::vector<Slot>(8);
  size_t used_ = 0;
};

// What WFCEnv places inside its wall border: walls on (rows x cols), start and goal.
struct Layout {
  std::vector<uint8_t> wall;  // row-major, 1: wall
  int start_r = 0, start_c = 0, goal_r = 0, goal_c = 0;
};

// One preset's solver for a (rows x cols) wave; holds no per-episode state
// between calls except scratch buffers.
class Generator {
 public:
  Generator(const wfc_data::Preset& preset, int rows, int cols)
      : p_(preset), rows_(rows), cols_(cols), cells_(rows * cols) {
    const int n = p_.num_patterns;
    all_ = n == 64 ? ~0ull : (1ull << n) - 1;
    for (int d = 0; d < 4; ++d) {
      reverse_[d].assign(n, 0);
      border_[d] = 0;
      for (int a = 0; a < n; ++a) {
        const uint64_t allowed = p_.adjacency[d * n + a];
        if (allowed) border_[d] |= 1ull << a;
        for (int b = 0; b < n; ++b) {
          if (allowed >> b & 1) reverse_[d][b] |= 1ull << a;
        }
      }
    }
    // The first propagation of every attempt starts from the same full wave:
    // do it once.
    initial_.assign(cells_, all_);
    initial_ok_ = true;
    if (!p_.periodic) {
      for (int c = 0; c < cells_; ++c) {
        for (int d = 0; d < 4; ++d) {
          if (neighbour(c, d) < 0) initial_[c] &= border_[d];
        }
        if (!initial_[c]) initial_ok_ = false;
      }
    }
    if (initial_ok_) {
      queued_.assign(cells_, 1);
      stack_.clear();
      for (int c = 0; c < cells_; ++c) stack_.push_back(c);
      initial_ok_ = propagate(&initial_);
    }
  }

  // Solve attempts of the last generate() (minigrid's stats["attempts"]).
  int attempts() const { return attempts_; }

  // WFCEnv._gen_grid's layout stages (see the file comment); throws like the
  // reference where it fails (no solution in 1000 attempts, no component).
  Layout generate(NumpyRandom& np) {
    Layout out;
    attempts_ = 0;
    solve(np, &out.wall);
    place_start_and_goal(np, &out);
    return out;
  }

 private:
  // The cell next to `c` in direction `d`, -1 outside a non-periodic wave.
  int neighbour(int c, int d) const {
    int r = c / cols_ + kDr[d], k = c % cols_ + kDc[d];
    if (p_.periodic) {
      r = (r + rows_) % rows_;
      k = (k + cols_) % cols_;
    } else if (r < 0 || k < 0 || r >= rows_ || k >= cols_) {
      return -1;
    }
    return r * cols_ + k;
  }

  // Arc consistency to the fixpoint: the same wave as minigrid's repeated
  // whole-wave support passes (both reach the greatest consistent sub-wave).
  // False on a contradiction (a cell without patterns).
  bool propagate(std::vector<uint64_t>* wave) {
    std::vector<uint64_t>& w = *wave;
    while (!stack_.empty()) {
      const int changed = stack_.back();
      stack_.pop_back();
      queued_[changed] = 0;
      for (int d = 0; d < 4; ++d) {
        // The cell whose neighbour in direction d is `changed`.
        const int c = neighbour(changed, (d + 2) % 4);
        if (c < 0) continue;
        uint64_t support = 0;
        for (uint64_t bits = w[changed]; bits; bits &= bits - 1) {
          support |= reverse_[d][__builtin_ctzll(bits)];
        }
        const uint64_t kept = w[c] & support;
        if (kept == w[c]) continue;
        if (!kept) {
          for (const int s : stack_) queued_[s] = 0;
          stack_.clear();
          return false;
        }
        w[c] = kept;
        if (!queued_[c]) {
          queued_[c] = 1;
          stack_.push_back(c);
        }
      }
    }
    return true;
  }

  // makeWeightedPatternHeuristic: `choice(n, p=weights * wave / sum)`.  The
  // weights are whole numbers, so the sum is exact in any order.
  int choose(NumpyRandom& np, uint64_t options) {
    const int n = p_.num_patterns;
    double total = 0.0;
    for (int q = 0; q < n; ++q) {
      if (options >> q & 1) total += p_.weights[q];
    }
    cdf_.resize(n);
    double acc = 0.0;
    for (int q = 0; q < n; ++q) {
      acc += (options >> q & 1) ? p_.weights[q] / total : 0.0;
      cdf_[q] = acc;
    }
    const double last = cdf_[n - 1];
    const double u = np.random();
    for (int q = 0; q < n; ++q) {
      if (cdf_[q] / last > u) return q;  // searchsorted(side="right")
    }
    return n - 1;
  }

  void solve(NumpyRandom& np, std::vector<uint8_t>* walls) {
    prefs_.resize(cells_);
    for (double& x : prefs_) x = np.random() * 0.1;
    for (int attempt = 0; attempt < kAttemptLimit; ++attempt) {
      ++attempts_;
      if (!initial_ok_) continue;  // contradiction before any draw
      wave_ = initial_;
      bool ok = true, first = true;
      for (;;) {
        // entropyLocationHeuristic: argmin of noise + count over unresolved cells.
        int best = -1;
        double best_w = 0.0;
        for (int c = 0; c < cells_; ++c) {
          const int count = __builtin_popcountll(wave_[c]);
          if (count <= 1) continue;
          const double weight = prefs_[c] + static_cast<double>(count);
          if (best < 0 || weight < best_w) {
            best = c;
            best_w = weight;
          }
        }
        if (best < 0) {
          // Solved.  Only if the first propagation resolved every cell does
          // minigrid still observe once (cell (0, 0), one draw).
          if (first) choose(np, wave_[0]);
          break;
        }
        first = false;
        const int pattern = choose(np, wave_[best]);
        wave_[best] = 1ull << pattern;
        queued_[best] = 1;
        stack_.push_back(best);
        if (!propagate(&wave_)) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      walls->resize(cells_);
      for (int c = 0; c < cells_; ++c) {
        (*walls)[c] = static_cast<uint8_t>(p_.walls >> __builtin_ctzll(wave_[c]) & 1);
      }
      return;
    }
    throw std::runtime_error(std::string("MiniGrid-WFC-") + p_.name +
                             ": could not generate a valid pattern within " +
                             std::to_string(kAttemptLimit) + " attempts");
  }

  // _get_largest_component + _place_start_and_goal_random.
  void place_start_and_goal(NumpyRandom& np, Layout* out) {
    std::vector<uint8_t>& wall = out->wall;
    std::vector<int> component(cells_, -1);
    std::vector<int> order;  // cells in BFS order, component after component
    std::vector<int> starts, sizes;
    int empty = 0;
    for (int c = 0; c < cells_; ++c) {
      if (wall[c]) continue;
      ++empty;
      if (component[c] >= 0) continue;
      // networkx's _plain_bfs; neighbours in the dense graph's order: up, left, down, right.
      const int id = static_cast<int>(sizes.size());
      const size_t begin = order.size();
      component[c] = id;
      order.push_back(c);
      for (size_t k = begin; k < order.size(); ++k) {
        const int v = order[k], r = v / cols_, col = v % cols_;
        const int nr[4] = {r - 1, r, r + 1, r}, nc[4] = {col, col - 1, col, col + 1};
        for (int e = 0; e < 4; ++e) {
          if (nr[e] < 0 || nc[e] < 0 || nr[e] >= rows_ || nc[e] >= cols_) continue;
          const int w = nr[e] * cols_ + nc[e];
          if (wall[w] || component[w] >= 0) continue;
          component[w] = id;
          order.push_back(w);
        }
      }
      starts.push_back(static_cast<int>(begin));
      sizes.push_back(static_cast<int>(order.size() - begin));
    }
    // sorted(..., key=len, reverse=True) is stable: the first largest component.
    int best = -1;
    for (int id = 0; id < static_cast<int>(sizes.size()); ++id) {
      if (best < 0 || sizes[id] > sizes[best]) best = id;
    }
    if (best < 0 || sizes[best] < 2) {
      throw std::runtime_error(std::string("MiniGrid-WFC-") + p_.name +
                               ": the layout has no connected pair of empty cells");
    }
    std::vector<std::pair<int, int>> nodes;
    if (2 * sizes[best] < empty) {
      // The subgraph view iterates its node set: the BFS set, copied into a
      // set twice (subgraph(c).copy(), then subgraph(component)).
      PySetOrder bfs;
      for (int k = starts[best]; k < starts[best] + sizes[best]; ++k) {
        bfs.add(order[k] / cols_, order[k] % cols_);
      }
      std::vector<std::pair<int, int>> items = bfs.items();
      for (int copy = 0; copy < 2; ++copy) {
        PySetOrder next;
        for (const auto& rc : items) next.add(rc.first, rc.second);
        items = next.items();
      }
      nodes = std::move(items);
    } else {
      for (int c = 0; c < cells_; ++c) {
        if (component[c] == best) nodes.emplace_back(c / cols_, c % cols_);
      }
    }
    for (int c = 0; c < cells_; ++c) {
      if (component[c] != best) wall[c] = 1;
    }
    std::vector<int> perm(nodes.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int>(k);
    np.shuffle(perm);  // Generator.permutation(n)
    out->start_r = nodes[perm[0]].first;
    out->start_c = nodes[perm[0]].second;
    out->goal_r = nodes[perm[1]].first;
    out->goal_c = nodes[perm[1]].second;
  }

  const wfc_data::Preset& p_;
  int rows_, cols_, cells_;
  uint64_t all_ = 0;
  std::array<std::vector<uint64_t>, 4> reverse_;  // [d][b]: patterns a with b allowed at d
  std::array<uint64_t, 4> border_{};  // patterns with some neighbour allowed at d
  std::vector<uint64_t> initial_, wave_;
  bool initial_ok_ = true;
  int attempts_ = 0;
  std::vector<double> prefs_, cdf_;
  std::vector<int> stack_;
  std::vector<uint8_t> queued_;
};

}  // namespace wfc
}  // namespace minigrid
}  // namespace torchfrag
