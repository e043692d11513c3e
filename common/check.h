#pragma once
// FLEETPS_CHECK: broken invariants (bugs, never bad input). Prints file:line, the
// failed condition (and operands for the _EQ/_LT forms) and a streamed message to
// stderr, then aborts. Bad input is reported with a Status instead.

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace fleetps::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << "CHECK failed at " << file << ":" << line << ": " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `FLEETPS_CHECK(c) << msg` be an expression of type void.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace fleetps::internal

#define FLEETPS_CHECK(cond) \
  (cond) ? (void)0          \
         : ::fleetps::internal::Voidify() & ::fleetps::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define FLEETPS_CHECK_OP(a, op, b)                                                                   \
  ((a)op(b)) ? (void)0                                                                               \
             : ::fleetps::internal::Voidify() &                                                      \
                   ::fleetps::internal::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b).stream() \
                       << "(" << (a) << " vs " << (b) << ") "

#define FLEETPS_CHECK_EQ(a, b) FLEETPS_CHECK_OP(a, ==, b)
#define FLEETPS_CHECK_NE(a, b) FLEETPS_CHECK_OP(a, !=, b)
#define FLEETPS_CHECK_LT(a, b) FLEETPS_CHECK_OP(a, <, b)
#define FLEETPS_CHECK_LE(a, b) FLEETPS_CHECK_OP(a, <=, b)
#define FLEETPS_CHECK_GE(a, b) FLEETPS_CHECK_OP(a, >=, b)
