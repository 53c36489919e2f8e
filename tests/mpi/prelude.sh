# Sourced by the MPI end-to-end scripts: arguments TESSEL_BINARY CONFIG_DIR MPIRUN, a scratch working
# directory removed at exit (kept when KEEP_WORK is set, to look at a failure), and OpenMPI allowed to
# run as root (CI runs as root).
set -euo pipefail
TESSEL=$1
CONFIGS=$2
MPIRUN=$3
WORK=$(mktemp -d /tmp/tessel-mpi-XXXXXX)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
