#!/usr/bin/env bash
# Installs every Debian package mvibr needs to build and test. Idempotent: packages already
# present are skipped, so running it twice costs only the dpkg query.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  # Boost.Context: the emulated CUDA device's fibers (test/emulated_cuda/).
  libboost-context-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libopenblas-dev libstb-dev libjpeg62-turbo-dev libpng-dev nlohmann-json3-dev
  python3-torch python3-numpy python3-h5py
  python3-matplotlib python3-venv
  # The Slurm test (test/integration/slurm_test.sh) runs slurmctld, slurmd and munged on
  # localhost; the basic plugins hold mpi/pmix for srun --mpi=pmix.
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi

# TensorBoard, which the monitoring test reads event files with, is not packaged by Debian: pip
# installs it into a virtual environment that also sees Debian's packages (torch, numpy), so
# nothing in the system's Python changes. test/integration/monitoring_cli_test.sh looks here.
python_env=${MVIBR_PYTHON_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mvibr/python}
if ! "$python_env/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "setup: installing tensorboard into $python_env"
  /usr/bin/python3 -m venv --system-site-packages "$python_env"
  "$python_env/bin/python" -m pip install -q --disable-pip-version-check tensorboard==2.21.0
fi
