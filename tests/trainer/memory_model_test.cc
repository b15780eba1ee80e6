// The memory model (trainer/memory_model.h): its activation count against the bytes a real forward
// leaves allocated and the peak a real forward and backward reach, parameter counts of published
// shapes, the breakdown's arithmetic, the refusal with figures, the largest capacity that fits,
// and the offloading schedule against ByteScale Eq. 3's bound.
#include "trainer/memory_model.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "hdp/config.h"
#include "mesh/comm/communicator_factory.h"
#include "mesh/plan/plan.h"
#include "mesh/step/distributed_step.h"
#include "ops/model/llama_model.h"
#include "ops/model/llama_params.h"
#include "ops/model/offload_schedule.h"
#include "trainer/trainer_config.h"
#include "trainer/training_setup.h"

namespace hdp::trainer {
namespace {

using ops::Device;
using ops::model::LlamaConfig;
using ops::model::Precision;

constexpr std::int64_t kMiB = std::int64_t{1} << 20, kGiB = std::int64_t{1} << 30;
// A sanitizer build (HDP_SANITIZE names them) has its own allocator and shadow memory: the heap's
// and the resident set's figures below are not the model's there.
constexpr bool kSanitized = sizeof(HDP_SANITIZE) > 1;

LlamaConfig llama_7b() {
  return {.vocab_size = 32000, .d_model = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32, .ffn_dim = 11008};
}

// Small, with GQA and an FFN width unlike d, and every kept tensor of C = 512 tokens far above
// the allocator's per-allocation overhead (see ForwardKeepsWhatTheCountSays).
LlamaConfig small_model() {
  return {.vocab_size = 256, .d_model = 128, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 384};
}

// Bytes the C library's allocator has handed out and not taken back: every arena's chunks in use
// and every chunk mapped on its own.
std::int64_t live_heap_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<std::int64_t>(info.uordblks + info.hblkhd);
}

// Documents of 128 tokens packed to `tokens` tokens.
ops::model::Batch batch_of(std::int64_t tokens) {
  std::vector<std::vector<int32_t>> docs;
  for (std::int64_t at = 0; at < tokens; at += 128) {
    std::vector<int32_t> doc;
    for (std::int64_t i = at; i < std::min(tokens, at + 128); ++i) doc.push_back(static_cast<int32_t>((i * 37) % 251));
    docs.push_back(doc);
  }
  return ops::model::pack_documents(docs);
}

std::string refusal(const MemoryBreakdown& need, std::int64_t free_bytes, MemoryMargin margin = MemoryMargin::none()) {
  try {
    check_fits(need, free_bytes, "free on " + need.device_name(), margin);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(fits)";
}

TEST(MemoryModel, ParameterCountsOfPublishedShapes) {
  EXPECT_EQ(ops::model::param_count(llama_7b()), 6'738'415'616);  // LLaMA-7B, untied lm_head
  LlamaConfig l70 = {.vocab_size = 32000, .d_model = 8192, .n_layers = 80, .n_heads = 64, .n_kv_heads = 8, .ffn_dim = 28672};
  EXPECT_EQ(ops::model::param_count(l70), 68'976'648'192);  // Llama-2-70B (GQA, 8 KV heads)
}

// The per-token figures written out for LLaMA-7B (d = q = kv = 4096, 32 heads, ffn 11008):
// f32:  4 x (4d + 2q + 2kv + heads + 3 ffn + 2) = 4 x 65,826
// bf16: 12d + 8q + 4kv + 4 heads + 10 ffn + 8 (f32 x, x_mid, rstd, attention out and lse, gate,
//       up; bf16 q, k, v, in1, in2, att_in, h_in)
TEST(MemoryModel, LayerActivationCountByHand) {
  EXPECT_EQ(layer_activation_bytes(llama_7b(), Precision::kFull).per_token, 263'304);
  EXPECT_EQ(layer_activation_bytes(llama_7b(), Precision::kBF16).per_token, 208'520);
  EXPECT_EQ(layer_activation_bytes(llama_7b(), Precision::kBF16).fixed, 0);
  // Head: x_final, norm output, rstd, logits, lse (f32), ids (16 bytes); bf16 adds in_final.
  EXPECT_EQ(head_activation_bytes(llama_7b(), Precision::kFull), 4 * (2 * 4096 + 1 + 32000 + 1) + 16);
  EXPECT_EQ(head_activation_bytes(llama_7b(), Precision::kBF16), 4 * (2 * 4096 + 1 + 32000 + 1) + 16 + 2 * 4096);
}

TEST(MemoryModel, BreakdownArithmeticAndPlaces) {
  const std::int64_t n = 6'738'415'616, shard = (n + 63) / 64;
  MemoryInputs in{.model = llama_7b(), .precision = Precision::kBF16, .device = Device::kCuda, .device_ordinal = 3,
                  .world_size = 64, .capacity = 8192, .buddy_copies = 1, .keep_previous = true, .ring = true,
                  .threads = 1, .copies_on_host = true};
  const MemoryBreakdown b = estimate_memory(in);
  EXPECT_EQ(b.parameters, 4 * n);
  EXPECT_EQ(b.compute_copy, 2 * n);
  EXPECT_EQ(b.gradients, 4 * n);
  EXPECT_EQ(b.optimizer_shard, 3 * 4 * shard);
  EXPECT_EQ(b.wire_buffer, 2 * n);
  EXPECT_EQ(b.activations, 32 * 8192 * std::int64_t{208'520});
  EXPECT_EQ(b.loss_head, 8192 * head_activation_bytes(llama_7b(), Precision::kBF16));
  EXPECT_EQ(b.ring_blocks, 8192 * 4096 * std::int64_t{2 * 2 + 4 * 4});
  EXPECT_EQ(b.buddy_copies, 4 * 4 * shard);
  EXPECT_EQ(b.previous_versions, 2 * 3 * 4 * shard);
  EXPECT_GT(b.workspace, 8192 * 4 * std::int64_t{3 * 11008});  // at least one layer's dh, dgate, dup
  EXPECT_EQ(b.device_bytes(), b.parameters + b.compute_copy + b.gradients + b.optimizer_shard + b.wire_buffer +
                                  b.activations + b.loss_head + b.workspace + b.ring_blocks);
  EXPECT_EQ(b.host_bytes(), b.buddy_copies + b.previous_versions) << "copies_on_host: pinned host memory";
  MemoryInputs on_device = in;
  on_device.copies_on_host = false;  // where ZeroOptimizer keeps them today
  EXPECT_EQ(estimate_memory(on_device).host_bytes(), 0);
  EXPECT_EQ(estimate_memory(on_device).device_bytes(), b.device_bytes() + b.host_bytes());
  const std::string line = b.describe();
  EXPECT_NE(line.find("on cuda:3"), std::string::npos) << line;
  EXPECT_NE(line.find("pinned host (previous versions"), std::string::npos) << line;
  EXPECT_NE(line.find("activations of 8192 tokens 50.9 GiB"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);

  in.device = Device::kCpu;  // everything is the host's, counted as the device's
  const MemoryBreakdown cpu = estimate_memory(in);
  EXPECT_EQ(cpu.host_bytes(), 0);
  EXPECT_EQ(cpu.device_bytes(), b.device_bytes() + b.host_bytes() + (cpu.workspace - b.workspace));
  EXPECT_GT(cpu.workspace, b.workspace) << "the CPU widens bf16 operands to f32";
  EXPECT_EQ(cpu.device_name(), "cpu");

  in.precision = Precision::kFull;
  const MemoryBreakdown f32 = estimate_memory(in);
  EXPECT_EQ(f32.compute_copy, 0);
  EXPECT_EQ(f32.wire_buffer, 0);
  EXPECT_EQ(f32.activations, 32 * 8192 * std::int64_t{263'304});
}

TEST(MemoryModel, GarbageInputsAreRefused) {
  MemoryInputs in{.model = small_model()};
  const std::vector<std::function<void(MemoryInputs&)>> bads = {
      [](MemoryInputs& i) { i.world_size = 0; }, [](MemoryInputs& i) { i.capacity = 0; },
      [](MemoryInputs& i) { i.buddy_copies = 1; }, [](MemoryInputs& i) { i.model.n_heads = 5; }};
  for (const auto& bad : bads) {
    MemoryInputs copy = in;
    bad(copy);
    EXPECT_THROW(estimate_memory(copy), InvalidArgument);
  }
}

// A fresh model, initialised, its gradients zero, after a step of another one of the same shape:
// threads, their arenas and the kernels' scratch exist before what a test then measures.
ops::model::LlamaModel measured_model(const LlamaConfig& config, Precision precision, std::int64_t tokens) {
  {
    ops::model::LlamaModel warm(config, ops::DType::kF32, Device::kCpu, precision);
    warm.init(1);
    warm.forward(batch_of(tokens));
    warm.backward(1.0);
  }
  ops::model::LlamaModel model(config, ops::DType::kF32, Device::kCpu, precision);
  model.init(1);
  model.zero_grad();
  return model;
}

// What a forward of C tokens leaves allocated is what the count says. Measured as the heap's
// live bytes (mallinfo2: chunks in use in every arena plus chunks mapped alone) before and after
// the forward of a fresh model, the batch made in between. Tolerance: the count may not exceed
// what was allocated (every byte it counts must be a real allocation), and the allocator adds at
// most about 4 KiB to each of the ~60 tensors kept here (a mapped chunk's header page; an arena
// chunk's 16 bytes and the 64-byte alignment) against 11-13 MiB kept: at most 2% above the count
// (measured: 0.1%).
void expect_forward_keeps_the_count(Precision precision) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator";
  const LlamaConfig config = small_model();
  constexpr std::int64_t kTokens = 512;
  ops::model::LlamaModel model = measured_model(config, precision, kTokens);
  const std::int64_t before = live_heap_bytes();
  const ops::model::Batch batch = batch_of(kTokens);
  model.forward(batch);
  const std::int64_t kept = live_heap_bytes() - before;
  const MemoryBreakdown b = estimate_memory({.model = config, .precision = precision, .capacity = kTokens});
  const std::int64_t counted = b.activations + b.loss_head;
  ::testing::Test::RecordProperty(ops::model::precision_name(precision) + "_kept_bytes", std::to_string(kept));
  ::testing::Test::RecordProperty(ops::model::precision_name(precision) + "_counted_bytes", std::to_string(counted));
  EXPECT_LE(counted, kept) << ops::model::precision_name(precision) << ": the count exceeds what the forward keeps";
  EXPECT_LE(static_cast<double>(kept), 1.02 * static_cast<double>(counted))
      << ops::model::precision_name(precision) << ": the forward keeps " << kept << " bytes, the count says " << counted;
}

// Offloading (LlamaModel::offload_next): the layers the schedule names move to host memory after
// their forward and come back for their backward. The loss and every gradient are the same bits as
// a resident run (a copy changes no value), the bytes moved are exactly the count's for those
// layers (what offloading saves is what the memory model says), and the schedule applies to one
// forward only; the most activation bytes resident at once falls to the schedule's peak.
void expect_offloading_changes_nothing_but_where(Precision precision) {
  const LlamaConfig config = small_model();  // 3 layers
  constexpr std::int64_t kTokens = 256;
  const ops::model::Batch batch = batch_of(kTokens);
  std::int64_t peak = 0;
  auto step = [&](const OffloadSchedule* schedule, std::int64_t* moved) {
    ops::model::LlamaModel model(config, ops::DType::kF32, Device::kCpu, precision);
    model.init(3);
    model.zero_grad();
    if (schedule) model.offload_next(*schedule);
    const double loss = model.forward(batch);
    *moved = model.offloaded_bytes();
    model.backward(1.0 / kTokens);
    peak = model.peak_resident_activation_bytes();
    std::vector<float> out = model.grads().to_vector<float>();
    out.push_back(static_cast<float>(loss));
    model.forward(batch);  // the schedule was for one forward
    EXPECT_EQ(model.offloaded_bytes(), 0);
    return out;
  };
  std::int64_t none = -1, moved = -1;
  const std::vector<float> resident = step(nullptr, &none);
  const std::int64_t resident_peak = peak;
  const OffloadSchedule schedule = offload_schedule(1.0, config.n_layers);  // all but the last two: layer 0
  ASSERT_EQ(schedule.offloaded(), 1);
  const std::vector<float> offloaded = step(&schedule, &moved);
  EXPECT_EQ(none, 0);
  EXPECT_TRUE(resident == offloaded) << "offloading changed a gradient or the loss";
  const std::int64_t layer = layer_activation_bytes(config, precision).per_token * kTokens;
  EXPECT_EQ(moved, layer) << "the bytes one offloaded layer moved against the memory model's count";
  // What it saves: resident, all three layers are on the device at the backward's start; with
  // layer 0 offloaded (and each layer released after its backward) at most two are, Eq. 3's
  // (2 + (1 - r)(l - 2)) layers at r = 1, which the schedule's own peak says too.
  EXPECT_EQ(resident_peak, 3 * layer);
  EXPECT_EQ(peak, 2 * layer);
  EXPECT_EQ(peak, peak_resident_activation_bytes(schedule, layer));
  ops::model::LlamaModel model(config, ops::DType::kF32, Device::kCpu, precision);
  EXPECT_THROW(model.offload_next(offload_schedule(1.0, config.n_layers + 1)), InvalidArgument);
}

TEST(MemoryModel, OffloadingMovesTheCountedBytesAndChangesNoBitF32) {
  expect_offloading_changes_nothing_but_where(Precision::kFull);
}
TEST(MemoryModel, OffloadingMovesTheCountedBytesAndChangesNoBitBf16) {
  expect_offloading_changes_nothing_but_where(Precision::kBF16);
}

TEST(MemoryModel, ForwardKeepsWhatTheCountSaysF32) { expect_forward_keeps_the_count(Precision::kFull); }
TEST(MemoryModel, ForwardKeepsWhatTheCountSaysBf16) { expect_forward_keeps_the_count(Precision::kBF16); }

std::int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// The peak of a forward and backward stays within the model's activations, loss head and
// backward workspace, and the workspace is not a gross overcount. Measured as the growth of the
// process's peak resident set (VmHWM, reset through /proc/self/clear_refs) over the resident set
// before the step, with every allocation of 64 KiB or more mapped alone so that a free gives its
// pages back at once. Tolerances: the backward's own growth (peak over the resident set after the
// forward) must lie within the workspace, which sums temporaries only partly alive together (an
// upper bound; measured 77-89% of it alone, 68% for bf16 after the f32 case in the same process,
// whose freed memory the step partly reuses: at least 60% asked). The whole peak may exceed the model by
// what the resident set adds to the heap's bytes (page rounding, arena pages freed but kept: 3%
// for the forward here), 5% allowed, and must reach 80% of it (measured 92-98%).
void expect_step_peak_within_the_model(Precision precision) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator";
  if (!std::ofstream("/proc/self/clear_refs").good()) GTEST_SKIP() << "/proc/self/clear_refs is not writable";
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  constexpr int kThreads = 2;  // each thread's attention tiles count: the same figure on any machine
  omp_set_num_threads(kThreads);
  const LlamaConfig config = small_model();
  constexpr std::int64_t kTokens = 512;
  ops::model::LlamaModel model = measured_model(config, precision, kTokens);
  const ops::model::Batch batch = batch_of(kTokens);
  malloc_trim(0);  // free arena pages go back to the system: reusing them shows in the resident set
  std::ofstream("/proc/self/clear_refs") << "5";
  const std::int64_t before = status_kib("VmRSS");
  model.forward(batch);
  const std::int64_t after_forward = status_kib("VmRSS");
  model.backward(1.0);
  const std::int64_t high = status_kib("VmHWM");
  const std::int64_t peak = (high - before) * 1024, backward = (high - after_forward) * 1024;
  const MemoryBreakdown b =
      estimate_memory({.model = config, .precision = precision, .capacity = kTokens, .threads = kThreads});
  const std::int64_t modelled = b.activations + b.loss_head + b.workspace - 16 * kTokens;  // the batch came before
  const std::string name = ops::model::precision_name(precision);
  ::testing::Test::RecordProperty(name + "_peak_bytes", std::to_string(peak));
  ::testing::Test::RecordProperty(name + "_modelled_bytes", std::to_string(modelled));
  ::testing::Test::RecordProperty(name + "_backward_bytes", std::to_string(backward));
  ::testing::Test::RecordProperty(name + "_workspace_bytes", std::to_string(b.workspace));
  EXPECT_LE(backward, b.workspace) << name << ": " << b.describe();
  EXPECT_GE(static_cast<double>(backward), 0.6 * static_cast<double>(b.workspace)) << name << ": " << b.describe();
  EXPECT_LE(static_cast<double>(peak), 1.05 * static_cast<double>(modelled)) << name << ": " << b.describe();
  EXPECT_GE(static_cast<double>(peak), 0.8 * static_cast<double>(modelled)) << name << ": " << b.describe();
}

TEST(MemoryModel, StepPeakWithinTheModelF32) { expect_step_peak_within_the_model(Precision::kFull); }
TEST(MemoryModel, StepPeakWithinTheModelBf16) { expect_step_peak_within_the_model(Precision::kBF16); }

TEST(MemoryModel, CheckFitsRefusesWithTheFiguresAndAcceptsWhatFits) {
  const MemoryBreakdown need = estimate_memory({.model = llama_7b(), .precision = Precision::kFull,
                                                .device = Device::kCuda, .device_ordinal = 0, .world_size = 8,
                                                .capacity = 8192});
  EXPECT_EQ(refusal(need, need.device_bytes()), "(fits)");
  EXPECT_EQ(refusal(need, 4 * need.device_bytes()), "(fits)");
  const std::string why = refusal(need, need.device_bytes() - 1);
  EXPECT_NE(why.find("needs " + format_bytes(need.device_bytes()) + " per rank on cuda:0 at C = 8192 on 8 rank(s)"),
            std::string::npos) << why;
  // The four largest, largest first: activations, parameters and gradients (equal), workspace.
  EXPECT_NE(why.find("(activations of 8192 tokens " + format_bytes(need.activations) + ", parameters " +
                     format_bytes(need.parameters) + ", gradients "),
            std::string::npos) << why;
  EXPECT_NE(why.find("above the limit of "), std::string::npos) << why;
  EXPECT_NE(why.find("(free on cuda:0)"), std::string::npos) << why;
  EXPECT_NE(why.find("use more ranks, a smaller --capacity, or --dtype bf16"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);

  // With a margin the same free bytes no longer hold it, and the margin is named.
  const std::string margin = refusal(need, need.device_bytes(), MemoryMargin::gpu());
  EXPECT_NE(margin.find("less a margin of"), std::string::npos) << margin;
  // bf16 is already what it runs: not suggested.
  const MemoryBreakdown bf16 = estimate_memory({.model = llama_7b(), .precision = Precision::kBF16, .world_size = 8});
  EXPECT_EQ(refusal(bf16, kMiB).find("--dtype"), std::string::npos);
}

TEST(MemoryModel, TheGpuMarginIsEightPercentAndOneGiB) {
  const MemoryMargin gpu = MemoryMargin::gpu();
  EXPECT_EQ(gpu.usable(100 * kGiB), 100 * kGiB - 8 * kGiB - kGiB);
  EXPECT_EQ(gpu.usable(kGiB / 2), 0);
  EXPECT_EQ(MemoryMargin::none().usable(12345), 12345);
}

// TinyLlama-1.1B's shape (GQA, 4 KV heads): 1,100,048,384 parameters, 12 bytes each in bf16
// mixed precision (f32 master and gradients, bf16 compute copy and wire buffer), 12.3 GiB.
LlamaConfig tiny_llama() {
  return {.vocab_size = 32000, .d_model = 2048, .n_layers = 22, .n_heads = 32, .n_kv_heads = 4, .ffn_dim = 5632};
}

TEST(MemoryModel, MaxCapacityIsTheLargestThatFitsAndGrowsWithTheMemory) {
  ASSERT_EQ(ops::model::param_count(tiny_llama()), 1'100'048'384);
  MemoryInputs in{.model = tiny_llama(), .precision = Precision::kBF16, .device = Device::kCuda, .device_ordinal = 0,
                  .world_size = 64, .buddy_copies = 1, .keep_previous = true, .ring = true};
  const MemoryMargin margin = MemoryMargin::gpu();
  std::int64_t last = 0;
  for (std::int64_t free = 16 * kGiB; free <= 141 * kGiB; free += 5 * kGiB) {
    for (std::int64_t granule : {std::int64_t{1}, std::int64_t{128}}) {
      const std::int64_t c = max_capacity(in, free, margin, granule);
      ASSERT_GT(c, 0) << format_bytes(free);
      EXPECT_EQ(c % granule, 0);
      in.capacity = c;
      EXPECT_LE(estimate_memory(in).device_bytes(), margin.usable(free)) << "C = " << c;
      in.capacity = c + granule;
      EXPECT_GT(estimate_memory(in).device_bytes(), margin.usable(free)) << "C = " << c + granule << " fits too";
      if (granule == 1) {
        EXPECT_GT(c, last) << format_bytes(free);
        last = c;
      }
    }
  }
  // 79.2 GiB free (an 80 GB GPU): 71.9 GiB usable, 12.3 GiB of it the parameters' buffers, about
  // 2.5 MB per token (22 layers of 98,440 bytes, the loss head and workspace): some 25,000 tokens.
  const std::int64_t h100 = max_capacity(in, 79 * kGiB + kGiB / 5, margin);
  RecordProperty("h100_capacity", std::to_string(h100));
  EXPECT_GT(h100, 20'000);
  EXPECT_LT(h100, 30'000);
  // Below the parameters' 12 bytes each (and the margin) nothing fits.
  EXPECT_EQ(max_capacity(in, 13 * kGiB, margin), 0);
  EXPECT_THROW(max_capacity(in, 80 * kGiB, margin, 0), InvalidArgument);
  // A 7B model keeps 12 bytes of its 6.7e9 parameters on every rank: 75 GiB, nothing left on 80 GB.
  in.model = llama_7b();
  EXPECT_EQ(max_capacity(in, 79 * kGiB + kGiB / 5, margin), 0);
}

TEST(MemoryModel, OffloadModelCarriesTheLayerCount) {
  const mesh::OffloadModel o = offload_model(llama_7b(), Precision::kBF16, 25.0, 20.0);
  EXPECT_EQ(o.layers, 32);
  EXPECT_EQ(o.act_bytes_per_token, 208'520.0);
  EXPECT_EQ(o.act_bytes_fixed, 0.0);
  EXPECT_EQ(o.d2h_gbps, 25.0);
  EXPECT_EQ(o.h2d_gbps, 20.0);
}

TEST(MemoryModel, ScheduleOffloadsTheFirstLayersAndKeepsTheLastTwo) {
  const OffloadSchedule none = offload_schedule(0.0, 32);
  EXPECT_EQ(none.offloaded(), 0);
  for (const LayerOffload& l : none.layers) EXPECT_EQ(l.copy_back_during, -1);
  const OffloadSchedule all = offload_schedule(1.0, 32);
  EXPECT_EQ(all.offloaded(), 30);
  EXPECT_FALSE(all.layers[30].offloaded);
  EXPECT_FALSE(all.layers[31].offloaded);
  for (int i = 0; i < 30; ++i) {
    EXPECT_TRUE(all.layers[static_cast<std::size_t>(i)].offloaded);
    EXPECT_EQ(all.layers[static_cast<std::size_t>(i)].copy_out_during, i + 1);
    EXPECT_EQ(all.layers[static_cast<std::size_t>(i)].copy_back_during, i + 1);
  }
  EXPECT_EQ(offload_schedule(0.5, 10).offloaded(), 4);
  EXPECT_EQ(offload_schedule(0.3, 12).offloaded(), 3) << "0.3 x 10 is 3, not 4 after rounding error";
  EXPECT_EQ(offload_schedule(0.31, 12).offloaded(), 4) << "ceil: never more resident than Eq. 3 allows";
  EXPECT_EQ(offload_schedule(1.0, 2).offloaded(), 0);
  EXPECT_EQ(offload_schedule(1.0, 1).offloaded(), 0);
}

// Eq. 3: with ratio r a rank holds (2 + (1 - r)(l - 2)) Act(x) of activations at most; the schedule
// meets it exactly when r (l - 2) is whole, and never offloads a layer's worth more than it needs.
TEST(MemoryModel, SchedulePeakObeysEquationThree) {
  constexpr std::int64_t act = 1'000'003;  // Act(x) of one layer, odd on purpose
  for (int l : {1, 2, 3, 4, 8, 32, 80}) {
    EXPECT_EQ(peak_resident_activation_bytes(offload_schedule(0.0, l), act), l * act) << "l = " << l;
    for (double r : {0.0, 0.1, 0.25, 1.0 / 3, 0.5, 0.7, 0.9, 1.0}) {
      const std::int64_t peak = peak_resident_activation_bytes(offload_schedule(r, l), act);
      const double bound = (2 + (1 - r) * std::max(0, l - 2)) * static_cast<double>(act);
      const double tight = std::min<double>(l, bound / static_cast<double>(act));
      EXPECT_LE(static_cast<double>(peak), std::min(bound, l * static_cast<double>(act)) + 1e-6) << "l = " << l << ", r = " << r;
      EXPECT_GT(static_cast<double>(peak), (tight - 1) * static_cast<double>(act)) << "l = " << l << ", r = " << r;
      if (std::abs(r * (l - 2) - std::round(r * (l - 2))) < 1e-9 && l >= 2) {
        EXPECT_NEAR(static_cast<double>(peak), bound, 1e-9 * bound) << "l = " << l << ", r = " << r;
      }
    }
  }
  EXPECT_EQ(peak_resident_activation_bytes(offload_schedule(1.0, 32), act), 2 * act);
}

TEST(MemoryModel, ScheduleRefusesGarbage) {
  for (double r : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(offload_schedule(r, 8), InvalidArgument) << r;
  }
  EXPECT_THROW(offload_schedule(0.5, 0), InvalidArgument);
  EXPECT_THROW(offload_schedule(0.5, -3), InvalidArgument);
}

// --max-rank-memory-mb goes through the model: the refusal names the flag and the figures.
TEST(MemoryModel, MaxRankMemoryFlagIsTheLimitOnTheCpu) {
  TrainerConfig config;
  config.model = small_model();
  config.capacity = 512;
  config.context = 1024;
  const std::int64_t need = estimate_rank_bytes(config, 4);
  config.max_rank_memory_bytes = need;
  EXPECT_NO_THROW(check_rank_memory(config, 4));
  EXPECT_LT(estimate_rank_bytes(config, 8), need) << "more ranks, smaller shards";
  config.max_rank_memory_bytes = need - 1;
  try {
    check_rank_memory(config, 4);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("per rank on cpu at C = 512 on 4 rank(s)"), std::string::npos) << why;
    EXPECT_NE(why.find("(--max-rank-memory-mb)"), std::string::npos) << why;
    EXPECT_NE(why.find("activations of 512 tokens"), std::string::npos) << why;
  }
  config.max_rank_memory_bytes = 0;
  EXPECT_NO_THROW(check_rank_memory(config, 4)) << "0: no limit";
  // validate()'s floor (any world size): `hdp train --model small --max-rank-memory-mb 10`.
  config.model = model_preset("small");
  config.max_rank_memory_bytes = 10 * kMiB;
  try {
    config.validate();
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--max-rank-memory-mb"), std::string::npos) << e.what();
  }
}

// On a GPU the limit is the device's free memory when the worker started, less the GPU margin
// (8% and 1 GiB); the check is the same arithmetic, so it runs here on a configuration that says
// CUDA without a device. Unknown free memory (0) checks nothing.
TEST(MemoryModel, OnAGpuTheDevicesFreeMemoryIsTheLimit) {
  TrainerConfig config;
  config.model = small_model();
  config.capacity = 512;
  config.context = 1024;
  config.device = Device::kCuda;
  config.device_ordinal = 1;
  const std::int64_t need = estimate_rank_bytes(config, 4);
  const MemoryMargin margin = MemoryMargin::gpu();
  // The smallest free figure whose usable part holds the need (usable = 0.92 free - 1 GiB).
  std::int64_t enough = static_cast<std::int64_t>(static_cast<double>(need + margin.reserve_bytes) / 0.92) + 1;
  while (margin.usable(enough) < need) ++enough;
  config.device_free_bytes = enough;
  EXPECT_NO_THROW(check_rank_memory(config, 4));
  config.device_free_bytes = enough - 2;
  try {
    check_rank_memory(config, 4);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("on cuda:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("free on cuda:1 when the worker started"), std::string::npos) << e.what();
  }
  config.device_free_bytes = 0;
  EXPECT_NO_THROW(check_rank_memory(config, 4)) << "not known: no check";
}

// On a GPU the planner's cost model carries this model's activation sizes, so a micro-batch may
// hold more than C tokens with an offload ratio; on the CPU it never offloads.
TEST(MemoryModel, OnAGpuThePlannerGetsTheModelsOffloadSizes) {
  TrainerConfig config;
  config.model = small_model();
  config.precision = Precision::kBF16;
  config.capacity = 512;
  config.context = 4096;
  EXPECT_FALSE(trainer_cost_model(config).offload.has_value());
  EXPECT_FALSE(plans_offload(config, trainer_cost_model(config)));
  config.device = Device::kCuda;
  const mesh::CostModel cost = trainer_cost_model(config);
  ASSERT_TRUE(cost.offload.has_value());
  EXPECT_TRUE(plans_offload(config, cost));
  EXPECT_EQ(cost.offload->layers, config.model.n_layers);
  EXPECT_EQ(cost.offload->act_bytes_per_token,
            static_cast<double>(layer_activation_bytes(config.model, Precision::kBF16).per_token));
  EXPECT_EQ(cost.offload->d2h_gbps, kOffloadGbps);
  // A plan with these sizes, where compute is slow enough to hide the copies (the CPU estimate's
  // speed: Eq. 3 offloads only what compute hides): the long sequences span fewer ranks than
  // ceil(s / C), each member holding more than C tokens, with a ratio in (0, 1].
  mesh::CostModel slow = trainer_cost_model(TrainerConfig{.model = config.model});
  slow.offload = cost.offload;
  mesh::PlanRequest request;
  request.lengths = {4096, 3000, 512, 100};
  request.speeds.assign(8, 1.0);
  request.capacity = config.capacity;
  request.context = config.context;
  request.cost = slow;
  request.offload = true;
  const mesh::Plan plan = mesh::make_plan(request, mesh::Strategy::kNaive);  // the fewest ranks a sequence may span
  int offloading = 0;
  for (const mesh::MicroBatch& mb : plan.micro_batches) {
    EXPECT_GE(mb.offload_ratio, 0.0);
    EXPECT_LE(mb.offload_ratio, 1.0);
    if (mb.offload_ratio > 0) {
      EXPECT_GT(mb.rank_capacity, config.capacity);
      std::int64_t tokens = 0;
      for (std::uint32_t i : mb.sequences) tokens += request.lengths[i];
      EXPECT_LT(static_cast<std::int64_t>(mb.ranks.size()), (tokens + config.capacity - 1) / config.capacity);
      ++offloading;
    }
  }
  EXPECT_GE(offloading, 1) << "no micro-batch offloads";
}

// The step carries the plan's offloading through to what it reports: a micro-batch that the plan
// gives an offload ratio moves exactly the counted bytes of the schedule's layers (StepResult, and
// from it the step's log line and the metrics file's `offloaded_bytes`), one without moves none,
// and the step's loss and update are the same bits either way. One rank over TCP, on the CPU,
// where the model offloads into plain host memory.
TEST(MemoryModel, ADistributedStepReportsTheBytesItsPlanOffloaded) {
  using namespace std::chrono_literals;
  const LlamaConfig config = small_model();  // 3 layers: a ratio of 1 offloads layer 0
  const std::vector<std::vector<std::int32_t>> batch = {std::vector<std::int32_t>(200, 7),
                                                        std::vector<std::int32_t>(56, 9)};
  mesh::Plan plan;
  plan.micro_batches = {{.slot = 0, .sequences = {0, 1}, .ranks = {0}, .rank_capacity = 256}};
  plan.rank_queues = {{0}};
  auto step = [&](double ratio, std::int64_t* offloaded) {
    plan.micro_batches[0].offload_ratio = ratio;
    auto comms = mesh::connect_local(1, 20s);
    ops::model::LlamaModel model(config, ops::DType::kF32, Device::kCpu, Precision::kFull);
    model.init(5);
    mesh::ZeroOptimizer zero(model.params().numel(), 0, 1, ops::DType::kF32);
    mesh::DistributedStep distributed(model, zero, *comms[0], mesh::StepOptions{.timeout = 20s});
    const mesh::StepResult result = distributed.run(plan, batch);
    EXPECT_EQ(result.micro_batches.size(), 1u);
    EXPECT_EQ(result.micro_batches.at(0).offloaded_bytes, result.offloaded_bytes);
    *offloaded = result.offloaded_bytes;
    std::vector<float> out = model.params().to_vector<float>();
    out.push_back(static_cast<float>(result.loss()));
    return out;
  };
  std::int64_t none = -1, moved = -1;
  const std::vector<float> resident = step(0.0, &none);
  const std::vector<float> offloaded = step(1.0, &moved);
  EXPECT_EQ(none, 0);
  const std::int64_t layer = layer_activation_bytes(config, Precision::kFull).per_token * 256;
  EXPECT_EQ(moved, ops::model::offload_schedule(1.0, config.n_layers).offloaded() * layer);
  EXPECT_TRUE(resident == offloaded) << "offloading changed the step's loss or update";
}

}  // namespace
}  // namespace hdp::trainer
