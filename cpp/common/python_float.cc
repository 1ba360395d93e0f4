#include "common/python_float.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace hvd {

std::string pythonFloat(double value) {
  if (value != value) return "nan";
  if (value == 1.0 / 0.0) return "inf";
  if (value == -1.0 / 0.0) return "-inf";
  // Shortest round-trip digits, then Python's repr layout: fixed notation for exponents in
  // [-4, 16), scientific otherwise.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string mantissa = sci.substr(0, e);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = negative ? "-" : "";
    out += mantissa + "e" + (exponent < 0 ? "-" : "+");
    std::string exp = std::to_string(exponent < 0 ? -exponent : exponent);
    if (exp.size() < 2) exp = "0" + exp;
    return out + exp;
  }
  std::string out;
  if (exponent >= 0) {
    std::string intPart = digits.substr(0, std::min<size_t>(digits.size(), exponent + 1));
    while (static_cast<int>(intPart.size()) < exponent + 1) intPart += '0';
    std::string frac = digits.size() > static_cast<size_t>(exponent + 1) ? digits.substr(exponent + 1) : "0";
    out = intPart + "." + frac;
  } else {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  }
  return (negative ? "-" : "") + out;
}

}  // namespace hvd
