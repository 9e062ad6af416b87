// Specs: what an env family declares about itself before any env is built.
//
// A family describes its options (name, type, default, whether a per-env list
// is allowed), its observation array, its extra per-step outputs ("infos") and
// its action space.  The pool uses these to validate input and to size its
// batch buffers; Python uses them to build gymnasium/TorchRL spaces without
// constructing a single env.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace torchfrag {

enum class DType : uint8_t { kBool, kUInt8, kInt32, kInt64, kFloat32, kFloat64 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8: return 1;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "?";
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// One named array written per env per step. `low`/`high` hold either one
// value for every element or one value per element.
struct ArraySpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // per-env shape (without the batch dim)
  std::vector<double> low{-kInf};
  std::vector<double> high{kInf};

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

// Discrete actions are one int64 per env in [0, n); continuous actions are
// float64 arrays of `shape` (the user may send float32 or float64).
struct ActionSpec {
  bool discrete = true;
  int64_t n = 0;               // discrete only
  std::vector<int64_t> shape;  // continuous only
  std::vector<double> low, high;
  DType dtype = DType::kInt64;  // the dtype users see in the space

  int64_t numel() const {
    if (discrete) return 1;
    int64_t k = 1;
    for (auto d : shape) k *= d;
    return k;
  }
};

enum class OptionType : uint8_t { kFloat, kInt, kBool, kString };

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::kFloat;
  double default_num = 0.0;  // kFloat/kInt/kBool
  std::string default_str;   // kString
  bool per_env = false;      // accepts one value per env (domain randomisation)
  std::string doc;
  bool accepts_number = false;  // kString that may also be given a number (a name or an index)
  // Allowed values of a number option: [min, max], or (min, max] with min_open.
  double min = -kInf;
  double max = kInf;
  bool min_open = false;
};

// `o` with its allowed range (checked by Options::resolve for every face: pool, spec, Python).
inline OptionSpec in_range(OptionSpec o, double min, double max, bool min_open = false) {
  o.min = min;
  o.max = max;
  o.min_open = min_open;
  return o;
}
// `o` restricted to values > 0 (masses, lengths, time steps).
inline OptionSpec positive(OptionSpec o) { return in_range(std::move(o), 0.0, kInf, true); }

struct EnvSpec {
  std::string id;
  std::vector<OptionSpec> options;
  ArraySpec obs;
  std::vector<ArraySpec> infos;
  ActionSpec action;
  int64_t max_episode_steps = 0;  // default; overridable by the option of that name
  double reward_threshold = kInf;  // informational (Gymnasium's registry value)
};

// Small builders so family code reads like a table.
inline OptionSpec opt_float(std::string name, double def, std::string doc, bool per_env = false) {
  return OptionSpec{std::move(name), OptionType::kFloat, def, "", per_env, std::move(doc)};
}
inline OptionSpec opt_int(std::string name, int64_t def, std::string doc, bool per_env = false) {
  return OptionSpec{std::move(name), OptionType::kInt, static_cast<double>(def), "", per_env,
                    std::move(doc)};
}
inline OptionSpec opt_bool(std::string name, bool def, std::string doc) {
  return OptionSpec{std::move(name), OptionType::kBool, def ? 1.0 : 0.0, "", false, std::move(doc)};
}
inline OptionSpec opt_str(std::string name, std::string def, std::string doc,
                          bool accepts_number = false) {
  return OptionSpec{std::move(name), OptionType::kString, 0.0, std::move(def), false,
                    std::move(doc), accepts_number};
}

inline ActionSpec discrete_action(int64_t n) {
  ActionSpec a;
  a.discrete = true;
  a.n = n;
  a.low = {0.0};
  a.high = {static_cast<double>(n - 1)};
  a.dtype = DType::kInt64;
  return a;
}

inline ActionSpec box_action(std::vector<int64_t> shape, std::vector<double> low,
                             std::vector<double> high) {
  ActionSpec a;
  a.discrete = false;
  a.shape = std::move(shape);
  a.low = std::move(low);
  a.high = std::move(high);
  a.dtype = DType::kFloat32;
  return a;
}

}  // namespace torchfrag
