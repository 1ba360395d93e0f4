// cpuRelax(): one spin-loop hint to the CPU (x86 PAUSE, Arm YIELD), for busy polls that must
// not give the core away (a sched_yield can lose it for a whole time slice under load).
#pragma once

namespace hvd {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace hvd
