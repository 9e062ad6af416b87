// Atari 2600 games (ALE) as `<Game>-v5`, one id per ROM that ale-py ships.
//
// Options, defaults and infos follow EnvPool's Atari `*-v5` tasks so users can
// switch: frame skip 4 with a max-pool over the last two frames, 84x84 gray
// frames resized with OpenCV's INTER_AREA arithmetic, a stack of 4, up to 30
// no-ops and FIRE on reset, optional episodic life and reward clipping,
// sticky actions, and a 27000-step limit.  Observations are uint8
// [stack_num * channels, img_height, img_width].  Infos: `lives`, the
// unclipped `reward`, and `terminated` (true game over, even when episodic
// life ended the episode on a life loss).
//
// The emulator is the ALE C++ engine shipped by the installed ale-py wheel,
// stepped on the pool's worker threads without the GIL.  Only this header is
// seen by register.cpp; everything that includes ALE headers lives in
// atari.cpp, so the rest of the extension compiles without them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../env.h"

namespace torchfrag {
namespace atari {

class AtariFamily : public EnvFamily {
 public:
  std::vector<std::string> ids() const override;
  EnvSpec spec(const std::string& id, const Options* options) const override;
  std::unique_ptr<Env> make(const std::string& id, const EnvSpec& spec,
                            const EnvOptions& options) const override;

  // Path of the ROM file behind an id (throws for unknown ids).
  std::string rom_path(const std::string& id) const;

 private:
  // id -> ROM path, built on first use from the ROM folder of ale-py.
  const std::map<std::string, std::string>& games() const;
  // Size of the game's minimal action set (a table; ROM probe as fallback).
  int64_t minimal_actions(const std::string& id) const;
  // The game's screen (rows, columns): a table, or loading its ROM once.
  std::pair<int64_t, int64_t> screen_size(const std::string& id) const;

  mutable std::once_flag games_once_;
  mutable std::map<std::string, std::string> games_;
  mutable std::mutex probe_mu_;
  mutable std::map<std::string, int64_t> probed_;
  mutable std::map<std::string, std::pair<int64_t, int64_t>> screens_;
};

}  // namespace atari
}  // namespace torchfrag
