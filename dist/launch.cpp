#include "dist/launch.h"

#include <algorithm>
#include <cstdlib>

namespace stoke::dist {

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v && *v) return std::max(std::atoi(v), 0);
  }
  return 0;
}

}  // namespace stoke::dist
