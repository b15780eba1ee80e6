// File: common/error.h
//
// The one exception hierarchy of hdp, in two tiers (docs/errors.md):
//
//   Error                         base of everything hdp throws
//   ├─ RecoverableError           tier 1: the caller may retry or re-rendezvous
//   │   ├─ StoreUnavailable       the coordination store cannot be reached (retry with backoff)
//   │   ├─ TimeoutError           a wait or a collective ran past its deadline
//   │   └─ PeerLost               a peer of the current generation is gone (rebuild the mesh)
//   └─ FatalError                 tier 2: do not retry until someone fixes something
//       ├─ InvalidArgument        bad input: a URL, a flag, a value read from Redis, a shape
//       ├─ AuthError              the store refused our credentials
//       └─ InvariantViolation     a bug: an internal assumption failed (HDP_CHECK)
//
// Libraries throw; only cli/ turns an exception into an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace hdp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RecoverableError : public Error {
 public:
  using Error::Error;
};
class StoreUnavailable : public RecoverableError {
 public:
  using RecoverableError::RecoverableError;
};
class TimeoutError : public RecoverableError {
 public:
  using RecoverableError::RecoverableError;
};
class PeerLost : public RecoverableError {
 public:
  using RecoverableError::RecoverableError;
};

class FatalError : public Error {
 public:
  using Error::Error;
};
class InvalidArgument : public FatalError {
 public:
  using FatalError::FatalError;
};
// A worker the running job refused (it differs from the ranks that hold the job's state:
// trainer/job_identity.h). The job goes on without its node; `hdp train` exits kExitRefused.
class RefusedByJob : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};
class AuthError : public FatalError {
 public:
  using FatalError::FatalError;
};
class InvariantViolation : public FatalError {
 public:
  using FatalError::FatalError;
};

// The text of an errno value ("No such file or directory"), for an error message.
std::string errno_text(int error);

namespace detail {
[[noreturn]] void throw_invariant(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace hdp

// HDP_CHECK(cond, message): throws InvariantViolation "[file:line] check failed: cond: message".
// For internal assumptions only; validate user input with InvalidArgument and a message naming the input.
#define HDP_CHECK(cond, message)                                               \
  do {                                                                         \
    if (!(cond)) ::hdp::detail::throw_invariant(__FILE__, __LINE__, #cond, (message)); \
  } while (0)
