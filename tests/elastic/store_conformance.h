// File: tests/elastic/store_conformance.h
//
// The fixture of the Store conformance suite (store_conformance.cc); instantiate it with
// INSTANTIATE_TEST_SUITE_P(Name, StoreConformance, Values(some_backend()), backend_name).
#pragma once

#include <gtest/gtest.h>

#include "tests/elastic/store_backends.h"

namespace hdp::test {

class StoreConformance : public ::testing::TestWithParam<BackendParam> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    store_ = backend_->client();
  }
  std::unique_ptr<StoreBackend> backend_;
  std::shared_ptr<elastic::Store> store_;
};

inline std::string backend_name(const ::testing::TestParamInfo<BackendParam>& info) { return info.param.name; }

}  // namespace hdp::test
