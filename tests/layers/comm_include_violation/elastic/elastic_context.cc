// File: tests/layers/comm_include_violation/elastic/elastic_context.cc
//
// The source that makes elastic_context.h a header of the case's hdp_elastic; never compiled.
#include "elastic/elastic_context.h"
