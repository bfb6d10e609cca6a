# A job that must fail: runs one hidden case of test_mpi under mpirun and passes when the job exits
# non-zero within LIMIT seconds, printing what the case promises. Run with cmake -P:
#   cmake -DMPIEXEC=mpirun -DNP=2 -DPROGRAM=test_mpi -DCASE=watchdog -DLIMIT=15 -P run_abort_case.cmake
# ctest's WILL_FAIL or PASS_REGULAR_EXPRESSION alone would pass a job that hung until ctest's own
# timeout killed it, or one that printed the message but exited 0; this checks all three.
cmake_minimum_required(VERSION 3.20)
foreach(v MPIEXEC NP PROGRAM CASE LIMIT)
  if(NOT ${v})
    message(FATAL_ERROR "run_abort_case: pass -D${v}=...")
  endif()
endforeach()
if(CASE STREQUAL "watchdog")  # rank 1 stalls; the others' watchdog (1 s) aborts the job
  set(expect "stoke::dist: allreduce #0 on rank [02] has waited 1 s \\(timeout\\); rank 1 did not arrive \\(no answer within 1 s[^)]*\\); aborting the job")
elseif(CASE STREQUAL "killed")  # rank 1 dies by SIGKILL; mpirun ends the others
  set(expect "")
else()
  message(FATAL_ERROR "run_abort_case: unknown CASE '${CASE}'")
endif()
string(TIMESTAMP t0 "%s" UTC)
# A backstop past LIMIT: a job still running then has hung, and is reported as such below.
math(EXPR backstop "${LIMIT} + 30")
execute_process(COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP} ${PROGRAM}
                        "[${CASE}]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${backstop})
string(TIMESTAMP t1 "%s" UTC)
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0; it was expected to fail:\n${all}")
endif()
if(elapsed GREATER LIMIT)
  message(FATAL_ERROR "the job took ${elapsed} s (limit ${LIMIT} s; exit: ${rc}):\n${all}")
endif()
if(expect AND NOT all MATCHES "${expect}")
  message(FATAL_ERROR "the output does not match '${expect}' (exit ${rc}):\n${all}")
endif()
message(STATUS "failed as expected in ${elapsed} s (exit ${rc})")
