// Resolved option values for a pool, and the per-env view an env is built from.
//
// Every option holds either one value (shared by all envs) or, for options
// declared `per_env`, one value per env.  Numbers (float, int, bool) are kept
// as doubles; integers beyond 2^53 are not meaningful options.
#pragma once

#include <cmath>
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
      out.values_[kv.first] = v;
      continue;
    }
    if (v.num.empty()) {
      throw std::invalid_argument("option '" + kv.first + "' expects a number, got a string");
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
    for (double x : v.num) {
      // Float options may be infinite (Gymnasium ranges such as (0.7, inf)); never NaN.
      if (std::isnan(x) || (spec.type != OptionType::kFloat && !std::isfinite(x))) {
        throw std::invalid_argument("option '" + kv.first + "' must be " +
                                    (spec.type == OptionType::kFloat ? "a number, not NaN"
                                                                     : "finite"));
      }
      if (spec.type == OptionType::kInt && x != std::floor(x)) {
        throw std::invalid_argument("option '" + kv.first + "' expects an integer, got " +
                                    std::to_string(x));
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
