// Resolved option values for a pool, and the per-env view an env is built from.
//
// Every option holds either one value (shared by all envs) or, for options
// declared `per_env`, one value per env.  Numbers (float, int, bool) are kept
// as doubles; integers beyond 2^53 are not meaningful options.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec.h"

namespace torchfrag {

struct OptionValue {
  std::vector<double> num;  // size 1, or num_envs for per-env values
  std::string str;
};

class Options {
 public:
  Options() = default;

  // Fill defaults for every declared option, then apply user values.  Errors
  // name the option and list the valid ones, so typos are easy to fix.
  static Options resolve(const std::vector<OptionSpec>& declared,
                         const std::map<std::string, OptionValue>& given, int64_t num_envs);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  const OptionValue& raw(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) throw std::out_of_range("option '" + name + "' was not declared");
    return it->second;
  }
  double num(const std::string& name, int64_t env_index = 0) const {
    const auto& v = raw(name).num;
    return v.size() == 1 ? v[0] : v.at(static_cast<size_t>(env_index));
  }
  const std::string& str(const std::string& name) const { return raw(name).str; }
  const std::map<std::string, OptionValue>& values() const { return values_; }

 private:
  std::map<std::string, OptionValue> values_;
};

// What one env sees: the pool's options at its own index.
class EnvOptions {
 public:
  EnvOptions(const Options& all, int64_t env_index) : all_(all), index_(env_index) {}
  double f(const std::string& name) const { return all_.num(name, index_); }
  int64_t i(const std::string& name) const { return static_cast<int64_t>(all_.num(name, index_)); }
  bool b(const std::string& name) const { return all_.num(name, index_) != 0.0; }
  const std::string& s(const std::string& name) const { return all_.str(name); }
  int64_t env_index() const { return index_; }

 private:
  const Options& all_;
  int64_t index_;
};

// Largest magnitude of an integer option (they end up in int32 fields).
constexpr double kMaxIntOption = 2147483647.0;

// A number as the user wrote it: integers without a fraction, others with %g.
inline std::string format_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  if (x == std::floor(x) && std::fabs(x) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", x);
  } else {
    std::snprintf(buf, sizeof(buf), "%.17g", x);
  }
  return buf;
}

// "[0, 10]", "(0, inf)": the allowed values of a number option.
inline std::string range_text(const OptionSpec& spec) {
  return std::string(spec.min_open ? "(" : "[") + format_number(spec.min) + ", " +
         format_number(spec.max) + (std::isinf(spec.max) ? ")" : "]");
}

// Whether `name` is one bound of a declared (min, max) pair.
inline bool is_range_bound(const std::string& name,
                           const std::map<std::string, const OptionSpec*>& declared) {
  auto ends_with = [&](const char* suffix) {
    const size_t k = std::strlen(suffix);
    return name.size() > k && name.compare(name.size() - k, k, suffix) == 0;
  };
  if (ends_with("_min")) return declared.count(name.substr(0, name.size() - 4) + "_max") > 0;
  if (ends_with("_max")) return declared.count(name.substr(0, name.size() - 4) + "_min") > 0;
  return false;
}

inline Options Options::resolve(const std::vector<OptionSpec>& declared,
                                const std::map<std::string, OptionValue>& given,
                                int64_t num_envs) {
  Options out;
  std::map<std::string, const OptionSpec*> by_name;
  for (const auto& o : declared) {
    by_name[o.name] = &o;
    OptionValue v;
    if (o.type == OptionType::kString) {
      v.str = o.default_str;
    } else {
      v.num = {o.default_num};
    }
    out.values_[o.name] = v;
  }
  for (const auto& kv : given) {
    auto it = by_name.find(kv.first);
    if (it == by_name.end()) {
      std::string valid;
      for (const auto& o : declared) valid += (valid.empty() ? "" : ", ") + o.name;
      throw std::invalid_argument("unknown option '" + kv.first + "'; valid options are: " + valid);
    }
    const OptionSpec& spec = *it->second;
    const OptionValue& v = kv.second;
    if (spec.type == OptionType::kString) {
      if (!v.num.empty() && !spec.accepts_number) {
        throw std::invalid_argument("option '" + kv.first + "' expects a string, got the number " +
                                    format_number(v.num[0]) + " (default: '" +
                                    spec.default_str + "')");
      }
      out.values_[kv.first] = v;
      continue;
    }
    if (v.num.empty()) {
      throw std::invalid_argument("option '" + kv.first + "' expects a number, got the string '" +
                                  v.str + "'");
    }
    if (v.num.size() != 1) {
      if (!spec.per_env) {
        throw std::invalid_argument("option '" + kv.first +
                                    "' takes a single value (it is not a per-env option)");
      }
      if (static_cast<int64_t>(v.num.size()) != num_envs) {
        throw std::invalid_argument("option '" + kv.first + "' got " +
                                    std::to_string(v.num.size()) + " per-env values for " +
                                    std::to_string(num_envs) + " envs");
      }
    }
    // Only the bounds of a Gymnasium range (an option `<base>_min` or
    // `<base>_max` whose twin is declared too, e.g. healthy_z_range=(0.7, inf))
    // may be infinite; an infinite physical parameter (a pole length, a force,
    // a noise scale) would only turn the observations into NaN.
    const bool may_be_inf = spec.type == OptionType::kFloat && is_range_bound(kv.first, by_name);
    for (double x : v.num) {
      if (std::isnan(x) || (!may_be_inf && !std::isfinite(x))) {
        throw std::invalid_argument(
            "option '" + kv.first + "' must be a finite number, got " + format_number(x) +
            (spec.type == OptionType::kFloat && !std::isnan(x)
                 ? " (only the bounds of a range, *_min/*_max, may be infinite)"
                 : ""));
      }
      if (spec.type == OptionType::kInt && x != std::floor(x)) {
        throw std::invalid_argument("option '" + kv.first + "' expects an integer, got " +
                                    format_number(x));
      }
      // Integer options are counts, sizes and modes that end up in 32-bit
      // fields (elapsed_step); a value beyond that range would wrap around.
      if (spec.type == OptionType::kInt && std::fabs(x) > kMaxIntOption) {
        throw std::invalid_argument("option '" + kv.first + "' expects an integer in [-" +
                                    format_number(kMaxIntOption) + ", " +
                                    format_number(kMaxIntOption) + "], got " + format_number(x));
      }
      if (x < spec.min || (spec.min_open && x == spec.min) || x > spec.max) {
        throw std::invalid_argument("option '" + kv.first + "' must be in " + range_text(spec) +
                                    ", got " + format_number(x));
      }
      if (spec.type == OptionType::kBool && x != 0.0 && x != 1.0) {
        throw std::invalid_argument("option '" + kv.first + "' expects a bool");
      }
    }
    out.values_[kv.first] = v;
  }
  return out;
}

}  // namespace torchfrag
