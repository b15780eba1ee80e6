// File: tests/layers/comm_include_violation/mesh/comm/communicator_factory.h
//
// A communicator header that takes a struct from the rendezvous library's header: the layering
// check must refuse it. Never compiled.
#pragma once

#include "elastic/elastic_context.h"
