// File: mesh/comm/nccl_api.h
//
// The NCCL functions hdp calls, from libnccl opened on first use (common/shared_library.h)
// instead of linked, so that an `hdp` process that never builds an NCCL communicator does not map
// and relocate NCCL at start. Included by nccl_backend_cuda.cc only (with nccl_api.cc, the files
// that include nccl.h); built when NCCL was found.
#pragma once

#include <nccl.h>

namespace hdp::mesh::nccl {

struct NcclApi {
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclCommFinalize) comm_finalize;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclGetErrorString) get_error_string;
  decltype(&ncclGetLastError) get_last_error;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclReduce) reduce;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
};

// Loaded once, thread-safe; FatalError naming the library (and what was tried) when it cannot be.
const NcclApi& api();

}  // namespace hdp::mesh::nccl
