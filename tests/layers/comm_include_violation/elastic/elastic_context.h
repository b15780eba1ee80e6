// File: tests/layers/comm_include_violation/elastic/elastic_context.h
//
// A header of the case's hdp_elastic (beside its source elastic_context.cc); never compiled.
#pragma once
