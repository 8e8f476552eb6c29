// The GPU side of a data-parallel job: which device a rank drives, and NCCL collectives over
// device buffers. MPI starts the ranks; rank 0 asks NCCL for a unique id and the MPI
// communicator broadcasts it; every rank then joins the NCCL communicator on its own device.
// In a build without CUDA both functions report that there is no GPU.
#pragma once

#include <memory>

#include "mvibr/dist/communicator.h"
#include "mvibr/dist/mpi_session.h"

namespace mvibr::dist {

// The device of this rank, local_rank % devices on its host (one rank per GPU; more ranks than
// GPUs share them round-robin), made current; -1 when the host has no CUDA device.
int select_device(const Topology& topology);

// A Communicator whose collectives run on NCCL over `device` memory.
// - Every pointer passed to it is device memory, final when the call is made (the collectives run
//   on a stream of their own that waits for no other: the caller synchronises what wrote them).
// - A call blocks until the collective is complete, at most `timeout_seconds`: an NCCL error or
//   the timeout aborts the communicator (ncclCommAbort) and throws RuntimeFailure naming the
//   call, so a failed or stalled peer never leaves this rank waiting; later calls throw too.
// - `bootstrap` (the MPI communicator of the same ranks) carries the unique id.
// - Throws RuntimeFailure in a build without CUDA or without a device.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     double timeout_seconds);

}  // namespace mvibr::dist
