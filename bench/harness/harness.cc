#include "harness/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <sstream>

#include "harness/collectives.h"

namespace hvd::bench {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::optional<size_t> parseSize(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0) return std::nullopt;
  std::string suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") return std::nullopt;
  return static_cast<size_t>(value * scale);
}

std::string formatRow(size_t bytes, size_t count, std::string_view type, std::string_view redop, std::string_view root,
                      double med, double p99, double algbw, double busbw, std::string_view check, int iters) {
  char line[256];
  std::snprintf(line, sizeof line, "%12zu %12zu %9.*s %6.*s %5.*s %12.2f %12.2f %10.3f %10.3f %6.*s %6d", bytes, count,
                int(type.size()), type.data(), int(redop.size()), redop.data(), int(root.size()), root.data(), med, p99,
                algbw, busbw, int(check.size()), check.data(), iters);
  return line;
}

}  // namespace

std::vector<std::string> collectiveNames() {
  std::vector<std::string> names;
  for (const auto& c : allCollectives()) names.emplace_back(c.name);
  return names;
}

std::string benchUsage(const std::string& program) {
  std::ostringstream s;
  s << "usage: " << program << " [options]\n"
    << "  -o OP        collective: ";
  for (const auto& n : collectiveNames()) s << n << " ";
  s << "(default allreduce)\n"
    << "  -d TYPE      uint8 int32 int64 float16 bfloat16 float32 float64 (default float32)\n"
    << "  -b SIZE      smallest size in bytes, K/M/G suffixes (default 4)\n"
    << "  -e SIZE      largest size (default 256M)\n"
    << "  -f FACTOR    size multiplier between rows (default 4)\n"
    << "  -n ITERS     timed iterations per row (default 0 = auto, at least 20)\n"
    << "  -w WARMUP    warm-up iterations per row (default 5)\n"
    << "  -r ROOT      broadcast root (default 0)\n"
    << "  -k K         allreduce_batch: tensors per step (default 100)\n"
    << "  --smoke      correctness only: sizes 4 B..64 KiB, 2 iterations, check each\n"
    << "  --no-header  omit the column header\n";
  return s.str();
}

std::optional<BenchOptions> parseBenchOptions(int argc, char** argv, std::string* error) {
  BenchOptions o;
  bool sizesGiven = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    auto bad = [&](const std::string& why) {
      *error = arg + ": " + why + "\n" + benchUsage(argv[0]);
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") {
      *error = benchUsage(argv[0]);
      return std::nullopt;
    } else if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--no-header") {
      o.header = false;
    } else if (arg.size() == 2 && arg[0] == '-' && std::strchr("obefnwrk", arg[1])) {
      auto value = next();
      if (!value) return bad("missing value");
      char flag = arg[1];
      if (flag == 'o') {
        if (!findCollective(*value)) return bad("unknown collective '" + *value + "'");
        o.op = *value;
      } else if (flag == 'b' || flag == 'e') {
        auto size = parseSize(*value);
        if (!size) return bad("bad size '" + *value + "'");
        (flag == 'b' ? o.minBytes : o.maxBytes) = *size;
        sizesGiven = true;
      } else if (flag == 'f') {
        o.factor = std::atof(value->c_str());
        if (!(o.factor > 1.0)) return bad("factor must be > 1");
      } else {
        char* end = nullptr;
        long v = std::strtol(value->c_str(), &end, 10);
        if (*end != '\0' || v < 0) return bad("bad number '" + *value + "'");
        if (flag == 'n') o.iters = int(v);
        if (flag == 'w') o.warmup = int(v);
        if (flag == 'r') o.root = int(v);
        if (flag == 'k') o.batch = std::max<int>(1, int(v));
      }
    } else if (arg == "-d") {
      auto value = next();
      if (!value) return bad("missing value");
      auto type = parseElemType(*value);
      if (!type) return bad("unknown type '" + *value + "'");
      o.type = *type;
    } else {
      return bad("unknown option");
    }
  }
  if (o.smoke) {
    if (!sizesGiven) {
      o.minBytes = 4;
      o.maxBytes = 64 << 10;
      o.factor = std::max(o.factor, 16.0);
    }
    o.iters = 2;
    o.warmup = 1;
  }
  if (o.minBytes > o.maxBytes) {
    *error = "-b is larger than -e\n";
    return std::nullopt;
  }
  return o;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

MemoryUsage readMemoryUsage() {
  MemoryUsage usage;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) usage.rssKiB = std::atol(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) usage.hwmKiB = std::atol(line.c_str() + 6);
    if (line.rfind("RssAnon:", 0) == 0) usage.anonKiB = std::atol(line.c_str() + 8);
    if (line.rfind("RssShmem:", 0) == 0) usage.shmemKiB = std::atol(line.c_str() + 9);
  }
  std::ifstream rollup("/proc/self/smaps_rollup");
  while (std::getline(rollup, line)) {
    if (line.rfind("Pss:", 0) == 0) usage.pssKiB = std::atol(line.c_str() + 4);
  }
  return usage;
}

int runBenchmark(BenchComm& comm, const BenchOptions& options, std::ostream& out) {
  const Collective* coll = findCollective(options.op);
  const bool lead = comm.rank() == 0;
  if (!coll) {
    if (lead) out << "# unknown collective " << options.op << "\n";
    return 1;
  }
  if (!comm.supports(options.type)) {
    if (lead) out << "# " << comm.systemName() << " does not support " << elemName(options.type) << "\n";
    return 1;
  }
  const int n = comm.size();
  const size_t elem = elemSize(options.type);
  const std::string_view redop = coll->redop;
  if (lead) {
    out << "# system=" << comm.systemName() << " op=" << options.op << " dtype=" << elemName(options.type)
        << " ranks=" << n << " warmup=" << options.warmup
        << " iters=" << (options.iters ? std::to_string(options.iters) : std::string("auto"))
        << " bus_factor=" << coll->busFactor(n)
        << (options.op == "allreduce_batch" ? " k=" + std::to_string(options.batch) : "")
        << (options.smoke ? " smoke=1" : "") << "\n";
    if (options.header) {
      char header[256];
      std::snprintf(header, sizeof header, "#%11s %12s %9s %6s %5s %12s %12s %10s %10s %6s %6s", "size", "count",
                    "type", "redop", "root", "time_med_us", "time_p99_us", "algbw_GBps", "busbw_GBps", "check",
                    "iters");
      out << header << "\n";
    }
    out.flush();
  }
  int wrongRows = 0;
  size_t peakBufferBytes = 0;
  const long baseline = options.baselinePssKiB >= 0 ? options.baselinePssKiB : readMemoryUsage().pssKiB;
  // Largest memory (PSS) the system added after a row (KiB), with the row and the breakdown.
  std::vector<double> engineMem{0, 0, 0, 0, 0};  // added, fusion buffer, row bytes, anon, shmem
  for (double nominal = double(options.minBytes); nominal <= double(options.maxBytes) * 1.0000001;
       nominal *= options.factor) {
    size_t bytes = static_cast<size_t>(nominal);
    RowShape shape = coll->shape(bytes, elem, n, options.batch);
    if (shape.count == 0) continue;
    RowContext row;
    row.comm = &comm;
    row.type = options.type;
    row.rank = comm.rank();
    row.ranks = n;
    row.root = options.root % n;
    row.count = shape.count;
    for (size_t j = 0; j < shape.buffers; ++j) {
      row.in.emplace_back(shape.inElems * elem);
      row.out.emplace_back(shape.outElems * elem);
    }
    peakBufferBytes = std::max(peakBufferBytes, shape.buffers * (shape.inElems + shape.outElems) * elem);
    coll->fill(row);
    comm.barrier();

    // Warm-up, and from its duration the iteration count (agreed over ranks).
    Clock::time_point start = Clock::now();
    for (int w = 0; w < options.warmup; ++w) coll->run(row);
    int iters = options.iters;
    if (iters == 0) {
      std::vector<double> perIter{options.warmup > 0 ? secondsSince(start) / options.warmup : 1e-3};
      comm.maxOverRanks(perIter);
      iters = int(std::clamp(options.targetSeconds / std::max(perIter[0], 1e-9), double(options.minIters),
                             double(options.maxIters)));
    }
    size_t bad = 0;
    std::vector<double> times(static_cast<size_t>(iters));
    comm.barrier();
    start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      coll->run(row);
      Clock::time_point now = Clock::now();
      times[size_t(i)] = std::chrono::duration<double>(now - start).count();
      start = now;
      if (options.smoke) {
        // Check every iteration's output, and start the next from fresh inputs.
        bad += coll->check(row);
        if (i + 1 < iters) {
          coll->fill(row);
          comm.barrier();
          start = Clock::now();
        }
      }
    }
    if (!options.smoke) bad += coll->check(row);
    std::vector<double> badVec{double(bad)};
    comm.maxOverRanks(badVec);
    comm.maxOverRanks(times);
    double med = percentile(times, 50) * 1e6;
    double p99 = percentile(times, 99) * 1e6;
    double algbw = med > 0 ? double(shape.reportedBytes) / (med * 1e-6) / 1e9 : 0.0;
    double busbw = algbw * coll->busFactor(n);
    bool ok = badVec[0] == 0;
    wrongRows += ok ? 0 : 1;
    if (lead) {
      std::string root = options.op == "broadcast" ? std::to_string(row.root) : "-";
      out << formatRow(shape.reportedBytes, shape.count, elemName(options.type), redop, root, med, p99, algbw, busbw,
                       ok ? "OK" : "WRONG", iters)
          << "\n";
      out.flush();
    }
    // The row's buffers and the outputs the system handed out go; what stays is the system's.
    row.in.clear();
    row.out.clear();
    row.result = nullptr;
    comm.releaseOutputs();
    MemoryUsage now = readMemoryUsage();
    if (double(now.pssKiB - baseline) > engineMem[0]) {
      engineMem = {double(now.pssKiB - baseline), double(comm.fusionBufferBytes() / 1024), double(shape.reportedBytes),
                   double(now.anonKiB), double(now.shmemKiB)};
    }
  }
  std::vector<double> added{engineMem[0]};
  comm.maxOverRanks(added);
  std::vector<double> details = engineMem;
  // The rank with the largest figure reports its breakdown (others send zeros).
  if (engineMem[0] < added[0]) details.assign(details.size(), 0.0);
  comm.maxOverRanks(details);
  if (lead) {
    out << "# peak_bench_buffers_kib=" << peakBufferBytes / 1024 << "\n";
    const long limit = long(details[1]) + (32 << 10);
    out << "# engine_memory_kib (pss after a row, max over rows and ranks): added=" << long(added[0])
        << " fusion_buffer=" << long(details[1]) << " at_row_bytes=" << long(details[2])
        << " rss_anon=" << long(details[3]) << " rss_shmem=" << long(details[4]) << " target<=" << limit
        << (long(added[0]) <= limit ? " OK" : " EXCEEDED") << "\n";
  }
  return wrongRows;
}

}  // namespace hvd::bench
