// Collectives over MPI (see mpi_communicator.h). Counts above INT_MAX elements are sent in
// pieces, since MPI's counts are ints.
#include "mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "mvibr/core/error.h"

namespace mvibr::dist {

namespace {

constexpr size_t kMaxPiece = size_t(INT_MAX) / 8 * 8;

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RuntimeFailure(std::string(call) + " failed: " + std::string(text, size_t(length)));
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
}

template <typename T>
void all_reduce_pieces(MPI_Comm comm, int size, T* data, size_t count, ReduceOp op,
                       MPI_Datatype type) {
  for (size_t first = 0; first < count; first += kMaxPiece) {
    const int piece = int(std::min(kMaxPiece, count - first));
    check(MPI_Allreduce(MPI_IN_PLACE, data + first, piece, type, mpi_op(op), comm),
          "MPI_Allreduce");
  }
  if (op == ReduceOp::kAverage) {
    const T scale = T(1) / T(size);
    for (size_t i = 0; i < count; ++i) data[i] *= scale;
  }
}

// MPI has no bfloat16: the values travel as MPI_UINT16_T and this op adds them.
extern "C" void add_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Op_create(add_bf16, 1, &bf16_sum_), "MPI_Op_create");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Op_free(&bf16_sum_);
  MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  all_reduce_pieces(comm_, size_, data, count, op, MPI_FLOAT);
}

void MpiCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  all_reduce_pieces(comm_, size_, data, count, op, MPI_DOUBLE);
}

void MpiCommunicator::all_reduce_bf16_sum(uint16_t* data, size_t count) {
  for (size_t first = 0; first < count; first += kMaxPiece) {
    const int piece = int(std::min(kMaxPiece, count - first));
    check(MPI_Allreduce(MPI_IN_PLACE, data + first, piece, MPI_UINT16_T, bf16_sum_, comm_),
          "MPI_Allreduce (bfloat16)");
  }
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  auto* bytes_ptr = static_cast<uint8_t*>(data);
  for (size_t first = 0; first < bytes; first += kMaxPiece) {
    const int piece = int(std::min(kMaxPiece, bytes - first));
    check(MPI_Bcast(bytes_ptr + first, piece, MPI_BYTE, root, comm_), "MPI_Bcast");
  }
}

void MpiCommunicator::all_gather(const void* send, size_t bytes, void* receive) {
  if (bytes > kMaxPiece) throw InvalidArgument("all_gather of more than 2 GiB per rank");
  check(MPI_Allgather(send, int(bytes), MPI_BYTE, receive, int(bytes), MPI_BYTE, comm_),
        "MPI_Allgather");
}

void MpiCommunicator::barrier() {
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace mvibr::dist
