// pybind11 bindings: torchfrag._C
//
// Python-facing rules kept here (not in the pool): converting NumPy input to
// the pool's internal types with clear TypeErrors/ValueErrors, releasing the
// GIL around every call that does env work or waits, and handing batch
// buffers to NumPy as views (no copy) that keep the buffers alive.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mujoco_timer.h"
#include "pool.h"
#include "registry.h"

namespace py = pybind11;
using namespace torchfrag;

namespace {

py::dtype to_numpy_dtype(DType t) {
  switch (t) {
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
  }
  throw std::logic_error("bad dtype");
}

const char* option_type_name(OptionType t) {
  switch (t) {
    case OptionType::kFloat: return "float";
    case OptionType::kInt: return "int";
    case OptionType::kBool: return "bool";
    case OptionType::kString: return "str";
  }
  return "?";
}

std::map<std::string, OptionValue> convert_options(const py::dict& options) {
  std::map<std::string, OptionValue> out;
  for (auto item : options) {
    const std::string name = py::str(item.first);
    py::handle v = item.second;
    OptionValue ov;
    if (py::isinstance<py::str>(v)) {
      ov.str = v.cast<std::string>();
    } else if (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) ||
               py::isinstance<py::float_>(v)) {
      ov.num = {v.cast<double>()};
    } else {
      py::array arr;
      try {
        arr = py::array::ensure(v);
      } catch (...) {
      }
      // Only bools, integers and real floats: complex, objects, text, dates are refused.
      const std::string real_kinds = "biuf";
      if (!arr || real_kinds.find(arr.dtype().kind()) == std::string::npos || arr.ndim() > 1) {
        throw py::type_error("option '" + name +
                             "' must be a real number, a string, or a 1-D sequence of real numbers "
                             "(one per env); got " +
                             std::string(py::str(py::type::of(v).attr("__name__"))) + " " +
                             std::string(py::repr(v)));
      }
      if (arr.ndim() == 0) {
        ov.num = {py::float_(arr.attr("item")()).cast<double>()};
      } else {
        auto as_f64 = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(arr);
        for (py::ssize_t k = 0; k < as_f64.size(); ++k) ov.num.push_back(as_f64.data()[k]);
        if (ov.num.empty()) throw py::value_error("option '" + name + "' got an empty sequence");
      }
    }
    out[name] = std::move(ov);
  }
  return out;
}

py::dict array_spec_dict(const ArraySpec& a) {
  py::dict d;
  d["name"] = a.name;
  d["dtype"] = dtype_name(a.dtype);
  d["shape"] = py::tuple(py::cast(a.shape));
  d["low"] = a.low;
  d["high"] = a.high;
  return d;
}

py::dict spec_dict(const EnvSpec& s, const Options* resolved) {
  py::dict d;
  d["id"] = s.id;
  d["obs"] = array_spec_dict(s.obs);
  py::list infos;
  for (const auto& i : s.infos) infos.append(array_spec_dict(i));
  d["infos"] = infos;
  py::dict act;
  act["discrete"] = s.action.discrete;
  act["n"] = s.action.n;
  act["shape"] = py::tuple(py::cast(s.action.shape));
  act["low"] = s.action.low;
  act["high"] = s.action.high;
  act["dtype"] = dtype_name(s.action.dtype);
  d["action"] = act;
  py::list opts;
  for (const auto& o : s.options) {
    py::dict od;
    od["name"] = o.name;
    od["type"] = option_type_name(o.type);
    if (o.type == OptionType::kString) {
      od["default"] = o.default_str;
    } else if (o.type == OptionType::kInt) {
      od["default"] = static_cast<int64_t>(o.default_num);
    } else if (o.type == OptionType::kBool) {
      od["default"] = o.default_num != 0.0;
    } else {
      od["default"] = o.default_num;
    }
    od["per_env"] = o.per_env;
    od["doc"] = o.doc;
    opts.append(od);
  }
  d["options"] = opts;
  int64_t max_steps = s.max_episode_steps;
  if (resolved != nullptr && resolved->has("max_episode_steps")) {
    max_steps = static_cast<int64_t>(resolved->num("max_episode_steps"));
  }
  d["max_episode_steps"] = max_steps;
  d["reward_threshold"] = s.reward_threshold;
  return d;
}

// Spec of `id` under `options`, resolved the way a pool resolves them.
py::dict env_spec(const std::string& id, const py::dict& options) {
  auto family = Registry::instance().family(id);
  EnvSpec base = family->spec(id, nullptr);
  std::vector<OptionSpec> declared = base.options;
  bool has_max = false;
  for (const auto& o : declared) has_max |= o.name == "max_episode_steps";
  if (!has_max) {
    declared.push_back(opt_int("max_episode_steps", base.max_episode_steps,
                               "episode length after which `truncated` is set (0: no limit)"));
  }
  // Per-env values don't change shapes; resolve with one env per given list.
  auto given = convert_options(options);
  int64_t n = 1;
  for (const auto& kv : given) n = std::max<int64_t>(n, static_cast<int64_t>(kv.second.num.size()));
  Options resolved = Options::resolve(declared, given, n);
  EnvSpec s = family->spec(id, &resolved);
  s.id = id;
  s.options = declared;
  return spec_dict(s, &resolved);
}

// Refuses uint64 values above INT64_MAX, which the int64 cast would wrap to negative numbers
// (2**64 - 1 became -1): "<what> <value> is out of range <range>".
void refuse_wrapping(const py::array& arr, const std::string& what, const std::string& range) {
  if (arr.dtype().kind() != 'u' || arr.itemsize() < 8) return;
  auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(arr);
  for (py::ssize_t k = 0; k < u.size(); ++k) {
    if (u.data()[k] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw py::value_error(what + " " + std::to_string(u.data()[k]) + " is out of range " + range);
    }
  }
}

std::vector<int64_t> convert_ids(const py::object& env_ids) {
  std::vector<int64_t> ids;
  if (env_ids.is_none()) return ids;
  py::array arr = py::array::ensure(env_ids);
  if (!arr) throw py::type_error("env_ids must be a sequence of integers");
  const char kind = arr.dtype().kind();
  if (arr.size() > 0 && kind != 'i' && kind != 'u') {
    throw py::type_error("env_ids must be integers, got dtype " +
                         std::string(py::str(arr.dtype())));
  }
  if (arr.ndim() != 1) {
    throw py::value_error("env_ids must be 1-D, got shape with " + std::to_string(arr.ndim()) +
                          " dims");
  }
  refuse_wrapping(arr, "env id", "[0, num_envs)");
  auto as_i64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(arr);
  ids.assign(as_i64.data(), as_i64.data() + as_i64.size());
  if (ids.empty()) throw py::value_error("env_ids is empty");
  return ids;
}

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t k = 0; k < a.ndim(); ++k) {
    s += (k ? ", " : "") + std::to_string(a.shape(k));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

// Owns converted actions for the duration of one call.
struct ConvertedActions {
  py::array_t<int64_t, py::array::c_style> discrete;
  py::array_t<double, py::array::c_style> values;
  // float32 actions widened here rather than through a NumPy cast, which
  // cost ~1 us a call (a new array, casting lookup and dealloc: ~5% of a sync
  // step of 8 CartpoleSwingups on 2 threads).
  // Small batches widen into `inline_widened` (no allocation per call).
  static constexpr size_t kInlineValues = 64;
  double inline_widened[kInlineValues];
  std::vector<double> widened;
  bool use_widened = false;
  const double* widened_data() const {
    return widened.empty() ? inline_widened : widened.data();
  }
  ActionBatch batch() const {
    ActionBatch b;
    if (discrete) b.discrete = discrete.data();
    if (use_widened) {
      b.values = widened_data();
    } else if (values) {
      b.values = values.data();
    }
    return b;
  }
};

ConvertedActions convert_actions(const ActionSpec& spec, const py::object& actions, int64_t n) {
  // An ndarray is used as it is (ensure() would run NumPy's conversion
  // machinery to hand back the same data, once per call).
  py::array arr = py::isinstance<py::array>(actions) ? py::reinterpret_borrow<py::array>(actions)
                                                     : py::array::ensure(actions);
  if (!arr) throw py::type_error("actions must be array-like");
  const char kind = arr.dtype().kind();
  ConvertedActions out;
  if (spec.discrete) {
    if (kind != 'i' && kind != 'u') {
      throw py::type_error("discrete actions must be integers, got dtype " +
                           std::string(py::str(arr.dtype())));
    }
    const bool ok_shape = (arr.ndim() == 1 && arr.shape(0) == n) ||
                          (arr.ndim() == 2 && arr.shape(0) == n && arr.shape(1) == 1);
    if (!ok_shape) {
      throw py::value_error("expected discrete actions of shape (" + std::to_string(n) +
                            ",), got " + shape_str(arr));
    }
    refuse_wrapping(arr, "action", "[0, " + std::to_string(spec.n) + ")");
    out.discrete = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(arr);
    return out;
  }
  if (kind != 'f' && kind != 'i' && kind != 'u') {
    throw py::type_error("continuous actions must be floating point, got dtype " +
                         std::string(py::str(arr.dtype())));
  }
  // (n, *spec.shape), checked without building it (an allocation per call).
  bool ok_shape = arr.ndim() == static_cast<py::ssize_t>(spec.shape.size() + 1) &&
                  arr.shape(0) == n;
  for (size_t k = 0; ok_shape && k < spec.shape.size(); ++k) {
    ok_shape = arr.shape(static_cast<py::ssize_t>(k + 1)) == spec.shape[k];
  }
  if (!ok_shape) {
    std::vector<int64_t> want = {n};
    for (auto d : spec.shape) want.push_back(d);
    std::string w = "(";
    for (size_t k = 0; k < want.size(); ++k) w += (k ? ", " : "") + std::to_string(want[k]);
    throw py::value_error("expected continuous actions of shape " + w + "), got " +
                          shape_str(arr));
  }
  const double* v = nullptr;
  py::ssize_t count = 0;
  if (kind == 'f' && arr.itemsize() == 4 && py::isinstance<py::array_t<float>>(arr) &&
      (arr.flags() & py::array::c_style) != 0) {
    const auto* src = static_cast<const float*>(arr.data());
    count = arr.size();
    // The inline buffer is never null, also for an empty batch.
    if (static_cast<size_t>(count) > ConvertedActions::kInlineValues) {
      out.widened.resize(static_cast<size_t>(count));
    }
    double* dst = out.widened.empty() ? out.inline_widened : out.widened.data();
    for (py::ssize_t j = 0; j < count; ++j) dst[j] = static_cast<double>(src[j]);
    out.use_widened = true;
    v = dst;
  } else {
    out.values = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(arr);
    v = out.values.data();
    count = out.values.size();
  }
  const int64_t k = spec.numel();
  // The action space is float32: a float64 value beyond its range would turn
  // into inf inside the env.
  const bool f32 = spec.dtype == DType::kFloat32;
  for (int64_t j = 0; j < count; ++j) {
    if (!std::isfinite(v[j])) {
      throw py::value_error("action of row " + std::to_string(j / k) +
                            " is not finite (NaN or inf): " + std::to_string(v[j]));
    }
    if (f32 && std::fabs(v[j]) > static_cast<double>(std::numeric_limits<float>::max())) {
      throw py::value_error("action of row " + std::to_string(j / k) +
                            " is out of the float32 range of the action space: " +
                            std::to_string(v[j]));
    }
  }
  return out;
}

// Runs `f` with the GIL released. A wait the pool abandoned because a Python
// signal handler raised (see set_interrupt_check below) re-raises that
// handler's exception, which is still pending on this thread.
template <typename F>
auto without_gil(F&& f) -> decltype(f()) {
  try {
    py::gil_scoped_release release;
    return f();
  } catch (const Interrupted&) {
    if (PyErr_Occurred() == nullptr) throw std::runtime_error("pool wait interrupted");
    throw py::error_already_set();
  }
}

// A pool plus cached NumPy views of its batch buffers.
class PyPool {
 public:
  PyPool(const std::string& env_id, int64_t num_envs, int64_t batch_size, int64_t num_threads,
         const std::vector<uint64_t>& seeds, const std::string& autoreset, const py::dict& options,
         const std::string& wait_policy, double spin_us) {
    PoolConfig c;
    c.wait_policy = parse_wait_policy(wait_policy);
    c.spin_us = spin_us;
    c.env_id = env_id;
    c.num_envs = num_envs;
    c.batch_size = batch_size;
    c.num_threads = num_threads;
    c.seeds = seeds;
    if (autoreset == "next_step") {
      c.autoreset = AutoReset::kNextStep;
    } else if (autoreset == "same_step") {
      c.autoreset = AutoReset::kSameStep;
    } else {
      throw py::value_error("autoreset must be 'next_step' or 'same_step', got '" + autoreset + "'");
    }
    c.options = convert_options(options);
    {
      py::gil_scoped_release release;
      pool_ = std::make_unique<Pool>(std::move(c));
    }
    // Blocking waits call this every Pool::kPollMs with the GIL released:
    // Python runs its signal handlers (Ctrl-C) only on the main thread and
    // only when asked, and a raising handler ends the wait.
    pool_->set_interrupt_check([] {
      py::gil_scoped_acquire gil;
      return PyErr_CheckSignals() != 0;
    });
  }

  ~PyPool() {
    // In a forked child the pool is a copy whose threads do not exist and
    // whose locks parent threads may hold: leak it rather than join or lock.
    if (pool_ && pool_->forked()) (void)pool_.release();
  }
  PyPool(const PyPool&) = delete;
  PyPool& operator=(const PyPool&) = delete;

  py::tuple reset(const py::object& env_ids) {
    auto ids = convert_ids(env_ids);
    std::shared_ptr<BatchBuffers> buf = without_gil([&] { return pool_->reset(ids); });
    const int64_t n = ids.empty() ? pool_->num_envs() : static_cast<int64_t>(ids.size());
    const Views& views = views_of(buf, n);
    return py::make_tuple(views.list[BatchBuffers::kObs], info_dict(views));
  }

  py::tuple step(const py::object& actions, const py::object& env_ids) {
    auto ids = convert_ids(env_ids);
    const int64_t n = ids.empty() ? pool_->num_envs() : static_cast<int64_t>(ids.size());
    ConvertedActions conv = convert_actions(pool_->spec().action, actions, n);
    std::shared_ptr<BatchBuffers> buf =
        without_gil([&] { return pool_->step(ids, conv.batch()); });
    return step_tuple(views_of(buf, n));
  }

  void send(const py::object& actions, const py::object& env_ids) {
    auto ids = convert_ids(env_ids);
    const int64_t n = ids.empty() ? pool_->num_envs() : static_cast<int64_t>(ids.size());
    ConvertedActions conv = convert_actions(pool_->spec().action, actions, n);
    without_gil([&] { pool_->send(ids, conv.batch(), false); });
  }

  void async_reset(const py::object& env_ids) {
    auto ids = convert_ids(env_ids);
    without_gil([&] { pool_->send(ids, ActionBatch{}, true); });
  }

  py::tuple recv(const py::object& timeout) {
    double t = -1.0;  // no limit
    if (!timeout.is_none()) {
      if (py::isinstance<py::bool_>(timeout) ||
          !(py::isinstance<py::int_>(timeout) || py::isinstance<py::float_>(timeout) ||
            PyNumber_Check(timeout.ptr()) == 1) ||
          py::isinstance<py::str>(timeout)) {
        throw py::type_error("timeout must be a number of seconds or None, got " +
                             std::string(py::str(py::repr(timeout))) + " of type " +
                             std::string(py::str(py::type::of(timeout).attr("__name__"))));
      }
      t = py::float_(timeout).cast<double>();
      if (!(t >= 0.0)) {
        throw py::value_error("timeout must be >= 0 seconds (inf: no limit) or None, got " +
                              std::string(py::str(py::repr(timeout))));
      }
    }
    std::shared_ptr<BatchBuffers> buf = without_gil([&] { return pool_->recv(t); });
    return step_tuple(views_of(buf, pool_->batch_size()));
  }

  void seed(const py::object& env_ids, const std::vector<uint64_t>& seeds) {
    auto ids = convert_ids(env_ids);
    without_gil([&] { pool_->seed(ids, seeds); });
  }

  // The env's RGB screen ([H, W, 3] uint8) where it has one, else the float64
  // state a Python renderer draws from (see Env::render).  The env work
  // (ALE's palette conversion) runs without the GIL.
  py::array render_data(int64_t env_index, bool final) {
    RenderData d = without_gil([&] { return pool_->render(env_index, final); });
    if (!d.rgb.empty()) {
      py::array_t<uint8_t> frame({static_cast<py::ssize_t>(d.height),
                                  static_cast<py::ssize_t>(d.width), py::ssize_t{3}});
      std::memcpy(frame.mutable_data(), d.rgb.data(), d.rgb.size());
      return frame;
    }
    return py::array_t<double>(static_cast<py::ssize_t>(d.state.size()), d.state.data());
  }

  void close() {
    if (pool_->forked()) return;  // nothing of a parent's pool may be touched here
    without_gil([&] { pool_->close(); });
  }

  Pool& pool() { return *pool_; }

 private:
  // The views of one (buffer, rows) and the info dict over them, built once.
  struct Views {
    py::list list;
    py::dict info;  // template: every call returns a copy (callers may edit theirs)
  };

  py::tuple step_tuple(const Views& views) {
    return py::make_tuple(views.list[BatchBuffers::kObs], views.list[BatchBuffers::kReward],
                          views.list[BatchBuffers::kTerminated],
                          views.list[BatchBuffers::kTruncated], info_dict(views));
  }

  // A fresh dict per call, copied from the template: building it key by key
  // made a Python string and hashed it for every info field of every call
  // (~10% of a sync step of 8 CartPoles, whose whole call costs ~2.4 us).
  static py::dict info_dict(const Views& views) {
    PyObject* copy = PyDict_Copy(views.info.ptr());
    if (copy == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::dict>(copy);
  }

  // NumPy views of the first `rows` rows of every field, built once per
  // (buffer, rows) and reused: the memory is the same every time.
  const Views& views_of(const std::shared_ptr<BatchBuffers>& buf, int64_t rows) {
    auto key = std::make_pair(buf.get(), rows);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    // The views' base object holds a shared_ptr: buffers live as long as any view.
    py::object owner = py::cast(buf);
    py::list views;
    const auto& fields = buf->fields();
    for (size_t k = 0; k < fields.size(); ++k) {
      const FieldSpec& f = fields[k];
      std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows)};
      for (auto d : f.shape) shape.push_back(static_cast<py::ssize_t>(d));
      views.append(py::array(to_numpy_dtype(f.dtype), shape, {}, buf->field(k), owner));
    }
    py::dict info;
    for (size_t k = BatchBuffers::kEnvId; k < fields.size(); ++k) {
      info[py::str(fields[k].name)] = views[k];
    }
    return cache_.emplace(key, Views{std::move(views), std::move(info)}).first->second;
  }

  struct KeyHash {
    size_t operator()(const std::pair<BatchBuffers*, int64_t>& k) const {
      return std::hash<void*>()(k.first) ^ (std::hash<int64_t>()(k.second) << 1);
    }
  };

  std::unique_ptr<Pool> pool_;
  std::unordered_map<std::pair<BatchBuffers*, int64_t>, Views, KeyHash> cache_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchfrag native core: the C++ async environment pool";

  py::object env_error = py::reinterpret_steal<py::object>(
      PyErr_NewException("torchfrag._C.EnvError", PyExc_RuntimeError, nullptr));
  env_error.attr("__doc__") =
      "An env raised inside a worker thread. `env_ids` lists the envs that failed; they must be "
      "reset before they are stepped again. `batch_env_ids` lists every env whose result was "
      "dropped with the failing batch (all of them are idle again).";
  m.attr("EnvError") = env_error;
  py::object closed_error = py::reinterpret_steal<py::object>(
      PyErr_NewException("torchfrag._C.PoolClosedError", PyExc_RuntimeError, nullptr));
  m.attr("PoolClosedError") = closed_error;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const EnvError& e) {
      py::object cls = py::module_::import("torchfrag._C").attr("EnvError");
      py::object inst = cls(e.what());
      inst.attr("env_ids") = py::cast(e.env_ids);
      inst.attr("batch_env_ids") = py::cast(e.batch_env_ids);
      PyErr_SetObject(cls.ptr(), inst.ptr());
    } catch (const ClosedError& e) {
      py::object cls = py::module_::import("torchfrag._C").attr("PoolClosedError");
      PyErr_SetString(cls.ptr(), e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    }
  });

  m.def("list_envs", [] { return Registry::instance().ids(); }, "Registered env ids.");
  m.def("env_spec", &env_spec, py::arg("env_id"), py::arg("options") = py::dict(),
        "Spec of an env id under the given options, without building an env.");
  m.def("env_seed", [](uint64_t seed, uint64_t index) { return env_seed(seed, index); },
        "Seed of env `index` in a pool seeded with `seed`.");
  // Python's public face is torchfrag.envs.mujoco_timer (which documents why).
  m.def("mujoco_timer_installed", &mujoco_timer_installed,
        "Whether libmujoco's process-wide mjcb_time callback is set.");
  m.def("clear_mujoco_timer", &clear_mujoco_timer,
        "Unset libmujoco's process-wide mjcb_time callback (mjData.timer stops being filled).");

  py::class_<BatchBuffers, std::shared_ptr<BatchBuffers>>(m, "_BatchBuffers",
                                                          "Memory behind NumPy batch views.");

  py::class_<PyPool>(m, "Pool")
      .def(py::init<const std::string&, int64_t, int64_t, int64_t, const std::vector<uint64_t>&,
                    const std::string&, const py::dict&, const std::string&, double>(),
           py::arg("env_id"), py::arg("num_envs"), py::arg("batch_size"), py::arg("num_threads"),
           py::arg("seeds"), py::arg("autoreset"), py::arg("options"),
           py::arg("wait_policy") = "adaptive", py::arg("spin_us") = -1.0)
      .def("reset", &PyPool::reset, py::arg("env_ids") = py::none())
      .def("step", &PyPool::step, py::arg("actions"), py::arg("env_ids") = py::none())
      .def("send", &PyPool::send, py::arg("actions"), py::arg("env_ids") = py::none())
      .def("async_reset", &PyPool::async_reset, py::arg("env_ids") = py::none())
      .def("recv", &PyPool::recv, py::arg("timeout") = py::none())
      .def("seed", &PyPool::seed, py::arg("env_ids"), py::arg("seeds"))
      .def("render_data", &PyPool::render_data, py::arg("env_index"), py::arg("final") = false,
           "RGB screen [H, W, 3] (Atari) or float64 render state of one env (final: of its "
           "last terminal state, see keep_final_render).")
      .def("keep_final_render",
           [](PyPool& p, int64_t env_index, bool keep) {
             without_gil([&] { p.pool().keep_final_render(env_index, keep); });
           },
           py::arg("env_index"), py::arg("keep"),
           "Keep the render data of env_index's terminal states for render_data(final=True).")
      .def("close", &PyPool::close)
      .def_property_readonly("closed", [](PyPool& p) { return p.pool().closed(); })
      .def_property_readonly("in_flight", [](PyPool& p) { return p.pool().in_flight(); })
      .def_property_readonly("num_envs", [](PyPool& p) { return p.pool().num_envs(); })
      .def_property_readonly("batch_size", [](PyPool& p) { return p.pool().batch_size(); })
      .def_property_readonly("num_threads", [](PyPool& p) { return p.pool().num_threads(); })
      .def_property_readonly("wait_policy",
                             [](PyPool& p) { return wait_policy_name(p.pool().wait_policy()); })
      .def_property_readonly("spin_us", [](PyPool& p) { return p.pool().spin_us(); })
      .def_property_readonly("spec", [](PyPool& p) { return spec_dict(p.pool().spec(), nullptr); })
      .def_property_readonly("fields", [](PyPool& p) {
        py::list out;
        for (const auto& f : p.pool().fields()) {
          out.append(py::make_tuple(f.name, dtype_name(f.dtype), py::tuple(py::cast(f.shape))));
        }
        return out;
      });
}
