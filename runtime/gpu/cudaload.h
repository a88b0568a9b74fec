/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA runtime and NCCL, loaded with dlopen at first use.
 *
 * libddprt never links libcudart or libnccl: a CPU-only process never loads
 * them, one build serves machines whose NCCL comes from a Python wheel, and
 * a process where PyTorch already loaded libnccl.so.2 gets that same copy.
 *
 * Which files (the first that loads):
 *   CUDA runtime: $DDPRT_CUDART_LIBRARY when set (only that file), else a
 *     libcudart already in the process, else libcudart.so.<headers' major>,
 *     .13, .12, .11.0, libcudart.so through the dynamic linker's search.
 *   NCCL: $DDPRT_NCCL_LIBRARY when set (only that file), else
 *     libnccl.so.2 (the copy already loaded when there is one).
 *
 * Use from a tool or test (not only the library): compile runtime/gpu/cudaload.c
 * into it with $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS) and config.h included
 * first, link -ldl. Call cudaload() once, then the functions through the
 * table: `api->cudaMalloc(&p, n)`, `api->ncclAllReduce(...)`. The table
 * holds, under their own names and C types from the headers:
 *   cudaGetDeviceCount cudaSetDevice cudaGetDevice cudaGetErrorString
 *   cudaGetLastError cudaRuntimeGetVersion cudaDriverGetVersion
 *   cudaDeviceGetPCIBusId cudaMalloc cudaFree cudaMallocAsync cudaFreeAsync
 *   cudaMemcpy cudaMemcpyAsync cudaHostAlloc cudaFreeHost
 *   cudaMemsetAsync cudaStreamCreateWithFlags cudaStreamDestroy
 *   cudaStreamQuery cudaStreamWaitEvent cudaEventCreateWithFlags
 *   cudaEventDestroy cudaEventRecord cudaEventQuery cudaEventElapsedTime
 *   ncclGetVersion ncclGetErrorString ncclGetLastError ncclGetUniqueId
 *   ncclCommInitRankConfig ncclCommGetAsyncError ncclCommAbort
 *   ncclCommFinalize ncclCommDestroy ncclGroupStart ncclGroupEnd
 *   ncclAllReduce ncclReduceScatter ncclAllGather ncclBroadcast
 *   ncclRedOpCreatePreMulSum ncclRedOpDestroy
 * and, where the headers declare it (NCCL 2.27 on, CUDALOAD_SHRINK), the
 * optional ncclCommShrink: NULL when the loaded library is older or lacks it.
 * Without the headers (configure found none) cudaload() only fails, saying
 * so, and the table is not declared. */
#ifndef DDPRT_CUDALOAD_H
#define DDPRT_CUDALOAD_H

#include "ddprt.h"

#if defined(HAVE_CUDA_H) && defined(HAVE_NCCL_H)
#define CUDALOAD_HEADERS 1
#include <cuda_runtime_api.h>
#include <nccl.h>

#define CUDALOAD_CUDART(X) \
    X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaGetErrorString) \
    X(cudaGetLastError) X(cudaRuntimeGetVersion) X(cudaDriverGetVersion) \
    X(cudaDeviceGetPCIBusId) X(cudaMalloc) X(cudaFree) X(cudaMallocAsync) X(cudaFreeAsync) \
    X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaHostAlloc) X(cudaFreeHost) \
    X(cudaMemsetAsync) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaStreamQuery) \
    X(cudaStreamWaitEvent) X(cudaEventCreateWithFlags) X(cudaEventDestroy) \
    X(cudaEventRecord) X(cudaEventQuery) X(cudaEventElapsedTime)
#define CUDALOAD_NCCL(X) \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) \
    X(ncclCommInitRankConfig) X(ncclCommGetAsyncError) X(ncclCommAbort) \
    X(ncclCommFinalize) X(ncclCommDestroy) X(ncclGroupStart) X(ncclGroupEnd) \
    X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) \
    X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy)
#define CUDALOAD_FIELD(f) __typeof__(f) *f;
#ifdef NCCL_SHRINK_ABORT
#define CUDALOAD_SHRINK 1
#endif

typedef struct {
    void *cudart, *nccl;           /* the dlopen handles (never closed) */
    char cudart_file[256], nccl_file[256]; /* what was loaded, for logs */
    int nccl_reused;               /* libnccl was already in the process */
    int cudart_reused;             /* DDPRT_CUDART_LIBRARY was already in it */
    int nccl_version;              /* ncclGetVersion: 22809 is 2.28.9 */
    CUDALOAD_CUDART(CUDALOAD_FIELD)
    CUDALOAD_NCCL(CUDALOAD_FIELD)
#ifdef CUDALOAD_SHRINK
    CUDALOAD_FIELD(ncclCommShrink)
#endif
} cuda_api_t;
#else
typedef struct cuda_api cuda_api_t;
#endif

/* Both libraries, loaded once per process (thread-safe; later calls return
 * the same table or the same error). NULL with err naming the library, the
 * file tried and what to do. */
const cuda_api_t *cudaload(drt_error_t *err);

#endif
