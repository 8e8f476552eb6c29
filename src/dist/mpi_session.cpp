// MPI initialisation and the rank layout (see mpi_session.h).
#include "mvibr/dist/mpi_session.h"

#include <mpi.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "mpi_communicator.h"
#include "mvibr/core/error.h"

namespace mvibr::dist {

namespace {

// The task count of the Slurm job step this process belongs to, or 0 outside one. srun sets it
// for the tasks it starts; under mpirun inside an allocation it counts the per-node daemons.
int slurm_step_tasks() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  return tasks ? std::atoi(tasks) : 0;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw RuntimeFailure("MPI_Init_thread failed");
    }
    owns_mpi_ = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw RuntimeFailure("MPI provides thread level " + std::to_string(provided) +
                         "; mvibr needs at least MPI_THREAD_SERIALIZED");
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;

  MPI_Comm_rank(MPI_COMM_WORLD, &topology_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &topology_.size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, topology_.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &topology_.local_rank);
  MPI_Comm_size(local, &topology_.local_size);
  MPI_Comm_free(&local);

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  topology_.host.assign(name, size_t(length));
  MpiCommunicator world_comm(MPI_COMM_WORLD);
  const std::vector<std::string> hosts = all_gather_strings(world_comm, topology_.host);
  topology_.hosts = int(std::set<std::string>(hosts.begin(), hosts.end()).size());

  const int tasks = slurm_step_tasks();
  if (tasks > 1 && topology_.size == 1) {
    throw InvalidArgument("srun started " + std::to_string(tasks) +
                          " tasks but MPI sees a job of 1 rank: start mvibr with "
                          "`srun --mpi=pmix` (or mpirun inside the allocation)");
  }
}

MpiSession::~MpiSession() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world() const {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
}

void MpiSession::abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this is for the compiler and odd MPIs
}

}  // namespace mvibr::dist
