// The MPI tests' main, run under mpirun: one communicator over MPI_COMM_WORLD for the whole run
// (construction is collective, so it is made here, on every rank, before any case). Rank 0 reports
// in full; the other ranks print only failures and a summary line (compact reporter), so that a
// failure on any rank is seen and mpirun's exit status is non-zero.
#include "support/catch_session.h"

#include "mpi_util.h"

namespace stoke::dist::test {
namespace {
MpiCommunicator* g_world = nullptr;
}  // namespace

MpiCommunicator& world() {
  return *g_world;
}

}  // namespace stoke::dist::test

int main(int argc, char** argv) {
  using namespace stoke::dist;
  // A short watchdog: a test that deadlocks ends the job in a minute, naming the call.
  MpiCommunicator comm(MpiOptions{.timeout = std::chrono::seconds(60)});
  stoke::dist::test::g_world = &comm;
  const int failed = stoke::test::run_catch(argc, argv, comm.rank() != 0 ? "compact" : nullptr);
  stoke::dist::test::g_world = nullptr;
  return failed;
}
