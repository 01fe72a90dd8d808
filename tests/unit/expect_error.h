// The one helper every error test uses: run f, expect an exception of type E
// whose message names the op (and, optionally, the offending values).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

namespace kiln::testing {

// Expects E from f with every one of parts in its message.
template <typename E, typename F>
void expect_error_with(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown; expected one containing '" << parts.at(0) << "'";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Expects E from f with op (and also, when given) in its message.
template <typename E, typename F>
void expect_error(F&& f, const std::string& op, const std::string& also = "") {
  std::vector<std::string> parts = {op};
  if (!also.empty()) parts.push_back(also);
  expect_error_with<E>(f, parts);
}

}  // namespace kiln::testing
