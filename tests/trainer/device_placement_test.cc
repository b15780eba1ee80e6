// Where a worker trains (trainer/device_placement.h): the device asked, the devices seen and the
// worker's local rank give its device, its ordinal, how many workers share it and the default
// precision; a device it cannot have is refused with one line naming what was found.
#include "trainer/device_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/error.h"

namespace hdp::trainer {
namespace {

using ops::Device;
using ops::model::Precision;

VisibleDevices gpus(int n) { return {.cuda_built = true, .cuda = n, .cuda_visible_devices = std::nullopt}; }

std::string refusal(DeviceRequest request, const VisibleDevices& visible) {
  try {
    place_worker(request, std::nullopt, 0, 1, visible);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(placed)";
}

TEST(DevicePlacement, RequestsParseAndAnythingElseIsNamed) {
  EXPECT_EQ(parse_device_request("cuda"), DeviceRequest::kCuda);
  EXPECT_EQ(parse_device_request("cpu"), DeviceRequest::kCpu);
  EXPECT_EQ(parse_device_request("auto"), DeviceRequest::kAuto);
  for (const char* bad : {"gpu", "CUDA", "", "cuda:0"}) {
    try {
      parse_device_request(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  for (DeviceRequest r : {DeviceRequest::kAuto, DeviceRequest::kCpu, DeviceRequest::kCuda}) {
    EXPECT_EQ(parse_device_request(device_request_name(r)), r);
  }
}

TEST(DevicePlacement, CpuIsTheCpuInF32WhateverTheNodeHas) {
  for (int n : {0, 1, 8}) {
    const DevicePlacement p = place_worker(DeviceRequest::kCpu, std::nullopt, 1, 2, gpus(n));
    EXPECT_EQ(p.device, Device::kCpu);
    EXPECT_EQ(p.ordinal, -1);
    EXPECT_EQ(p.sharing, 1);
    EXPECT_EQ(p.precision, Precision::kFull);
  }
  EXPECT_EQ(place_worker(DeviceRequest::kCpu, Precision::kBF16, 0, 1, gpus(0)).precision, Precision::kBF16)
      << "--dtype bf16 on the CPU is the user's to ask";
}

TEST(DevicePlacement, OneWorkerPerGpuBindsEachToItsLocalRanksDeviceInBf16) {
  for (int local = 0; local < 8; ++local) {
    const DevicePlacement p = place_worker(DeviceRequest::kCuda, std::nullopt, local, 8, gpus(8));
    EXPECT_EQ(p.device, Device::kCuda);
    EXPECT_EQ(p.ordinal, local);
    EXPECT_EQ(p.sharing, 1);
    EXPECT_EQ(p.precision, Precision::kBF16);
    EXPECT_EQ(p.describe(), "cuda:" + std::to_string(local) + ", bf16 (local rank " + std::to_string(local) + " of 8)");
  }
  EXPECT_EQ(place_worker(DeviceRequest::kCuda, Precision::kFull, 0, 1, gpus(1)).precision, Precision::kFull)
      << "--dtype f32 wins over the GPU's default";
}

TEST(DevicePlacement, MoreWorkersThanGpusShareThemRoundRobinAndSaySo) {
  // 5 workers on 2 GPUs: ranks 0, 2, 4 on cuda:0 (3 share it), ranks 1, 3 on cuda:1 (2 share it).
  const int expected_ordinal[] = {0, 1, 0, 1, 0};
  const int expected_sharing[] = {3, 2, 3, 2, 3};
  for (int local = 0; local < 5; ++local) {
    const DevicePlacement p = place_worker(DeviceRequest::kCuda, std::nullopt, local, 5, gpus(2));
    EXPECT_EQ(p.ordinal, expected_ordinal[local]) << local;
    EXPECT_EQ(p.sharing, expected_sharing[local]) << local;
    EXPECT_NE(p.describe().find("sharing the device with " + std::to_string(p.sharing - 1) + " other worker(s)"),
              std::string::npos)
        << p.describe();
  }
}

TEST(DevicePlacement, SharingCountsExactlyTheLocalRanksOnTheSameDevice) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int devices = 1 + static_cast<int>(random() % 8), nproc = 1 + static_cast<int>(random() % 20);
    std::vector<int> on(static_cast<std::size_t>(devices), 0);
    std::vector<DevicePlacement> placed;
    for (int local = 0; local < nproc; ++local) {
      placed.push_back(place_worker(DeviceRequest::kAuto, std::nullopt, local, nproc, gpus(devices)));
      ASSERT_GE(placed.back().ordinal, 0);
      ASSERT_LT(placed.back().ordinal, devices);
      ++on[static_cast<std::size_t>(placed.back().ordinal)];
    }
    for (const DevicePlacement& p : placed) EXPECT_EQ(p.sharing, on[static_cast<std::size_t>(p.ordinal)]);
    // Balanced: no device holds two workers more than another.
    if (nproc >= devices) {
      EXPECT_LE(*std::max_element(on.begin(), on.end()) - *std::min_element(on.begin(), on.end()), 1);
    }
  }
}

TEST(DevicePlacement, AutoIsCudaWhenADeviceIsVisibleElseTheCpuWithTheReason) {
  EXPECT_EQ(place_worker(DeviceRequest::kAuto, std::nullopt, 0, 1, gpus(1)).device, Device::kCuda);
  const DevicePlacement cpu = place_worker(DeviceRequest::kAuto, std::nullopt, 0, 1, gpus(0));
  EXPECT_EQ(cpu.device, Device::kCpu);
  EXPECT_EQ(cpu.precision, Precision::kFull);
  EXPECT_EQ(cpu.describe(), "cpu, f32 (--device auto: no CUDA device visible to this worker (the CUDA runtime reports none))");
}

TEST(DevicePlacement, CudaWithoutADeviceIsRefusedNamingWhatWasFound) {
  EXPECT_EQ(refusal(DeviceRequest::kCuda, {.cuda_built = false, .cuda = 0, .cuda_visible_devices = std::nullopt}),
            "--device cuda: this build of hdp has no CUDA");
  EXPECT_EQ(refusal(DeviceRequest::kCuda, {.cuda_built = true, .cuda = 0, .cuda_visible_devices = ""}),
            "--device cuda: no CUDA device visible to this worker (CUDA_VISIBLE_DEVICES='')");
  EXPECT_EQ(refusal(DeviceRequest::kCuda, {.cuda_built = true, .cuda = 0, .cuda_visible_devices = "7"}),
            "--device cuda: no CUDA device visible to this worker (CUDA_VISIBLE_DEVICES='7')");
  EXPECT_EQ(refusal(DeviceRequest::kCuda, gpus(0)),
            "--device cuda: no CUDA device visible to this worker (the CUDA runtime reports none)");
}

TEST(DevicePlacement, ALocalRankOutsideItsNodeIsRefused) {
  EXPECT_THROW(place_worker(DeviceRequest::kCpu, std::nullopt, 2, 2, gpus(0)), InvalidArgument);
  EXPECT_THROW(place_worker(DeviceRequest::kCpu, std::nullopt, -1, 2, gpus(0)), InvalidArgument);
  EXPECT_THROW(place_worker(DeviceRequest::kCuda, std::nullopt, 0, 0, gpus(1)), InvalidArgument);
}

TEST(DevicePlacement, ThisProcessSeesWhatItsBuildAndRuntimeSay) {
  const VisibleDevices v = VisibleDevices::probe();
  EXPECT_GE(v.cuda, 0);
  if (!v.cuda_built) {
    EXPECT_EQ(v.cuda, 0);
  }
}

}  // namespace
}  // namespace hdp::trainer
