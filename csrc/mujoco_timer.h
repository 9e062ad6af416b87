// MuJoCo's process-wide profiling clock (mjcb_time), seen from the pool.
//
// libmujoco calls the global `mjcb_time` around every stage of mj_step to fill
// mjData.timer when it is set.  The `mujoco` Python package installs one when
// it is imported, and since torchfrag._C links the very same libmujoco, every
// MuJoCo and DMC step of the pool then pays for that clock too (a Python-level
// callback: about 40% more CPU per CartpoleSwingup step).  The pool never reads
// mjData.timer, so these accessors let Python see and remove the callback.
// This header does not include MuJoCo's, so bindings.cpp stays free of them.
#pragma once

namespace torchfrag {

// Whether libmujoco's global mjcb_time is set (by anyone in the process).
bool mujoco_timer_installed();

// Unsets libmujoco's global mjcb_time: mjData.timer stops being filled for
// every MuJoCo user in the process; physics is unaffected.
void clear_mujoco_timer();

}  // namespace torchfrag
