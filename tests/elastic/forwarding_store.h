// File: tests/elastic/forwarding_store.h
//
// The tests' name for elastic::ForwardingStore (elastic/forwarding_store.h): override
// before_call() (called first in every call) or single calls to inject faults between a client
// and its store.
#pragma once

#include "elastic/forwarding_store.h"

namespace hdp::elastic::test {

using elastic::ForwardingStore;

}  // namespace hdp::elastic::test
