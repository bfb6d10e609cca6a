// How the program was started: by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx) or not.
#pragma once

namespace stoke::dist {

// The number of processes the launcher started this job with (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// PMIX_SIZE or MPI_LOCALNRANKS, the first one set), or 0 when no launcher started it. Read from
// the environment, so it works before MPI is initialized and in builds without MPI.
int launcher_world_size();

}  // namespace stoke::dist
