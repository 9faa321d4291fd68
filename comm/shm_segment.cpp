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
  int memfd = -1;  // a leader's memory file, open until every rank has mapped it
  // Ends what the name or the descriptor still holds (every rank has mapped its own, or given up).
  void release() {
    if (!unlink_name.empty()) ::shm_unlink(unlink_name.c_str());
    unlink_name.clear();
    if (memfd >= 0) ::close(memfd);
    memfd = -1;
  }
  void unmap() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    base = MAP_FAILED;
  }
  ~Mapping() {
    release();
    unmap();
  }
};

// How a host's segment is backed (FTCC_SHM_BACKING). memfd, the default: an anonymous memory file
// (memfd_create) that the other ranks open through /proc/<leader's pid>/fd/<fd>. Its pages come
// from the kernel's internal tmpfs, not /dev/shm, so a /dev/shm that fills up later (DataLoader
// workers do that) cannot take them, and it never has a name to leave behind. posix: a named
// object in /dev/shm whose pages are all reserved at set-up (posix_fallocate: a full /dev/shm is
// refused there, cleanly, instead of a SIGBUS in a collective later); the fallback when the memfd
// cannot be shared (another pid namespace, a non-dumpable process, /proc hidden).
enum class Backing : char { memfd = 0, posix = 'P', invalid = 'X' };

Backing backing_setting() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  const char* b = std::getenv("FTCC_SHM_BACKING");
  if (b == nullptr || *b == '\0' || std::string(b) == "memfd") return Backing::memfd;
  return std::string(b) == "posix" ? Backing::posix : Backing::invalid;
}

constexpr char kMemfdTag[] = "memfd:";

// A leader: creates and sizes an anonymous memory file and maps it. Returns the mapping's address
// (MAP_FAILED on error, with `error` set); `fd` stays open until every rank has mapped it.
void* create_memfd(std::size_t bytes, int& fd, std::string& error) {
  fd = ::memfd_create("ftcc-shm", MFD_CLOEXEC);
  if (fd < 0) {
    error = std::string("memfd_create: ") + std::strerror(errno);
    return MAP_FAILED;
  }
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    error = std::string("ftruncate: ") + std::strerror(errno);
  else if ((p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    error = std::string("mmap: ") + std::strerror(errno);
  return p;
}

// A leader: creates, sizes and reserves a named object in /dev/shm. Returns the mapping's address
// or MAP_FAILED.
void* create_object(const std::string& name, std::size_t bytes, std::string& error) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    error = std::string("shm_open: ") + std::strerror(errno);
    return MAP_FAILED;
  }
  void* p = MAP_FAILED;
  struct statvfs fs{};
  int rc = 0;
  if (::fstatvfs(fd, &fs) == 0 && static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize < 2 * bytes) {
    error = "/dev/shm has less than twice that free";
  } else if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = std::string("ftruncate: ") + std::strerror(errno);
  } else if ((rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0) {
    error = std::string("reserving its pages: ") + std::strerror(rc);
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) error = std::string("mmap: ") + std::strerror(errno);
  }
  ::close(fd);
  return p;
}

// The other ranks of a host: map what its leader made, if it has `bytes`. `where` is
// "memfd:<pid>:<fd>" or a name in /dev/shm. Returns MAP_FAILED, with `error` set, on failure.
void* open_object(const std::string& where, std::size_t bytes, std::string& error) {
  int fd = -1;
  if (where.rfind(kMemfdTag, 0) == 0) {
    long pid = 0, leader_fd = 0;
    if (std::sscanf(where.c_str() + sizeof kMemfdTag - 1, "%ld:%ld", &pid, &leader_fd) != 2) {
      error = "not a memory file's address";
      return MAP_FAILED;
    }
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(leader_fd);
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  } else {
    fd = ::shm_open(where.c_str(), O_RDWR, 0600);
  }
  if (fd < 0) {
    error = std::strerror(errno);
    return MAP_FAILED;
  }
  struct stat st{};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes)
    error = "not of the size the leader made";
  else if ((p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    error = std::string("mmap: ") + std::strerror(errno);
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
  // The key's last byte is the rank's FTCC_SHM_BACKING: posix on any rank makes every host use
  // named objects; a value that is neither is refused on every rank.
  constexpr char kOff[] = "FTCC_SHM=0";
  constexpr std::size_t kIdBytes = kKeyBytes - 1;
  std::array<char, kKeyBytes> key{};
  std::string id = off && std::string(off) == "0" ? std::string(kOff) : shared_memory_identity();
  if (group && *group) id += std::string("/group:") + group;
  std::memcpy(key.data(), id.data(), std::min(id.size(), kIdBytes - 1));
  key[kIdBytes] = static_cast<char>(backing_setting());
  std::vector<char> keys(kKeyBytes * static_cast<std::size_t>(n));
  allgather(comm, key.data(), keys.data(), kKeyBytes, DType::u8);
  auto key_of = [&](int r) { return keys.data() + kKeyBytes * static_cast<std::size_t>(r); };
  Backing backing = Backing::memfd;
  for (int r = 0; r < n; ++r) {
    const auto b = static_cast<Backing>(key_of(r)[kIdBytes]);
    FTCC_REQUIRE(b != Backing::invalid) << "FTCC_SHM_BACKING on rank " << r
                                        << " is neither memfd nor posix: set it to one of them, or unset it (memfd)";
    if (b == Backing::posix) backing = Backing::posix;
  }
  std::vector<int> host_of(static_cast<std::size_t>(n), -1), leaders;  // hosts in their leaders' order
  for (int r = 0; r < n; ++r) {
    if (std::strncmp(key_of(r), kOff, sizeof kOff - 1) == 0) return nullptr;
    for (std::size_t h = 0; h < leaders.size() && host_of[static_cast<std::size_t>(r)] < 0; ++h)
      if (std::memcmp(key_of(r), key_of(leaders[h]), kIdBytes) == 0) host_of[static_cast<std::size_t>(r)] = static_cast<int>(h);
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
  const std::size_t flags_bytes = static_cast<std::size_t>(kChannels * 2 * local + kChannels * kGenerations) * sizeof(Flag);
  const std::size_t data_at = align_up(flags_bytes, 4096);
  const std::size_t bytes = local > 1 ? data_at + static_cast<std::size_t>(kChannels * kGenerations * (local + 1)) * slot : 0;
  // The memory file first (unless FTCC_SHM_BACKING=posix somewhere); if any rank could not map
  // it, every rank tries a named object (each rank learns the same answer from the allreduce).
  Mapping m;
  m.bytes = bytes;
  std::int32_t mapped = 0;
  for (Backing attempt : {Backing::memfd, Backing::posix}) {
    if (attempt == Backing::memfd && backing == Backing::posix) continue;
    std::array<char, kNameBytes> name{};
    std::string where, error;
    if (lr == 0 && local > 1) {
      if (attempt == Backing::memfd) {
        m.base = create_memfd(bytes, m.memfd, error);
        where = std::string(kMemfdTag) + std::to_string(::getpid()) + ":" + std::to_string(m.memfd);
      } else {
        static std::atomic<unsigned> made{0};
        char suffix[48];
        std::snprintf(suffix, sizeof suffix, ".%ld.%u", static_cast<long>(::getpid()), made++);
        where = std::string("/").append(name_prefix()).append(suffix);
        m.base = create_object(where, bytes, error);
        m.unlink_name = where;  // until every rank has mapped its own (or on any error)
      }
      if (m.base == MAP_FAILED)
        std::fprintf(stderr, "ftcc: no shared memory for this communicator's collectives (%s of %zu bytes: %s); %s\n",
                     attempt == Backing::memfd ? "a memory file" : where.c_str(), bytes, error.c_str(),
                     attempt == Backing::memfd ? "trying a named object in /dev/shm" : "they go over MPI point-to-point");
      else
        std::memcpy(name.data(), where.data(), std::min(where.size(), kNameBytes - 1));
    }
    std::vector<char> names(kNameBytes * static_cast<std::size_t>(n));
    allgather(comm, name.data(), names.data(), kNameBytes, DType::u8);
    const char* my_name = names.data() + kNameBytes * static_cast<std::size_t>(members[0]);
    if (lr != 0 && my_name[0] != '\0') {
      m.base = open_object(my_name, bytes, error);
      if (m.base == MAP_FAILED)
        std::fprintf(stderr, "ftcc: rank %d could not map its host's shared memory (%s: %s); %s\n", me, my_name,
                     error.c_str(), attempt == Backing::memfd ? "trying a named object in /dev/shm" : "the collectives go over MPI point-to-point");
    }
    mapped = local == 1 || m.base != MAP_FAILED ? 1 : 0;
    rhd_allreduce(comm, kInPlace, &mapped, 1, DType::i32, ReduceOp::min);
    m.release();  // every rank has mapped its own, or given up
    if (mapped) break;
    m.unmap();
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
      ch.claims_ = flags + static_cast<std::size_t>(kChannels * 2 * local + c * kGenerations);
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

namespace ftcc::comm {

void check_shm_backing_setting() {
  if (detail::backing_setting() != detail::Backing::invalid) return;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  FTCC_REQUIRE(false) << "FTCC_SHM_BACKING='" << std::getenv("FTCC_SHM_BACKING")
                      << "' is neither memfd nor posix: set it to one of them, or unset it (memfd)";
}

}  // namespace ftcc::comm
