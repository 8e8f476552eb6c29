// The MPI side of a run: initialisation with thread support (gradient buckets are all-reduced on
// a worker thread and the watchdog may abort from its own), the layout of ranks over hosts, and
// the MPI communicator. One program serves every launcher: mpirun (Open MPI), srun --mpi=pmix,
// and a single process started without any launcher (MPI's singleton mode).
#pragma once

#include <memory>
#include <string>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks of this host
  int hosts = 1;
  std::string host;  // this rank's host name
};

class MpiSession {
 public:
  // MPI_Init_thread asking for MPI_THREAD_MULTIPLE (unless MPI is already initialised), then the
  // topology. Throws RuntimeFailure when MPI provides less than MPI_THREAD_SERIALIZED, and
  // InvalidArgument when Slurm started several tasks that MPI does not see as one job (srun
  // without --mpi=pmix: every task would train alone as rank 0).
  MpiSession(int* argc, char*** argv);
  ~MpiSession();  // MPI_Finalize, when this session initialised MPI
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  const Topology& topology() const { return topology_; }
  // Whether several threads may call MPI at once (else only one at a time).
  bool thread_multiple() const { return thread_multiple_; }
  // A communicator over all ranks (MPI_COMM_WORLD, duplicated).
  std::unique_ptr<Communicator> world() const;
  // Ends every rank of the job now (MPI_Abort), with `code` as the job's exit status.
  [[noreturn]] static void abort_job(int code);

 private:
  Topology topology_;
  bool owns_mpi_ = false;
  bool thread_multiple_ = false;
};

}  // namespace mvibr::dist
