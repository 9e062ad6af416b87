// See mujoco_timer.h.  mjcb_time is a plain global of libmujoco (which the
// extension links), so reading and clearing it needs nothing but the symbol.
// `mujoco.set_mjcb_time(None)` is no substitute: in mujoco 4.0.0 it leaves the
// C pointer set.
#include "mujoco_timer.h"

#include <mujoco/mujoco.h>

namespace torchfrag {

bool mujoco_timer_installed() { return mjcb_time != nullptr; }

void clear_mujoco_timer() { mjcb_time = nullptr; }

}  // namespace torchfrag
