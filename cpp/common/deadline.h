// Deadline: every blocking call in the core takes one, so nothing waits forever.
#pragma once

#include <chrono>

namespace hvd {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  template <typename Rep, typename Period>
  static Deadline after(std::chrono::duration<Rep, Period> timeout) {
    return Deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout));
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  bool isNever() const { return at_ == Clock::time_point::max(); }
  Clock::time_point at() const { return at_; }
  // Time left, clamped at zero; a large value for never().
  std::chrono::milliseconds remaining() const {
    if (isNever()) return std::chrono::hours(24 * 365);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  // Milliseconds to pass to poll(): -1 never; else remaining, capped by `cap` if given.
  int pollTimeoutMs(int capMs = -1) const {
    long left = isNever() ? -1 : static_cast<long>(remaining().count());
    if (capMs >= 0 && (left < 0 || left > capMs)) left = capMs;
    return static_cast<int>(left);
  }
  Deadline earliest(const Deadline& other) const { return at_ < other.at_ ? *this : other; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace hvd
