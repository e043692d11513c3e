#include "common/status.h"

#include <catch2/catch.hpp>

namespace fleetps {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  *out = q;
  return Status::OK();
}

TEST_CASE("Status carries code and message") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "OK");
  Status st = Status::NotFound("table 7");
  CHECK_FALSE(st.ok());
  CHECK(st.IsNotFound());
  CHECK(st.ToString() == "NotFound: table 7");
  CHECK(st.WithContext("PullSparse").message() == "PullSparse: table 7");
  CHECK(Status::OK().WithContext("x").ok());
}

TEST_CASE("StatusOr and the propagation macros") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  Status st = Quarter(6, &out);
  CHECK(st.IsInvalidArgument());
  CHECK(st.message() == "odd: 3");
  StatusOr<std::string> s = std::string("x");
  REQUIRE(s.ok());
  CHECK(*s == "x");
}

}  // namespace
}  // namespace fleetps
