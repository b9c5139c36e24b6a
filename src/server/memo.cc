// LRU list + index; the byte count covers keys and recorded outcomes.
#include "server/memo.h"

namespace deltafin::server {

size_t Outcome::bytes() const {
  size_t n = sizeof(Outcome) + finish_reason.size();
  for (const Delta& d : deltas)
    n += sizeof(Delta) + d.text.size() + d.call.id.size() + d.call.name.size() +
         d.call.arguments.size();
  return n;
}

std::optional<Outcome> ResponseMemo::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->outcome;
}

void ResponseMemo::insert(const std::string& key, const Outcome& outcome) {
  const size_t size = key.size() + outcome.bytes();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (max_entries_ == 0 || size > max_bytes_) return;
  lru_.push_front(Entry{key, outcome, size});
  index_.emplace(key, lru_.begin());
  bytes_ += size;
  evict_locked();
}

void ResponseMemo::evict_locked() {
  while (lru_.size() > max_entries_ || bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t ResponseMemo::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponseMemo::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace deltafin::server
