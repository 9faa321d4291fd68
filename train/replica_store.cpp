#include "ftcc/train/replica_store.hpp"

#include <algorithm>
#include <functional>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"

namespace ftcc::train {

void ReplicaStore::put(std::int64_t step, UnitKey key, Bytes bytes) {
  put(step, key, std::make_shared<Bytes>(std::move(bytes)));
}

void ReplicaStore::put(std::int64_t step, UnitKey key, std::shared_ptr<Bytes> bytes) {
  FTCC_INVARIANT(bytes) << "replica store: null bytes for unit " << key.index << " of " << key.of;
  m_[step][key] = Entry{std::move(bytes), {}};
}

void ReplicaStore::put_lazy(std::int64_t step, UnitKey key, std::function<Bytes()> make) {
  m_[step][key] = Entry{nullptr, std::move(make)};
}

void ReplicaStore::drop_unmade() {
  for (auto s = m_.begin(); s != m_.end();) {
    std::erase_if(s->second, [](const auto& e) { return !e.second.bytes; });
    s = s->second.empty() ? m_.erase(s) : std::next(s);
  }
}

const std::shared_ptr<Bytes>& ReplicaStore::get(std::int64_t step, UnitKey key) const {
  const auto s = m_.find(step);
  FTCC_INVARIANT(s != m_.end() && s->second.count(key)) << "replica store: no unit " << key.index << " of " << key.of
                                                    << " at step " << step;
  const Entry& e = s->second.at(key);
  if (!e.bytes) e.bytes = std::make_shared<Bytes>(e.make());
  return e.bytes;
}

bool ReplicaStore::made(std::int64_t step, UnitKey key) const {
  const auto at = m_.find(step);
  if (at == m_.end()) return false;
  const auto e = at->second.find(key);
  return e != at->second.end() && e->second.bytes != nullptr;
}

bool ReplicaStore::has(std::int64_t step, UnitKey key) const {
  const auto at = m_.find(step);
  return at != m_.end() && at->second.contains(key);
}

void ReplicaStore::keep_newest(int steps) {
  while (static_cast<int>(m_.size()) > steps) m_.erase(m_.begin());
}

void ReplicaStore::drop_after(std::int64_t step) { m_.erase(m_.upper_bound(step), m_.end()); }

std::size_t ReplicaStore::bytes() const {
  std::size_t b = 0;
  for (const auto& [s, units] : m_)
    for (const auto& [k, e] : units) b += e.bytes ? e.bytes->size() : 0;
  return b;
}

std::vector<std::int64_t> ReplicaStore::encode() const {
  std::vector<std::int64_t> e;
  for (auto s = m_.rbegin(); s != m_.rend(); ++s)
    for (const auto& [k, v] : s->second) e.insert(e.end(), {s->first, k.index, k.of});
  return e;
}

std::vector<std::vector<Holding>> gather_holdings(comm::Communicator& c, const ReplicaStore& mine) {
  namespace fc = ftcc::comm;
  // Every buffer of these collectives in a KeptBuffer: a failure that interrupts them leaves it alive.
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_enc(mine.encode());
  std::vector<std::int64_t>& enc = *kept_enc;
  const fc::KeptBuffer<std::int64_t> count(static_cast<std::int64_t>(enc.size() / 3));
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_counts(static_cast<size_t>(c.size()));
  const std::vector<std::int64_t>& counts = *kept_counts;
  fc::allgather(c, count.get(), kept_counts->data(), 1, fc::DType::i64);
  std::int64_t most = 0;
  for (auto n : counts) most = std::max(most, n);
  enc.resize(3 * static_cast<size_t>(most), -1);
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_all(enc.size() * static_cast<size_t>(c.size()));
  const std::vector<std::int64_t>& all = *kept_all;
  if (most > 0) fc::allgather(c, enc.data(), kept_all->data(), enc.size(), fc::DType::i64);
  std::vector<std::vector<Holding>> out(static_cast<size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r)
    for (std::int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
      const std::int64_t* e = &all[static_cast<size_t>(r) * enc.size() + 3 * static_cast<size_t>(i)];
      out[static_cast<size_t>(r)].push_back({e[0], {static_cast<int>(e[1]), static_cast<int>(e[2])}});
    }
  return out;
}

RestorePlan plan_restore(const std::vector<std::vector<Holding>>& holdings, int units_if_none) {
  // (step, of), newest first, larger `of` first at one step -> per unit the lowest rank holding it.
  std::map<std::pair<std::int64_t, int>, std::vector<int>, std::greater<>> at;
  for (std::size_t r = 0; r < holdings.size(); ++r)
    for (const auto& h : holdings[r]) {
      if (h.key.of <= 0 || h.key.index < 0 || h.key.index >= h.key.of) continue;
      auto& holder = at[{h.step, h.key.of}];
      holder.resize(static_cast<std::size_t>(h.key.of), -1);
      int& slot = holder[static_cast<std::size_t>(h.key.index)];
      if (slot < 0) slot = static_cast<int>(r);
    }
  RestorePlan best_partial;
  int best_covered = -1;
  for (const auto& [where, holder] : at) {
    const int covered = static_cast<int>(std::count_if(holder.begin(), holder.end(), [](int h) { return h >= 0; }));
    if (covered == where.second) return RestorePlan{where.first, where.second, holder, {}};
    if (covered > best_covered) {
      best_covered = covered;
      best_partial = RestorePlan{-1, where.second, {}, {}};
      for (int u = 0; u < where.second; ++u)
        if (holder[static_cast<std::size_t>(u)] < 0) best_partial.lost.push_back(u);
    }
  }
  if (best_covered < 0) {
    best_partial.of = units_if_none;
    for (int u = 0; u < units_if_none; ++u) best_partial.lost.push_back(u);
  }
  return best_partial;
}

}  // namespace ftcc::train
