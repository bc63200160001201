// Numbers as text, independent of the process's locale (std::to_chars / std::from_chars): under a
// decimal-comma locale printf would write 2.5 as "2,5", which generated C++ reads as the comma
// operator and the ISA parser cannot read back. Every place that writes or reads a number in code,
// ISA text or a message uses these (or a stream imbued with the classic locale).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace pypto::ir {

// printf("%.*g", precision, v) in the "C" locale; "nan", "inf", "-inf" for the special values.
std::string format_g(double v, int precision = 17);
// The whole of `s` as a decimal floating-point number ("2.5", "1e-3", "7"), or nullopt. Values
// out of range give nullopt; an optional leading '-' is accepted.
std::optional<double> parse_double(std::string_view s);

}  // namespace pypto::ir
