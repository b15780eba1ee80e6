#include "mesh/comm/nccl_api.h"

#include <string>

#include "common/error.h"
#include "common/shared_library.h"

namespace hdp::mesh::nccl {
namespace {

NcclApi load() {
  // The library this build was compiled against: its major version's soname, searched as the
  // dynamic loader does (LD_LIBRARY_PATH, the loader's cache), then in the directory it was found in.
  const std::string soname = "libnccl.so." + std::to_string(NCCL_MAJOR);
  try {
    const SharedLibrary lib = SharedLibrary::open("NCCL", {soname, std::string(HDP_NCCL_LIBRARY_DIR) + "/" + soname});
    NcclApi a{};
    a.get_version = lib.symbol<decltype(a.get_version)>("ncclGetVersion");
    a.get_unique_id = lib.symbol<decltype(a.get_unique_id)>("ncclGetUniqueId");
    a.comm_init_rank_config = lib.symbol<decltype(a.comm_init_rank_config)>("ncclCommInitRankConfig");
    a.comm_get_async_error = lib.symbol<decltype(a.comm_get_async_error)>("ncclCommGetAsyncError");
    a.comm_finalize = lib.symbol<decltype(a.comm_finalize)>("ncclCommFinalize");
    a.comm_destroy = lib.symbol<decltype(a.comm_destroy)>("ncclCommDestroy");
    a.comm_abort = lib.symbol<decltype(a.comm_abort)>("ncclCommAbort");
    a.get_error_string = lib.symbol<decltype(a.get_error_string)>("ncclGetErrorString");
    a.get_last_error = lib.symbol<decltype(a.get_last_error)>("ncclGetLastError");
    a.group_start = lib.symbol<decltype(a.group_start)>("ncclGroupStart");
    a.group_end = lib.symbol<decltype(a.group_end)>("ncclGroupEnd");
    a.send = lib.symbol<decltype(a.send)>("ncclSend");
    a.recv = lib.symbol<decltype(a.recv)>("ncclRecv");
    a.all_reduce = lib.symbol<decltype(a.all_reduce)>("ncclAllReduce");
    a.reduce = lib.symbol<decltype(a.reduce)>("ncclReduce");
    a.reduce_scatter = lib.symbol<decltype(a.reduce_scatter)>("ncclReduceScatter");
    a.all_gather = lib.symbol<decltype(a.all_gather)>("ncclAllGather");
    a.broadcast = lib.symbol<decltype(a.broadcast)>("ncclBroadcast");
    return a;
  } catch (const Error& e) {  // SharedLibrary's: a library that cannot be used is fatal
    throw FatalError(e.what());
  }
}

}  // namespace

const NcclApi& api() {
  static const NcclApi loaded = load();
  return loaded;
}

}  // namespace hdp::mesh::nccl
