// cuda/emu/nccl.h: the subset of NCCL that stoke calls, for cuda/emu. Included through
// cuda/nccl_compat.h instead of the real <nccl.h> when STOKE_CUDA_EMU is defined, so that stoke's
// NCCL glue (dist/cuda) and data-parallel training on cuda tensors run in tests without a GPU.
// Names, types, values and signatures are the real header's (NCCL 2.28), so the same code compiles
// against both; only the functions below are defined.
//
// Ranks are threads of one process on the emulator's devices (two: cudaSetDevice(0/1)); several
// ranks may share a device, which real NCCL refuses. Semantics (cuda/emu/nccl.cpp):
//
// - ncclGetUniqueId makes a fresh id every call. ncclCommInitRank(&comm, nranks, id, rank) blocks
//   until all nranks ranks of that id have joined, as NCCL does, and binds the comm to the calling
//   thread's current device (ncclCommCuDevice). It fails with ncclInvalidArgument for nranks < 1, a
//   rank outside [0, nranks), a rank joining twice, or an nranks that differs from the first
//   joiner's; the last two fail the whole id, so the ranks already waiting wake with the same
//   error instead of hanging (the id cannot be used again). It is not supported inside a group.
// - Collectives and send/recv are ordered on the given stream: they run in the calling thread
//   once the stream's earlier work has run, and work queued on the stream afterwards sees their
//   result. They never become queued stream work: a rendezvous with the other ranks inside the
//   deferred-streams scheduler (which runs queued work under one mutex) would deadlock them. So,
//   unlike NCCL, a call returns when its operation is done, not when it is enqueued.
// - Buffers must be device memory (cudaMalloc) of the comm's device, the whole extent the call
//   touches: ncclInvalidArgument otherwise, as is a null buffer with a non-zero count, an unknown
//   datatype (the fp8 types too) or op, a root or peer outside the clique, or an unknown stream.
// - Reductions give every rank bit-identical results: sum/prod/max/min/avg over the ranks in rank
//   order 0..N-1; f16 and bf16 accumulate in f32 and round once, f32 in f32, f64 in f64, integers
//   in their own type (wrapping); avg is sum / nranks in the accumulation type (integer division
//   for integers). In place (sendbuff == recvbuff, or the in-place offsets of reduce_scatter and
//   allgather) works; count 0 works. Ranks that call the same collective with a different count,
//   datatype, op or root all get ncclInvalidUsage (NCCL would hang or corrupt).
// - ncclGroupStart/End: calls between them are checked at once and collected per thread; they run
//   at the outermost ncclGroupEnd, which returns the first error among them. A group may hold
//   several comms (one thread driving several ranks) and any mix of calls: sends are posted first,
//   then the collectives and receives complete in call order, then the sends (an ncclSend waits
//   until the matching ncclRecv has copied its data), so a group of ncclSend to r+1 and ncclRecv
//   from r-1 on every rank (a ring step) completes, a send to self too. Sends are matched to
//   receives by (comm, peer) in call order; a count or datatype that differs fails both sides with
//   ncclInvalidUsage.
// - ncclCommAbort(comm): that rank leaves. Every call of the clique blocked in a collective, send
//   or recv that has not completed — its own rank's too, e.g. when a watchdog thread aborts — wakes
//   and returns ncclRemoteError, as does every later call on the other ranks' comms, and
//   ncclCommGetAsyncError on their comms returns ncclRemoteError from then on (ncclSuccess before).
//   ncclCommDestroy frees a comm after its work is done (here: at once, work being synchronous); a
//   rank waiting for a collective or message from a destroyed rank gets ncclInvalidUsage rather
//   than hanging. Calls on a destroyed or aborted comm return ncclInvalidUsage (its handle stays
//   valid memory until the process exits, so a racing watchdog reads no freed memory).
// - ncclGetLastError(comm) returns a readable message of the last error on that comm, or of the
//   calling thread's last error when comm is null; the text is valid until the thread's next call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle to communicator */
typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Error type */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

/* Reduction operation selector */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Data types */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, /* declared for source compatibility; not supported by the emulator */
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

#ifdef __cplusplus
}  // extern "C"
#endif
