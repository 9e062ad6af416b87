// The registry of env families.  Adding a family: write its header under
// csrc/envs/ and add one TORCHFRAG_REGISTER_* line to csrc/envs/register.cpp.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "env.h"

namespace torchfrag {

class Registry {
 public:
  static Registry& instance() {
    static Registry r;
    return r;
  }

  void add(std::shared_ptr<EnvFamily> family) {
    std::lock_guard<std::mutex> lock(mu_);
    families_.push_back(family);
    index_valid_ = false;
  }

  std::vector<std::string> ids() {
    std::lock_guard<std::mutex> lock(mu_);
    build_index();
    std::vector<std::string> out;
    for (const auto& kv : by_id_) out.push_back(kv.first);
    return out;
  }

  std::shared_ptr<EnvFamily> family(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    build_index();
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      std::string msg = "unknown env id '" + id + "'; registered ids are: ";
      bool first = true;
      for (const auto& kv : by_id_) {
        msg += (first ? "" : ", ") + kv.first;
        first = false;
      }
      throw std::invalid_argument(msg);
    }
    return it->second;
  }

 private:
  void build_index() {
    if (index_valid_) return;
    by_id_.clear();
    for (const auto& f : families_) {
      for (const auto& id : f->ids()) by_id_[id] = f;
    }
    index_valid_ = true;
  }

  std::mutex mu_;
  std::vector<std::shared_ptr<EnvFamily>> families_;
  std::map<std::string, std::shared_ptr<EnvFamily>> by_id_;
  bool index_valid_ = false;
};

// Registers a family object at static-initialisation time.
struct RegisterFamily {
  explicit RegisterFamily(std::shared_ptr<EnvFamily> f) { Registry::instance().add(std::move(f)); }
};

}  // namespace torchfrag

#define TORCHFRAG_CONCAT_INNER(a, b) a##b
#define TORCHFRAG_CONCAT(a, b) TORCHFRAG_CONCAT_INNER(a, b)

// One env class, one id: TORCHFRAG_REGISTER_ENV(CartPoleEnv, "CartPole-v1")
#define TORCHFRAG_REGISTER_ENV(EnvT, id)                                      \
  static ::torchfrag::RegisterFamily TORCHFRAG_CONCAT(tf_register_, __LINE__)( \
      std::make_shared<::torchfrag::SingleEnvFamily<EnvT>>(id))

// A whole family object: TORCHFRAG_REGISTER_FAMILY(AtariFamily)
#define TORCHFRAG_REGISTER_FAMILY(FamilyT)                                    \
  static ::torchfrag::RegisterFamily TORCHFRAG_CONCAT(tf_register_, __LINE__)( \
      std::make_shared<FamilyT>())
