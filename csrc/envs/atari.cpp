// Atari env family: ALE's C++ engine stepped on the pool's worker threads.
//
// Only exported, non-inline ALEInterface methods are called (plus ALEScreen,
// a plain struct in the headers): the engine comes from the ale-py wheel,
// which may have been compiled with options (SDL, ...) that change the layout
// of ALE's internal classes, so touching their members through inline header
// code could read the wrong bytes.
//
// Reference semantics, chosen so that tests can align step for step:
// - stepping and max-pooling follow Gymnasium's AtariPreprocessing (frame
//   buffers kept across steps, the second-to-last frame into buffer 1, the
//   last into buffer 0, early stop on game over), which is also what EnvPool
//   computes except for the terminal frame of an episode that ends on the
//   second-to-last frame of a skip;
// - resets, no-ops, fire reset, episodic life, reward clipping and the step
//   limit follow EnvPool's AtariEnv;
// - sticky actions follow ALE's StellaEnvironment::act (per emulator frame,
//   keep the previous action with probability p), but draw from the env's own
//   Rng so that trajectories depend only on the pool seed and are reseedable.
#include "atari.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "ale/ale_interface.hpp"

namespace torchfrag {
namespace atari {

namespace {

namespace fs = std::filesystem;

constexpr int kRawHeight = 210;
constexpr int kRawWidth = 160;
constexpr int64_t kDefaultMaxEpisodeSteps = 27000;

// Python's str.title() followed by removing '_': the way ale-py's registration
// turns ROM ids into game names ("space_invaders" -> "SpaceInvaders",
// "tic_tac_toe_3d" -> "TicTacToe3D").
std::string rom_id_to_name(const std::string& rom) {
  std::string out;
  bool prev_letter = false;
  for (char c : rom) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (letter) {
      out += static_cast<char>(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                           : std::toupper(static_cast<unsigned char>(c)));
    } else if (c != '_') {
      out += c;
    }
    prev_letter = letter;
  }
  return out;
}

// The ROM folder of the ale-py whose engine we run: `roms/` next to the
// library that defines the ALE symbols (found with dladdr, so it is always
// the same installation as the engine).  ALE_ROMS_DIR overrides it, as it
// does for ale-py itself.
std::string rom_dir() {
  if (const char* env = std::getenv("ALE_ROMS_DIR")) {
    if (*env) return env;
  }
  Dl_info info;
  void* symbol = reinterpret_cast<void*>(&ale::Logger::setMode);
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return (fs::path(info.dli_fname).parent_path() / "roms").string();
}

void quiet_ale() {
  static std::once_flag once;
  std::call_once(once, [] { ale::Logger::setMode(ale::Logger::Error); });
}

// Size of each game's minimal action set in ALE 0.12.1 (the version the
// preload enforces).  Loading a ROM takes ~0.1 s, and a spec is asked for
// every id (Gymnasium registration at import), so specs read this table;
// tests check it against ALE for every game.
const std::map<std::string, int64_t> kMinimalActions = {
    {"adventure", 18}, {"air_raid", 6}, {"alien", 18}, {"amidar", 10}, {"assault", 7},
    {"asterix", 9}, {"asteroids", 14}, {"atlantis", 4}, {"atlantis2", 4}, {"backgammon", 3},
    {"bank_heist", 18}, {"basic_math", 6}, {"battle_zone", 18}, {"beam_rider", 9},
    {"berzerk", 18}, {"blackjack", 4}, {"bowling", 6}, {"boxing", 18}, {"breakout", 4},
    {"carnival", 6}, {"casino", 4}, {"centipede", 18}, {"chopper_command", 18},
    {"crazy_climber", 9}, {"crossbow", 18}, {"darkchambers", 18}, {"defender", 18},
    {"demon_attack", 6}, {"donkey_kong", 18}, {"double_dunk", 18}, {"earthworld", 18},
    {"elevator_action", 18}, {"enduro", 9}, {"entombed", 18}, {"et", 18}, {"fishing_derby", 18},
    {"flag_capture", 18}, {"freeway", 3}, {"frogger", 5}, {"frostbite", 18}, {"galaxian", 6},
    {"gopher", 8}, {"gravitar", 18}, {"hangman", 18}, {"haunted_house", 18}, {"hero", 18},
    {"human_cannonball", 18}, {"ice_hockey", 18}, {"jamesbond", 18}, {"journey_escape", 16},
    {"kaboom", 4}, {"kangaroo", 18}, {"keystone_kapers", 14}, {"king_kong", 6}, {"klax", 18},
    {"koolaid", 9}, {"krull", 18}, {"kung_fu_master", 14}, {"laser_gates", 18},
    {"lost_luggage", 9}, {"mario_bros", 18}, {"miniature_golf", 18}, {"montezuma_revenge", 18},
    {"mr_do", 10}, {"ms_pacman", 9}, {"name_this_game", 6}, {"othello", 10}, {"pacman", 5},
    {"phoenix", 8}, {"pitfall", 18}, {"pitfall2", 18}, {"pong", 6}, {"pooyan", 6},
    {"private_eye", 18}, {"qbert", 6}, {"riverraid", 18}, {"road_runner", 18}, {"robotank", 18},
    {"seaquest", 18}, {"sir_lancelot", 6}, {"skiing", 3}, {"solaris", 18}, {"space_invaders", 6},
    {"space_war", 18}, {"star_gunner", 18}, {"superman", 18}, {"surround", 5}, {"tennis", 18},
    {"tetris", 5}, {"tic_tac_toe_3d", 10}, {"time_pilot", 10}, {"trondead", 18}, {"turmoil", 12},
    {"tutankham", 8}, {"up_n_down", 6}, {"venture", 18}, {"video_checkers", 5},
    {"video_chess", 10}, {"video_cube", 18}, {"video_pinball", 9}, {"wizard_of_wor", 10},
    {"word_zapper", 18}, {"yars_revenge", 18}, {"zaxxon", 18},
};

// Screens taller than 210 rows in ALE 0.12.1 (all are 160 wide), so that a
// spec asking for the screen's own size (img_height=0, Gymnasium's ALE/ ids)
// needs no ROM load for the games of kMinimalActions; tests check the table.
const std::map<std::string, int64_t> kTallScreens = {
    {"adventure", 250}, {"air_raid", 250}, {"carnival", 214}, {"journey_escape", 230},
    {"keystone_kapers", 250}, {"king_kong", 250}, {"klax", 250}, {"laser_gates", 250},
    {"mr_do", 250}, {"pacman", 250}, {"pooyan", 220}, {"sir_lancelot", 250},
    {"space_war", 250},
};

// Turns ALE palette-index frames into the resized, max-pooled observation in
// one pass, with the arithmetic of OpenCV's INTER_AREA (which Gymnasium's
// AtariPreprocessing and EnvPool use) done exactly in integers.
//
// INTER_AREA (computeResizeAreaTab) weighs source pixel s for destination
// pixel d by overlap/scale, where every overlap is a multiple of 1/dsize, so
// each weight is m/ssize for an integer m: the whole average is an integer
// sum over a common denominator.  OpenCV sums the same weights in float and
// rounds half to even; the exact sum rounded half up differs from it by at
// most one level, and only where the average is within float noise of .5.
//
// Pooling happens on gray (or RGB) values, never on palette indices: a pixel
// is the max of lut[frame_k[pixel]] over the pooled frames, looked up once
// when the frames agree there (most pixels).  The tables come from ALE's own
// getScreenGrayscale/getScreenRGB (see AtariEnv::build_luts), so values are
// exactly what Gymnasium's wrapper sees.
class FrameRenderer {
 public:
  FrameRenderer(int src_h, int src_w, int dst_h, int dst_w, int channels)
      : src_w_(src_w), dst_h_(dst_h), dst_w_(dst_w), cn_(channels) {
    uint32_t den_y = 0, den_x = 0;
    rows_ = taps(src_h, dst_h, &den_y);
    const auto cols = taps(src_w, dst_w, &den_x);
    den_ = den_y * den_x;
    // Columns as a dense table: every destination column gets ncol_ taps on
    // consecutive source columns from col_first_, zero weights padding the
    // shorter ones (acc_ carries ncol_ zeros past the row for them).
    for (const auto& t : cols) {
      ncol_ = std::max(ncol_, t.back().index - t.front().index + 1);
    }
    col_w_.assign(static_cast<size_t>(dst_w) * ncol_, 0);
    for (int dx = 0; dx < dst_w; ++dx) {
      col_first_.push_back(cols[dx].front().index);
      for (const Tap& t : cols[dx]) col_w_[dx * ncol_ + (t.index - col_first_[dx])] = t.weight;
    }
    // 2 * den_ <= 2 * 257 * 160 (the tallest ALE screen), far below 2^32,
    // the divisor range of div_round.
    magic_ = UINT64_MAX / (2 * den_) + 1;
    gray_row_.assign(static_cast<size_t>(src_w), 0);
    acc_.assign(static_cast<size_t>(src_w + ncol_), 0);
  }

  uint8_t lut[3][256] = {};

  // frames: nf (1..3) palette-index frames of src_h x src_w; dst: CHW planes.
  // `prev` describes the previous call (frames and output, or nf == 0 for
  // none): a destination row whose source rows are unchanged in every frame
  // is copied from the previous output instead of recomputed.  Atari screens
  // change in few rows from one step to the next (Pong: the ball and the
  // paddles), so this skips most of the work without changing any result.
  struct Prev {
    const uint8_t* frames[3] = {nullptr, nullptr, nullptr};
    int nf = 0;
    const uint8_t* dst = nullptr;
  };

  void operator()(const uint8_t* const* frames, int nf, uint8_t* dst, const Prev& prev) {
    const size_t plane = static_cast<size_t>(dst_h_) * dst_w_;
    for (int dy = 0; dy < dst_h_; ++dy) {
      const auto& ry = rows_[dy];
      if (prev.nf == nf && prev.dst != nullptr) {
        const size_t off = static_cast<size_t>(ry.front().index) * src_w_;
        const size_t len = static_cast<size_t>(ry.back().index - ry.front().index + 1) * src_w_;
        bool same = true;
        for (int k = 0; k < nf && same; ++k) {
          same = frames[k] == prev.frames[k] ||
                 std::memcmp(frames[k] + off, prev.frames[k] + off, len) == 0;
        }
        if (same) {
          if (prev.dst != dst) {
            for (int c = 0; c < cn_; ++c) {
              const size_t at = c * plane + static_cast<size_t>(dy) * dst_w_;
              std::memcpy(dst + at, prev.dst + at, static_cast<size_t>(dst_w_));
            }
          }
          continue;
        }
      }
      for (int c = 0; c < cn_; ++c) {
        render_row(frames, nf, dy, lut[c], dst + c * plane + static_cast<size_t>(dy) * dst_w_);
      }
    }
  }

 private:
  struct Tap {
    int index;
    uint32_t weight;
  };

  void render_row(const uint8_t* const* frames, int nf, int dy, const uint8_t* table,
                  uint8_t* out) {
    // Vertical pass: weighted column sums of the pooled source rows
    // (<= den_y * 255 < 2^16 since den_y <= 257 for every ALE screen).
    std::fill(acc_.begin(), acc_.begin() + src_w_, 0);
    for (const Tap& t : rows_[dy]) {
      pooled_row(frames, nf, t.index, table);
      const uint16_t w = static_cast<uint16_t>(t.weight);
      uint16_t* acc = acc_.data();
      const uint8_t* g = gray_row_.data();
      for (int x = 0; x < src_w_; ++x) acc[x] = static_cast<uint16_t>(acc[x] + w * g[x]);
    }
    // Horizontal pass.  Shrinking 160 columns to 84 (the usual case) needs at
    // most 3 taps per column: a fixed count the compiler unrolls.
    if (ncol_ == 3) {
      horizontal<3>(out);
    } else {
      horizontal<0>(out);
    }
  }

  // Weighted sums of acc_ over each column's taps, rounded half up.
  // kTaps: the tap count known at compile time, or 0 for ncol_.
  template <int kTaps>
  void horizontal(uint8_t* out) const {
    const int n = kTaps > 0 ? kTaps : ncol_;
    const uint32_t* w = col_w_.data();
    for (int dx = 0; dx < dst_w_; ++dx, w += n) {
      const uint16_t* s = acc_.data() + col_first_[dx];
      uint32_t sum = 0;
      for (int k = 0; k < n; ++k) sum += w[k] * s[k];
      out[dx] = static_cast<uint8_t>(div_round(2 * sum + den_));
    }
  }

  // x / (2 * den_) without a division instruction (a third of the render
  // time went to it): a multiply by the 64-bit reciprocal, exact for every
  // 32-bit x and divisor (Lemire, Kaser and Kurz, "Faster remainder by
  // direct computation", 2019).  Here x <= 2 * 255 * den_ + den_ < 2^26.
  uint32_t div_round(uint32_t x) const {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(magic_) * x) >> 64);
  }

  // Row y of the max over frames of lut[index], into gray_row_.
  void pooled_row(const uint8_t* const* frames, int nf, int y, const uint8_t* table) {
    const size_t off = static_cast<size_t>(y) * src_w_;
    uint8_t* g = gray_row_.data();
    const uint8_t* a = frames[0] + off;
    if (nf == 1) {
      for (int x = 0; x < src_w_; ++x) g[x] = table[a[x]];
      return;
    }
    const uint8_t* b = frames[1] + off;
    const uint8_t* c = nf > 2 ? frames[2] + off : b;
    auto max3 = [&](int x) { return std::max({table[a[x]], table[b[x]], table[c[x]]}); };
    // Consecutive frames mostly agree: where 8 pixels agree in every frame,
    // one lookup each; elsewhere the max, without branches (a branch per
    // pixel on "do the frames differ here" mispredicts at every edge).
    int x = 0;
    for (; x + 8 <= src_w_; x += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, a + x, 8);
      std::memcpy(&wb, b + x, 8);
      std::memcpy(&wc, c + x, 8);
      if (((wa ^ wb) | (wb ^ wc)) == 0) {
        for (int k = x; k < x + 8; ++k) g[k] = table[a[k]];
      } else {
        for (int k = x; k < x + 8; ++k) g[k] = max3(k);
      }
    }
    for (; x < src_w_; ++x) g[x] = max3(x);
  }

  // INTER_AREA weights of one axis as integers m over the common
  // denominator ssize, reduced by their gcd.
  static std::vector<std::vector<Tap>> taps(int ssize, int dsize, uint32_t* den) {
    std::vector<std::vector<Tap>> out(static_cast<size_t>(dsize));
    uint32_t g = static_cast<uint32_t>(ssize);
    for (int d = 0; d < dsize; ++d) {
      // In units of 1/dsize: destination d spans [d*ssize, (d+1)*ssize),
      // source s spans [s*dsize, (s+1)*dsize).
      const int64_t lo = static_cast<int64_t>(d) * ssize, hi = lo + ssize;
      for (int64_t s = lo / dsize; s * dsize < hi && s < ssize; ++s) {
        const int64_t m = std::min<int64_t>(hi, (s + 1) * dsize) - std::max<int64_t>(lo, s * dsize);
        if (m <= 0) continue;
        out[d].push_back({static_cast<int>(s), static_cast<uint32_t>(m)});
        g = std::gcd(g, static_cast<uint32_t>(m));
      }
    }
    for (auto& taps_d : out) {
      for (auto& t : taps_d) t.weight /= g;
    }
    *den = static_cast<uint32_t>(ssize) / g;
    return out;
  }

  int src_w_, dst_h_, dst_w_, cn_;
  uint32_t den_ = 1;
  uint64_t magic_ = 0;  // reciprocal of 2 * den_ for div_round
  std::vector<std::vector<Tap>> rows_;
  int ncol_ = 1;
  std::vector<int> col_first_;
  std::vector<uint32_t> col_w_;  // dst_w_ x ncol_
  std::vector<uint8_t> gray_row_;
  std::vector<uint16_t> acc_;
};

struct Config {
  int frame_skip, stack_num, height, width;
  bool gray;
  // Gymnasium's raw ALE/<Game>-v5 face: the last frame (no max-pool, no early
  // stop on game over) and [H, W, C] observations.
  bool max_pool, channels_last;
  int noop_max;
  bool episodic_life, reward_clip, use_fire_reset, full_action_space;
  double repeat_action_probability;
  int64_t max_episode_steps;
  int64_t mode, difficulty;
};

int64_t num(const Options* o, const char* name, int64_t def) {
  return o ? static_cast<int64_t>(o->num(name)) : def;
}

Config read_config(const Options* o) {
  Config c;
  c.frame_skip = static_cast<int>(num(o, "frame_skip", 4));
  c.stack_num = static_cast<int>(num(o, "stack_num", 4));
  c.height = static_cast<int>(num(o, "img_height", 84));
  c.width = static_cast<int>(num(o, "img_width", 84));
  c.gray = num(o, "gray_scale", 1) != 0;
  c.max_pool = num(o, "max_pool", 1) != 0;
  c.channels_last = num(o, "channels_last", 0) != 0;
  c.noop_max = static_cast<int>(num(o, "noop_max", 30));
  c.episodic_life = num(o, "episodic_life", 0) != 0;
  c.reward_clip = num(o, "reward_clip", 0) != 0;
  c.use_fire_reset = num(o, "use_fire_reset", 1) != 0;
  c.full_action_space = num(o, "full_action_space", 0) != 0;
  c.repeat_action_probability = o ? o->num("repeat_action_probability") : 0.0;
  c.max_episode_steps = num(o, "max_episode_steps", kDefaultMaxEpisodeSteps);
  c.mode = num(o, "mode", -1);
  c.difficulty = num(o, "difficulty", -1);
  auto check = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument(msg);
  };
  check(c.frame_skip >= 1, "frame_skip must be >= 1, got " + std::to_string(c.frame_skip));
  check(c.stack_num >= 1, "stack_num must be >= 1, got " + std::to_string(c.stack_num));
  // INTER_AREA only averages when shrinking (OpenCV switches to bilinear
  // when enlarging); the 210x160 screen is never enlarged here.  0 is the
  // game's own screen size (210 rows for most games, more for a few).
  check(c.height >= 0 && c.height <= kRawHeight && c.width >= 0 && c.width <= kRawWidth,
        "img_height must be in [0, 210] and img_width in [0, 160] (0: the screen's own size), got " +
            std::to_string(c.height) + "x" + std::to_string(c.width));
  check(c.noop_max >= 0, "noop_max must be >= 0, got " + std::to_string(c.noop_max));
  check(c.repeat_action_probability >= 0.0 && c.repeat_action_probability <= 1.0,
        "repeat_action_probability must be in [0, 1], got " +
            std::to_string(c.repeat_action_probability));
  check(c.max_episode_steps >= 0,
        "max_episode_steps must be >= 0, got " + std::to_string(c.max_episode_steps));
  check(c.mode >= -1, "mode must be -1 (the game's default) or an available mode");
  check(c.difficulty >= -1, "difficulty must be -1 (the game's default) or an available one");
  return c;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

class AtariEnv : public Env {
 public:
  AtariEnv(const std::string& id, const std::string& rom, const Config& c)
      : c_(c), channels_(c.gray ? 1 : 3) {
    quiet_ale();
    ale_ = std::make_unique<ale::ALEInterface>();
    // Sticky actions are applied here with the env's own Rng (see the top of
    // the file); ALE's own RNG stays unused.
    ale_->setFloat("repeat_action_probability", 0.0f);
    ale_->setInt("random_seed", 0);
    ale_->loadROM(rom);
    // Most games draw 210 rows; some (Adventure, Pacman, Pooyan, ...) more.
    screen_h_ = static_cast<int>(ale_->getScreen().height());
    screen_w_ = static_cast<int>(ale_->getScreen().width());
    screen_bytes_ = static_cast<size_t>(screen_h_) * screen_w_;
    if (c_.height == 0) c_.height = screen_h_;
    if (c_.width == 0) c_.width = screen_w_;
    frame_bytes_ = static_cast<size_t>(c_.height) * c_.width * channels_;
    if (c_.height > screen_h_ || c_.width > screen_w_) {
      throw std::invalid_argument(id + ": img_height x img_width must not exceed the " +
                                  std::to_string(screen_h_) + "x" + std::to_string(screen_w_) +
                                  " screen, got " + std::to_string(c_.height) + "x" +
                                  std::to_string(c_.width));
    }
    render_ = std::make_unique<FrameRenderer>(screen_h_, screen_w_, c_.height, c_.width,
                                              channels_);
    if (c.mode >= 0) {
      std::vector<int64_t> modes;
      for (auto m : ale_->getAvailableModes()) modes.push_back(m);
      if (std::find(modes.begin(), modes.end(), c.mode) == modes.end()) {
        throw std::invalid_argument(id + ": mode " + std::to_string(c.mode) +
                                    " is not available; available modes: " + join(modes));
      }
      ale_->setMode(static_cast<ale::game_mode_t>(c.mode));
    }
    if (c.difficulty >= 0) {
      std::vector<int64_t> levels;
      for (auto d : ale_->getAvailableDifficulties()) levels.push_back(d);
      if (std::find(levels.begin(), levels.end(), c.difficulty) == levels.end()) {
        throw std::invalid_argument(id + ": difficulty " + std::to_string(c.difficulty) +
                                    " is not available; available difficulties: " +
                                    join(levels));
      }
      ale_->setDifficulty(static_cast<ale::difficulty_t>(c.difficulty));
    }
    action_set_ = c.full_action_space ? ale_->getLegalActionSet() : ale_->getMinimalActionSet();
    // Only games whose action set has FIRE get a fire reset (EnvPool #221).
    fire_reset_ = c.use_fire_reset && std::find(action_set_.begin(), action_set_.end(),
                                                ale::PLAYER_A_FIRE) != action_set_.end();
    build_luts();
    for (int k = 0; k < 2; ++k) {
      a_[k].assign(screen_bytes_, 0);
      b_[k].assign(screen_bytes_, 0);
    }
    stack_.assign(frame_bytes_ * static_cast<size_t>(c.stack_num), 0);
  }

  // Asked for by the user: always a new game, even after a life loss under
  // episodic life (EnvPool and Gymnasium's AtariPreprocessing do the same), so
  // that reset(seed=s) is reproducible.
  void explicit_reset(Rng& rng, const Row& out) override {
    continue_game_ = false;
    reset(rng, out);
  }

  void reset(Rng& rng, const Row& out) override {
    // The pool's auto-reset after a life loss under episodic life continues
    // the game; any other reset (game over, time limit) restarts it.
    bool full = !continue_game_;
    continue_game_ = false;
    if (full) restart();
    int noops = c_.noop_max > 0 ? 1 + static_cast<int>(rng.integer(c_.noop_max)) : 0;
    if (fire_reset_ && noops > 0) --noops;  // the FIRE frame counts as one no-op
    for (int k = 0; k < noops; ++k) {
      act_frame(ale::PLAYER_A_NOOP, rng);
      if (ale_->game_over(false)) {
        restart();
        full = true;
      }
    }
    if (fire_reset_) act_frame(ale::PLAYER_A_FIRE, rng);
    lives_ = ale_->lives();
    // Gymnasium: buffer 0 <- this screen, buffer 1 <- zeros (pooling with
    // zeros is the screen itself).  The buffer being overwritten may be the
    // one the last observation came from: forget it.
    prev_.nf = 0;
    copy_screen(b_[cur_]);
    prev_has_a_ = false;
    const uint8_t* frames[1] = {b_[cur_].data()};
    push_frame(frames, 1, full);
    write(out, 0.0f, false);
  }

  StepResult step(const Action& action, Rng& rng, const Row& out) override {
    const ale::Action a = action_set_[static_cast<size_t>(action.discrete)];
    const int next = cur_ ^ 1;
    int reward = 0;
    bool game_over = false, got_a = false, got_b = false;
    if (!c_.max_pool) return step_last_frame(a, rng, out);
    for (int t = 0; t < c_.frame_skip; ++t) {
      reward += act_frame(a, rng);
      game_over = ale_->game_over(false);
      if (game_over) break;
      if (t == c_.frame_skip - 2) {
        copy_screen(a_[next]);
        got_a = true;
      } else if (t == c_.frame_skip - 1) {
        copy_screen(b_[next]);
        got_b = true;
      }
    }
    // Which frames the observation pools, as Gymnasium's buffers would hold
    // them: normally the last two; after an early game over the buffers
    // still hold (part of) the previous step's frames.
    const uint8_t* frames[3];
    int nf = 0;
    if (got_b) {
      if (got_a) frames[nf++] = a_[next].data();
      frames[nf++] = b_[next].data();
      cur_ = next;
      prev_has_a_ = got_a;
    } else {
      if (got_a) frames[nf++] = a_[next].data();  // ended on the last frame
      if (prev_has_a_) frames[nf++] = a_[cur_].data();
      frames[nf++] = b_[cur_].data();
    }
    push_frame(frames, nf, false);
    if (!got_b) prev_.nf = 0;  // buffers out of their usual rotation; a reset follows
    return finish_step(reward, game_over, out);
  }

  // ale-py's AtariEnv.step (Gymnasium's ALE/<Game>-v5): every one of the
  // frame_skip frames is emulated even after a game over, and the
  // observation is the last screen, not pooled.
  StepResult step_last_frame(ale::Action a, Rng& rng, const Row& out) {
    int reward = 0;
    for (int t = 0; t < c_.frame_skip; ++t) reward += act_frame(a, rng);
    const int next = cur_ ^ 1;
    copy_screen(b_[next]);
    cur_ = next;
    prev_has_a_ = false;
    const uint8_t* frames[1] = {b_[next].data()};
    push_frame(frames, 1, false);
    return finish_step(reward, ale_->game_over(false), out);
  }

  StepResult finish_step(int reward, bool game_over, const Row& out) {
    ++elapsed_;
    const int lives = ale_->lives();
    const bool life_lost = lives < lives_ && lives > 0;
    lives_ = lives;

    StepResult r;
    r.reward = c_.reward_clip ? static_cast<double>((reward > 0) - (reward < 0)) : reward;
    r.terminated = game_over || (c_.episodic_life && life_lost);
    // Counted per game, across the lives of episodic life (as EnvPool does);
    // the pool's own count restarts with every episode and is never earlier.
    r.truncated = c_.max_episode_steps > 0 && elapsed_ >= c_.max_episode_steps;
    continue_game_ = c_.episodic_life && life_lost && !game_over && !r.truncated;
    write(out, static_cast<float>(reward), game_over);
    return r;
  }

  // The raw screen as ALE renders it (what Gymnasium's AtariEnv.render()
  // returns): RGB, full size, the last emulated frame, no pooling.
  bool render(RenderData* out) override {
    out->height = screen_h_;
    out->width = screen_w_;
    out->rgb.resize(screen_bytes_ * 3);
    ale_->getScreenRGB(out->rgb);
    return true;
  }

 private:

  void restart() {
    ale_->reset_game();
    elapsed_ = 0;
    // ALE's soft reset forgets the previous action; sticky actions start from NOOP.
    current_ = ale::PLAYER_A_NOOP;
  }

  // One emulator frame with sticky actions.
  int act_frame(ale::Action a, Rng& rng) {
    if (c_.repeat_action_probability <= 0.0 || rng.uniform() >= c_.repeat_action_probability) {
      current_ = a;
    }
    return ale_->act(current_, 1.0f);
  }

  const ale::ALEScreen& screen() const {
    const ale::ALEScreen& s = ale_->getScreen();
    if (s.height() != static_cast<size_t>(screen_h_) || s.width() != static_cast<size_t>(screen_w_)) {
      throw std::runtime_error("unexpected ALE screen size " + std::to_string(s.height()) + "x" +
                               std::to_string(s.width()));
    }
    return s;
  }

  void copy_screen(std::vector<uint8_t>& dst) const {
    std::memcpy(dst.data(), ale_->getScreen().getArray(), screen_bytes_);
  }

  // Palette index -> gray / R, G, B, read from ALE itself: write the 256
  // indices into the (output-only) screen copy, convert it with ALE's own
  // getScreenGrayscale/getScreenRGB, and put the pixels back.  The palette
  // is fixed once the ROM is loaded.
  void build_luts() {
    const ale::ALEScreen& s = screen();
    uint8_t* px = s.getArray();
    std::vector<uint8_t> saved(px, px + 256);
    for (int i = 0; i < 256; ++i) px[i] = static_cast<uint8_t>(i);
    std::vector<unsigned char> out;
    if (c_.gray) {
      ale_->getScreenGrayscale(out);
      for (int i = 0; i < 256; ++i) render_->lut[0][i] = out[i];
    } else {
      ale_->getScreenRGB(out);
      for (int i = 0; i < 256; ++i) {
        for (int ch = 0; ch < 3; ++ch) render_->lut[ch][i] = out[3 * i + ch];
      }
    }
    std::memcpy(px, saved.data(), 256);
  }

  // Pool and resize into the next stack slot; on a fresh game fill every
  // slot with this frame (Gymnasium's FrameStackObservation padding="reset").
  void push_frame(const uint8_t* const* frames, int nf, bool fill) {
    head_ = (head_ + 1) % c_.stack_num;
    uint8_t* slot = stack_.data() + static_cast<size_t>(head_) * frame_bytes_;
    (*render_)(frames, nf, slot, prev_);
    prev_.nf = nf;
    for (int k = 0; k < nf; ++k) prev_.frames[k] = frames[k];
    prev_.dst = slot;
    if (fill) {
      for (int k = 0; k < c_.stack_num; ++k) {
        if (k != head_) std::memcpy(stack_.data() + k * frame_bytes_, slot, frame_bytes_);
      }
    }
  }

  void write(const Row& out, float unclipped, bool game_over) {
    // Oldest frame first; head_ holds the newest.
    uint8_t* obs = out.obs<uint8_t>();
    if (c_.channels_last) {
      // [H, W, stack * C]: pixel-major, the stacked frames' channels innermost.
      const size_t plane = static_cast<size_t>(c_.height) * c_.width;
      const size_t depth = static_cast<size_t>(c_.stack_num) * channels_;
      for (int k = 0; k < c_.stack_num; ++k) {
        const uint8_t* frame = stack_.data() + ((head_ + 1 + k) % c_.stack_num) * frame_bytes_;
        for (int ch = 0; ch < channels_; ++ch) {
          const uint8_t* src = frame + ch * plane;
          uint8_t* dst = obs + static_cast<size_t>(k) * channels_ + ch;
          for (size_t px = 0; px < plane; ++px) dst[px * depth] = src[px];
        }
      }
    } else {
      for (int k = 0; k < c_.stack_num; ++k) {
        const int src = (head_ + 1 + k) % c_.stack_num;
        std::memcpy(obs + k * frame_bytes_, stack_.data() + src * frame_bytes_, frame_bytes_);
      }
    }
    *out.info<int32_t>(0) = lives_;
    *out.info<float>(1) = unclipped;
    *out.info<bool>(2) = game_over;
  }

  Config c_;
  int channels_;
  size_t frame_bytes_ = 0;  // set once the ROM's screen size is known
  int screen_h_ = 0, screen_w_ = 0;
  size_t screen_bytes_ = 0;
  std::unique_ptr<FrameRenderer> render_;  // built once the ROM's screen size is known
  FrameRenderer::Prev prev_;  // what the last observation was rendered from
  std::unique_ptr<ale::ALEInterface> ale_;
  ale::ActionVect action_set_;
  bool fire_reset_ = false;
  ale::Action current_ = ale::PLAYER_A_NOOP;
  // Palette-index frames: a_ (second-to-last of a step), b_ (last); two of
  // each so the previous step's pair survives a step that ends early.
  std::vector<uint8_t> a_[2], b_[2];
  int cur_ = 0;
  bool prev_has_a_ = false;
  std::vector<uint8_t> stack_;
  int head_ = 0;
  int lives_ = 0;
  int64_t elapsed_ = 0;
  bool continue_game_ = false;
};

ArraySpec info_spec(const char* name, DType dtype, double low, double high) {
  ArraySpec s;
  s.name = name;
  s.dtype = dtype;
  s.shape = {};
  s.low = {low};
  s.high = {high};
  return s;
}

}  // namespace

const std::map<std::string, std::string>& AtariFamily::games() const {
  std::call_once(games_once_, [this] {
    quiet_ale();
    const std::string dir = rom_dir();
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return;  // no ROMs: no Atari ids
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const fs::path& p = entry.path();
      if (p.extension() != ".bin") continue;
      // ale-py ships a few ROMs this ALE cannot wrap as single-player games
      // (combat, joust, maze_craze, warlords; ale-py registers none of them);
      // loading one would make ALE call std::exit, so they get no id.
      if (!ale::ALEInterface::isSupportedROM(p).has_value()) continue;
      games_[rom_id_to_name(p.stem().string()) + "-v5"] = p.string();
    }
  });
  return games_;
}

std::vector<std::string> AtariFamily::ids() const {
  std::vector<std::string> out;
  for (const auto& kv : games()) out.push_back(kv.first);
  return out;
}

std::string AtariFamily::rom_path(const std::string& id) const {
  const auto& g = games();
  auto it = g.find(id);
  if (it == g.end()) throw std::invalid_argument("unknown Atari game '" + id + "'");
  return it->second;
}

int64_t AtariFamily::minimal_actions(const std::string& id) const {
  const std::string rom = fs::path(rom_path(id)).stem().string();
  auto known = kMinimalActions.find(rom);
  if (known != kMinimalActions.end()) return known->second;
  // A ROM this table does not know (ALE_ROMS_DIR pointing elsewhere): load
  // it once and remember.
  std::lock_guard<std::mutex> lock(probe_mu_);
  auto it = probed_.find(rom);
  if (it != probed_.end()) return it->second;
  quiet_ale();
  ale::ALEInterface probe;
  probe.loadROM(rom_path(id));
  const auto n = static_cast<int64_t>(probe.getMinimalActionSet().size());
  probed_[rom] = n;
  return n;
}

std::pair<int64_t, int64_t> AtariFamily::screen_size(const std::string& id) const {
  const std::string rom = fs::path(rom_path(id)).stem().string();
  if (kMinimalActions.count(rom) != 0) {
    auto tall = kTallScreens.find(rom);
    return {tall == kTallScreens.end() ? kRawHeight : tall->second, kRawWidth};
  }
  std::lock_guard<std::mutex> lock(probe_mu_);
  auto it = screens_.find(id);
  if (it != screens_.end()) return it->second;
  quiet_ale();
  ale::ALEInterface probe;
  probe.loadROM(rom_path(id));
  const auto& s = probe.getScreen();
  const std::pair<int64_t, int64_t> hw{static_cast<int64_t>(s.height()),
                                       static_cast<int64_t>(s.width())};
  screens_[id] = hw;
  return hw;
}

EnvSpec AtariFamily::spec(const std::string& id, const Options* options) const {
  const Config c = read_config(options);
  const int64_t channels = c.gray ? 1 : 3;
  int64_t height = c.height, width = c.width;
  if (height == 0 || width == 0) {  // the screen's own size: load the ROM once to know it
    const auto hw = screen_size(id);
    if (height == 0) height = hw.first;
    if (width == 0) width = hw.second;
  }
  EnvSpec s;
  s.id = id;
  s.obs.name = "obs";
  s.obs.dtype = DType::kUInt8;
  s.obs.shape = c.channels_last
                    ? std::vector<int64_t>{height, width, c.stack_num * channels}
                    : std::vector<int64_t>{c.stack_num * channels, height, width};
  s.obs.low = {0.0};
  s.obs.high = {255.0};
  s.infos = {info_spec("lives", DType::kInt32, 0, kInf),
             info_spec("reward", DType::kFloat32, -kInf, kInf),
             info_spec("terminated", DType::kBool, 0, 1)};
  // The legal set is always the 18 joystick actions.
  s.action = discrete_action(c.full_action_space ? 18 : minimal_actions(id));
  s.max_episode_steps = kDefaultMaxEpisodeSteps;
  s.options = {
      opt_int("frame_skip", 4, "emulator frames per step (the action repeats; max-pool of the "
                               "last two frames)"),
      opt_int("stack_num", 4, "number of stacked frames in an observation"),
      opt_int("img_height", 84,
              "observation height (INTER_AREA resize of the 210 rows; 0: the screen's own)"),
      opt_int("img_width", 84,
              "observation width (INTER_AREA resize of the 160 columns; 0: the screen's own)"),
      opt_bool("gray_scale", true, "gray frames (else RGB: 3 channels per stacked frame)"),
      opt_bool("max_pool", true,
               "max-pool the last two frames of a step and stop a step at game over; false: "
               "the last frame, all frame_skip frames emulated (ale-py's AtariEnv)"),
      opt_bool("channels_last", false,
               "observations [H, W, stack_num * C] (Gymnasium's layout) instead of [C, H, W]"),
      opt_int("noop_max", 30, "reset plays 1..noop_max NOOP frames (0: none)"),
      opt_bool("episodic_life", false,
               "a life loss ends the episode (terminated); the game only restarts on game over"),
      opt_bool("zero_discount_on_life_loss", false,
               "accepted for EnvPool compatibility; no effect (there is no discount output)"),
      opt_bool("reward_clip", false, "reward is sign(reward); info 'reward' stays unclipped"),
      opt_bool("use_fire_reset", true, "press FIRE after the reset no-ops (games with FIRE only)"),
      opt_float("repeat_action_probability", 0.0,
                "sticky actions: each frame keeps the previous action with this probability"),
      opt_bool("full_action_space", false, "use all 18 actions instead of the game's minimal set"),
      opt_int("max_episode_steps", kDefaultMaxEpisodeSteps,
              "steps after which `truncated` is set (0: no limit; counted per game)"),
      opt_int("mode", -1, "game mode (-1: the game's default)"),
      opt_int("difficulty", -1, "game difficulty (-1: the game's default)"),
  };
  return s;
}

std::unique_ptr<Env> AtariFamily::make(const std::string& id, const EnvSpec&,
                                       const EnvOptions& options) const {
  // Options were validated by spec(), which the pool calls first.
  Config c;
  c.frame_skip = static_cast<int>(options.i("frame_skip"));
  c.stack_num = static_cast<int>(options.i("stack_num"));
  c.height = static_cast<int>(options.i("img_height"));
  c.width = static_cast<int>(options.i("img_width"));
  c.gray = options.b("gray_scale");
  c.max_pool = options.b("max_pool");
  c.channels_last = options.b("channels_last");
  c.noop_max = static_cast<int>(options.i("noop_max"));
  c.episodic_life = options.b("episodic_life");
  c.reward_clip = options.b("reward_clip");
  c.use_fire_reset = options.b("use_fire_reset");
  c.full_action_space = options.b("full_action_space");
  c.repeat_action_probability = options.f("repeat_action_probability");
  c.max_episode_steps = options.i("max_episode_steps");
  c.mode = options.i("mode");
  c.difficulty = options.i("difficulty");
  return std::make_unique<AtariEnv>(id, rom_path(id), c);
}

}  // namespace atari
}  // namespace torchfrag
