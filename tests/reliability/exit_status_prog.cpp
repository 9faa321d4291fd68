// An embedding program for the exit-status table (tests/reliability/exit_status.py): the way a
// user writes a fault-tolerant loop with recovery/run_job.hpp, plus the ways such a program ends
// badly. Usage (under tools/ftcc-run):
//   exit_status_prog loop [FAULT_SPEC...]   20 steps of a resilient allreduce; checks each sum
//   exit_status_prog throw-on-rank1         rank 1 throws at step 5: a job-level error (4)
//   exit_status_prog invariant-on-rank1     rank 1's FTCC_INVARIANT fails at step 5: internal error (1)
//   exit_status_prog exit-all               every rank makes a ResilientGroup, then exit(1)
//   exit_status_prog shm-pressure           a small allreduce, then rank 0 fills /dev/shm to 512 KiB free
//                                           (only a private tmpfs of at most 256 MiB: the test mounts one,
//                                           FTCC_TEST_PRIVATE_SHM=1), then a 16 MiB allreduce, checked
#include <fcntl.h>
#include <mpi.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"

namespace fr = ftcc::recovery;
namespace fc = ftcc::comm;

namespace {

// The shared-memory segment is set up (and its first pages touched) by the first allreduce; then
// something else takes nearly all of /dev/shm, as DataLoader workers do; the next allreduce
// touches pages of the segment it never touched before.
int shm_pressure() {
  fc::Communicator comm = fc::Communicator::duplicate(MPI_COMM_WORLD, fc::CommOptions{60});
  const int n = comm.size();
  std::vector<float> small(256, 1.0f);
  fc::allreduce(comm, fc::kInPlace, small.data(), small.size(), fc::DType::f32, fc::ReduceOp::sum);
  const char* fill = "/dev/shm/ftcc-test-fill";
  unsigned long long free_kib = 0;
  if (comm.rank() == 0) {
    struct statvfs fs{};
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only
    const char* priv = std::getenv("FTCC_TEST_PRIVATE_SHM");
    if (!priv || std::string(priv) != "1" || ::statvfs("/dev/shm", &fs) != 0 ||
        static_cast<unsigned long long>(fs.f_blocks) * fs.f_frsize > (256ull << 20))
      throw std::runtime_error("shm-pressure fills /dev/shm: run it only on a private tmpfs of at most 256 MiB there");
    const unsigned long long avail = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
    const int fd = ::open(fill, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || avail <= (512u << 10) || ::posix_fallocate(fd, 0, static_cast<off_t>(avail - (512u << 10))) != 0)
      throw std::runtime_error("shm-pressure: could not fill /dev/shm");
    ::close(fd);
    ::statvfs("/dev/shm", &fs);
    free_kib = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize / 1024;
  }
  fc::barrier(comm);
  std::vector<float> big(4u << 20, static_cast<float>(comm.rank() + 1));  // 16 MiB
  fc::allreduce(comm, fc::kInPlace, big.data(), big.size(), fc::DType::f32, fc::ReduceOp::sum);
  const float want = static_cast<float>(n * (n + 1) / 2);
  std::size_t wrong = 0;
  for (float v : big) wrong += v != want ? 1 : 0;
  fc::barrier(comm);
  if (comm.rank() == 0) ::unlink(fill);
  if (wrong) throw std::runtime_error("shm-pressure: " + std::to_string(wrong) + " wrong elements on rank " +
                                     std::to_string(comm.rank()));
  if (comm.rank() == 0)
    std::printf("shm-pressure: a 16 MiB allreduce correct on %d ranks with /dev/shm at %llu KiB free; shared memory: %s\n",
                n, free_kib, comm.uses_shared_memory() ? "yes" : "no");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::string mode = argc > 1 ? argv[1] : "loop";
  fr::GroupOptions opt;
  opt.hang_timeout = std::chrono::milliseconds(2000);
  for (int i = 2; i < argc; ++i) opt.faults.push_back(fr::parse_fault_spec(argv[i]));

  if (mode == "shm-pressure") {
    const int rc = shm_pressure();
    MPI_Finalize();
    return rc;
  }
  if (mode == "exit-all") {
    fr::ResilientGroup g(MPI_COMM_WORLD, opt);
    std::exit(1);  // NOLINT(concurrency-mt-unsafe): the behaviour under test
  }
  return fr::run_job(MPI_COMM_WORLD, opt, [&](fr::ResilientGroup& g) {
    for (std::int64_t step = 0; step < 20; ++step) {
      g.begin_step(step);
      if (mode == "throw-on-rank1" && g.original_rank() == 1 && step == 5)
        throw std::runtime_error("rank 1 cannot open its input shard");
      const std::int64_t expected_step = mode == "invariant-on-rank1" && g.original_rank() == 1 ? 4 : 5;
      if (step == 5) {
        FTCC_INVARIANT(step == expected_step) << "the loop's step and its record disagree";
      }
      double sum = 0;
      // fn rebuilds its input on every attempt: a retry after a failure starts from scratch.
      const bool ran = g.run(step, [&](fc::Communicator& c) {
        double mine = g.original_rank() + 1.0;
        fc::allreduce(c, &mine, &sum, 1, fc::DType::f64, fc::ReduceOp::sum);
      });
      g.set_committed_step(step);
      if (!ran) continue;  // the group finished this step without this rank's last attempt
      double expected = 0;
      for (int r : g.members()) expected += r + 1.0;
      if (sum != expected) throw std::runtime_error("step " + std::to_string(step) + ": sum " + std::to_string(sum) +
                                                    ", expected " + std::to_string(expected));
    }
    if (g.rank() == 0) std::printf("exit_status_prog: 20 steps on %d of %d ranks\n", g.size(), g.initial_size());
  }, {.name = "exit_status_prog"});
}
