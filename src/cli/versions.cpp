// `mvibr --version`: what was built and with which libraries, so that a bug report or a
// benchmark record says exactly what ran.
#include <H5public.h>
#include <mpi.h>
#include <omp.h>

#include <boost/version.hpp>
#include <sstream>

#include "../nn/small_gemm.h"
#include "commands.h"
#include "mvibr/build_info.h"
#include "mvibr/core/device.h"

#if MVIBR_HAVE_CUDA
#include <cudnn.h>
#include <nccl.h>
#endif

namespace mvibr::cli {

std::string version_report() {
  std::ostringstream out;
  out << "mvibr " << MVIBR_VERSION << " (" << MVIBR_GIT_REVISION << ")\n";
  out << "cpu backend: OpenMP " << _OPENMP << ", " << omp_get_max_threads()
      << " threads, dense layers on " << nn::gemm_isa_name(nn::best_gemm_isa()) << "\n";
  if (cuda_backend_built()) {
    const int devices = cuda_device_count();
    out << "cuda backend: built, " << devices << " device(s)";
    for (int d = 0; d < devices; ++d) out << (d ? "; " : ": ") << cuda_device_description(d);
    out << "\n";
  } else {
    out << "cuda backend: not built\n";
  }
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  mpi = mpi.substr(0, mpi.find_first_of(",\n"));
  out << "mpi: " << mpi << "\n";
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  out << "hdf5: " << major << "." << minor << "." << release << "\n";
  out << "boost: " << BOOST_VERSION / 100000 << "." << BOOST_VERSION / 100 % 1000 << "."
      << BOOST_VERSION % 100 << "\n";
#if MVIBR_HAVE_CUDA
  const size_t cudnn = cudnnGetVersion();
  out << "cudnn: " << cudnn / 10000 << "." << cudnn / 100 % 100 << "." << cudnn % 100 << "\n";
  int nccl = 0;
  ncclGetVersion(&nccl);
  out << "nccl: " << nccl / 10000 << "." << nccl / 100 % 100 << "." << nccl % 100 << "\n";
#endif
  return out.str();
}

}  // namespace mvibr::cli
