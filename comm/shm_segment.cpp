#include "ftcc/comm/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/host_identity.hpp"
#include "ftcc/comm/subgroup_transport.hpp"

namespace ftcc::comm::detail {
namespace {

constexpr std::size_t kKeyBytes = 256, kNameBytes = 128;
constexpr std::size_t kMiB = std::size_t{1} << 20;
// The whole segment stays within this (both channels, both generations, every rank's slot and the
// result slot): 36-40 MiB on 4-8 ranks, reserved in tmpfs while the communicator lives.
constexpr std::size_t kBudgetBytes = 48 * kMiB;
constexpr std::size_t kMaxSlotBytes = 2 * kMiB, kMinSlotBytes = 64 * 1024;
char g_liveness_sink = 0;  // the liveness receives' buffer (zero bytes; nothing is ever sent)

// Letters, digits, '-', '_' and '.' only: a shared-memory name is one path component.
std::string sanitized(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Unmaps (and, while it still names the object, unlinks) on every path out of attach.
struct Mapping {
  void* base = MAP_FAILED;
  std::size_t bytes = 0;
  std::string unlink_name;
  ~Mapping() {
    if (!unlink_name.empty()) ::shm_unlink(unlink_name.c_str());
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
};

// Rank 0: creates, sizes and reserves the object. Returns the mapping's address or MAP_FAILED.
void* create_object(const std::string& name, std::size_t bytes, std::string& error) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    error = std::string("shm_open: ") + std::strerror(errno);
    return MAP_FAILED;
  }
  void* p = MAP_FAILED;
  struct statvfs fs{};
  if (::fstatvfs(fd, &fs) == 0 && static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize < 2 * bytes) {
    error = "/dev/shm has less than twice that free";
  } else if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = std::string("ftruncate: ") + std::strerror(errno);
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) error = std::string("mmap: ") + std::strerror(errno);
  }
  ::close(fd);
  return p;
}

void* open_object(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return MAP_FAILED;
  struct stat st{};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes)
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p;
}

}  // namespace

std::string ShmSegment::name_prefix() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  const char* job = std::getenv("FTCC_JOB_DIR");
  std::string dir = job && *job ? job : "";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string base = dir.empty() ? "" : dir.substr(dir.find_last_of('/') + 1);
  if (base.empty()) return "ftcc-shm.pid" + std::to_string(::getpid());
  // The folder's inode number tells apart two jobs whose folders share a name (every test's
  // job folder is ".../job"): tools/ftcc-run removes only its own job's names.
  struct stat st {};
  const std::string ino = ::stat(dir.c_str(), &st) == 0 ? "." + std::to_string(st.st_ino) : "";
  // At most 64 characters of the name, so that the whole name fits the 128 bytes exchanged.
  return "ftcc-shm." + sanitized(base.substr(0, 64)) + ino;
}

std::size_t ShmSegment::slot_bytes_for(int ranks) {
  const std::size_t slots = static_cast<std::size_t>(kChannels * kGenerations * (ranks + 1));
  std::size_t s = kMaxSlotBytes;
  while (s > kMinSlotBytes && s * slots > kBudgetBytes) s /= 2;
  return s;
}

std::byte* ShmSegment::Channel::slot(int generation, int r) const {
  return data_ + (static_cast<std::size_t>(generation) * static_cast<std::size_t>(size_ + 1) + static_cast<std::size_t>(r)) *
                     slot_bytes_;
}

int ShmSegment::Channel::host_rank_of(int r) const {
  const auto at = std::find(members_.begin(), members_.end(), r);
  FTCC_CHECK(at != members_.end()) << "rank " << r << " is not on this host";
  return static_cast<int>(at - members_.begin());
}

void ShmSegment::Channel::check_peers(const char* op) {
  for (std::size_t p = 0; p < liveness_.size(); ++p) {
    if (!posted_[p]) continue;
    bool done = false;
    try {
      done = transport_->test(liveness_[p], op);  // throws ProcessFailed / Revoked, naming the peer
    } catch (...) {
      posted_[p] = false;  // the transport released it
      throw;
    }
    if (done) {
      posted_[p] = false;
      throw CommError(op, "a message arrived on the shared-memory liveness tag (another program on this communicator?)");
    }
  }
}

std::unique_ptr<ShmSegment> ShmSegment::attach(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  if (comm.raw() == MPI_COMM_NULL || n < 2) return nullptr;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  const char* off = std::getenv("FTCC_SHM");
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  const char* group = std::getenv("FTCC_SHM_GROUP");

  // 1. The hosts. Every rank compares the same list, so every rank reaches the same answer (a
  // rank with FTCC_SHM=0 takes part too, with a key that says so: then nobody uses shared memory).
  constexpr char kOff[] = "FTCC_SHM=0";
  std::array<char, kKeyBytes> key{};
  std::string id = off && std::string(off) == "0" ? std::string(kOff) : shared_memory_identity();
  if (group && *group) id += std::string("/group:") + group;
  std::memcpy(key.data(), id.data(), std::min(id.size(), kKeyBytes - 1));
  std::vector<char> keys(kKeyBytes * static_cast<std::size_t>(n));
  allgather(comm, key.data(), keys.data(), kKeyBytes, DType::u8);
  auto key_of = [&](int r) { return keys.data() + kKeyBytes * static_cast<std::size_t>(r); };
  std::vector<int> host_of(static_cast<std::size_t>(n), -1), leaders;  // hosts in their leaders' order
  for (int r = 0; r < n; ++r) {
    if (std::strncmp(key_of(r), kOff, sizeof kOff - 1) == 0) return nullptr;
    for (std::size_t h = 0; h < leaders.size() && host_of[static_cast<std::size_t>(r)] < 0; ++h)
      if (std::memcmp(key_of(r), key_of(leaders[h]), kKeyBytes) == 0) host_of[static_cast<std::size_t>(r)] = static_cast<int>(h);
    if (host_of[static_cast<std::size_t>(r)] < 0) {
      host_of[static_cast<std::size_t>(r)] = static_cast<int>(leaders.size());
      leaders.push_back(r);
    }
  }
  const int hosts = static_cast<int>(leaders.size());
  if (hosts == n) return nullptr;  // every rank alone on its host: nothing to share
  std::vector<int> members;        // the communicator's ranks of this host, ascending
  for (int r = 0; r < n; ++r)
    if (host_of[static_cast<std::size_t>(r)] == host_of[static_cast<std::size_t>(me)]) members.push_back(r);
  const int local = static_cast<int>(members.size());
  const int lr = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  // Every host the same size? Then my column is the lr-th rank of every host; else (the leaders
  // only) the first.
  std::vector<int> size_of(static_cast<std::size_t>(hosts), 0), column;
  for (int r = 0; r < n; ++r) ++size_of[static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)])];
  const bool uniform = std::all_of(size_of.begin(), size_of.end(), [&](int k) { return k == local; });
  for (int h = 0, place = uniform ? lr : 0; h < hosts; ++h) {
    int seen = 0;
    for (int r = 0; r < n; ++r)
      if (host_of[static_cast<std::size_t>(r)] == h && seen++ == place) column.push_back(r);
  }

  // 2. Each leader of a host with several ranks creates its object; the names are allgathered; the
  // others map their host's; the leaders unlink theirs once every rank has its own mapped.
  const std::size_t slot = slot_bytes_for(local);
  const std::size_t flags_bytes = static_cast<std::size_t>(kChannels * 2 * local) * sizeof(Flag);
  const std::size_t data_at = align_up(flags_bytes, 4096);
  const std::size_t bytes = local > 1 ? data_at + static_cast<std::size_t>(kChannels * kGenerations * (local + 1)) * slot : 0;
  Mapping m;
  m.bytes = bytes;
  std::array<char, kNameBytes> name{};
  std::string error;
  if (lr == 0 && local > 1) {
    static std::atomic<unsigned> made{0};
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".%ld.%u", static_cast<long>(::getpid()), made++);
    const std::string nm = std::string("/").append(name_prefix()).append(suffix);
    m.base = create_object(nm, bytes, error);
    if (m.base == MAP_FAILED)
      std::fprintf(stderr, "ftcc: no shared memory for this communicator's collectives (%s of %zu bytes: %s); they go over "
                   "MPI point-to-point\n", nm.c_str(), bytes, error.c_str());
    m.unlink_name = nm;  // until every rank has mapped its own (or on any error)
    if (m.base != MAP_FAILED) std::memcpy(name.data(), nm.data(), std::min(nm.size(), kNameBytes - 1));
  }
  std::vector<char> names(kNameBytes * static_cast<std::size_t>(n));
  allgather(comm, name.data(), names.data(), kNameBytes, DType::u8);
  const char* my_name = names.data() + kNameBytes * static_cast<std::size_t>(members[0]);
  if (lr != 0 && my_name[0] != '\0') m.base = open_object(my_name, bytes);
  std::int32_t mapped = local == 1 || m.base != MAP_FAILED ? 1 : 0;
  rhd_allreduce(comm, kInPlace, &mapped, 1, DType::i32, ReduceOp::min);
  if (!m.unlink_name.empty()) {
    ::shm_unlink(m.unlink_name.c_str());  // every rank has mapped its own, or given up
    m.unlink_name.clear();
  }
  if (!mapped) return nullptr;

  // 3. The channels: their liveness receives from the host's other ranks, and the leaders' endpoint.
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->hosts_ = hosts;
  s->bytes_ = bytes;
  if (local > 1) {
    s->base_ = m.base;
    m.base = MAP_FAILED;  // the segment owns it now
  }
  auto* flags = static_cast<Flag*>(s->base_);
  for (int c = 0; c < kChannels; ++c) {
    Channel& ch = s->channels_[c];
    ch.rank_ = lr;
    ch.size_ = local;
    ch.hosts_ = hosts;
    ch.slot_bytes_ = slot;
    ch.members_ = members;
    ch.host_of_ = host_of;
    if (flags != nullptr) {
      ch.arrived_ = flags + static_cast<std::size_t>(2 * c * local);
      ch.reduced_ = flags + static_cast<std::size_t>((2 * c + 1) * local);
      ch.data_ = static_cast<std::byte*>(s->base_) + data_at +
                 static_cast<std::size_t>(c * kGenerations * (local + 1)) * slot;
    }
    ch.sliced_ = uniform;
    if (hosts > 1 && (uniform || lr == 0)) {  // my column: the rank of my place on every host (the leaders, for place 0)
      ch.across_ranks_ = column;
      ch.across_ = std::make_unique<SubgroupTransport>(comm.transport(), column, SubgroupTransport::Tags::parents);
    }
    ch.transport_ = std::make_unique<SubgroupTransport>(comm.transport(), members, SubgroupTransport::Tags::parents);
    ch.liveness_.assign(static_cast<std::size_t>(local), 0);
    ch.posted_.assign(static_cast<std::size_t>(local), false);
    for (int p = 0; p < local; ++p)
      if (p != lr) {
        ch.liveness_[static_cast<std::size_t>(p)] =
            ch.transport_->irecv(&g_liveness_sink, 0, p, comm.liveness_tag(), "shared-memory liveness receive");
        ch.posted_[static_cast<std::size_t>(p)] = true;
      }
  }
  return s;
}

ShmSegment::~ShmSegment() {
  int finalized = 0;
  MPI_Finalized(&finalized);  // a communicator that outlives MPI_Finalize must not touch MPI
  for (Channel& ch : channels_)
    for (std::size_t p = 0; p < ch.posted_.size(); ++p)
      if (ch.posted_[p] && !finalized) ch.transport_->abandon(ch.liveness_[p]);  // cancels the receive
  if (base_) ::munmap(base_, bytes_);
}

}  // namespace ftcc::comm::detail
