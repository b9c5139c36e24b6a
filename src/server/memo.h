// The exact-response memo: byte-identical requests whose output is fully determined (greedy, or
// sampled with a seed) are answered from the recorded outcome instead of the model. Bounded in
// entries and bytes, least recently used first out; thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/outcome.h"

namespace deltafin::server {

class ResponseMemo {
 public:
  ResponseMemo(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  std::optional<Outcome> find(const std::string& key);
  // Stores (or refreshes) key; an entry larger than the whole byte bound is not kept.
  void insert(const std::string& key, const Outcome& outcome);

  size_t entries() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string key;
    Outcome outcome;
    size_t bytes;
  };
  void evict_locked();

  size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace deltafin::server
