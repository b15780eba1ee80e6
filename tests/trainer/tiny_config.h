// File: tests/trainer/tiny_config.h
//
// The trainer's configuration that unit tests build a setup from without files of their own: the
// tiny preset over synthetic documents, context and capacity 128, 1,024 tokens a step. A test
// changes what it is about.
#pragma once

#include "trainer/trainer_config.h"

namespace hdp::trainer {

inline TrainerConfig tiny_config() {
  TrainerConfig c;
  c.model = model_preset("tiny");
  c.context = 128;
  c.capacity = 128;
  c.batch_tokens = 1024;
  c.data = "synthetic:github";
  return c;
}

}  // namespace hdp::trainer
