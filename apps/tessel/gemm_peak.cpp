#include "gemm_peak.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "tessel/core/cpu_model.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/gemm_peak_check.h"

namespace tessel::app {
namespace {

constexpr int64_t kSize = 2048;        // square GEMM measured
constexpr int kAttempts = 3;           // measurements at most per call
constexpr int kTrustedWanted = 2;      // stop after this many trusted ones (the best is kept)
constexpr double kMaxAgeDays = 30;     // older cache entries are measured again

std::filesystem::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir = xdg ? xdg : (home ? std::filesystem::path(home) / ".cache" : "/tmp");
  return dir / "tessel" / "gemm_peak.json";
}

// CPU seconds all processes of the machine spent running (every CPU), from /proc/stat's first line:
// user nice system idle iowait irq softirq steal ... (steal: time the hypervisor gave to others).
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  if (!in || cpu != "cpu") return -1;
  return (user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// One measurement: best of 3 with 1 thread, best of 5 with all threads, and how much of the CPU time
// of the cores those threads need other processes took meanwhile (CPUs beyond them are theirs).
kernels::PeakMeasurement measure(DType dtype) {
  kernels::PeakMeasurement m;
  m.threads = omp_get_max_threads();
  omp_set_num_threads(1);
  m.one_thread = kernels::measure_gemm_gflops(dtype, kSize, 3);
  omp_set_num_threads(m.threads);
  const double busy0 = machine_busy_seconds(), own0 = own_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  m.all_threads = kernels::measure_gemm_gflops(dtype, kSize, 5);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double busy1 = machine_busy_seconds(), own1 = own_cpu_seconds();
  if (busy0 >= 0 && busy1 >= 0 && wall > 0) {
    const double spare = std::max(0.0, double(sysconf(_SC_NPROCESSORS_ONLN) - m.threads)) * wall;
    const double others = std::max(0.0, (busy1 - busy0) - (own1 - own0) - spare);
    m.others_cpu_share = std::min(1.0, others / (double(m.threads) * wall));
  }
  return m;
}

std::string date_of(double unix_seconds) {
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

double now_unix() { return double(std::time(nullptr)); }

// Entries are written only for trusted measurements, in this form; a bare number comes from a tessel
// that cached whatever it measured.
bool well_formed(const nlohmann::json& e) {
  return e.is_object() && e.contains("gflops") && e["gflops"].is_number() && e["gflops"].get<double>() > 0 &&
         e.contains("measured_at") && e["measured_at"].is_number();
}

// Why a cache entry cannot be used as it is ("" when it can).
std::string entry_problem(const nlohmann::json& e) {
  if (!well_formed(e)) return "the cached value was written by a tessel that did not check the machine was idle";
  const int threads = e.contains("threads") && e["threads"].is_number_integer() ? e["threads"].get<int>() : 1;
  if (!kernels::physically_possible(e["gflops"].get<double>(), threads))
    return fmt::format("the cached value, {:.0f} GFLOP/s on {} thread(s), is more than a CPU computes (a measurement "
                       "that timed a queued launch)", e["gflops"].get<double>(), threads);
  const double age_days = (now_unix() - e["measured_at"].get<double>()) / 86400.0;
  if (age_days > kMaxAgeDays || age_days < -1)
    return fmt::format("the cached value was measured {}, more than {:.0f} days ago",
                       date_of(e["measured_at"].get<double>()), kMaxAgeDays);
  return "";
}

nlohmann::json read_cache(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in.good()) return nlohmann::json::object();
  try {
    nlohmann::json j;
    in >> j;
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::json::object();  // unreadable: measured again and rewritten
}

void write_cache(const std::filesystem::path& path, const nlohmann::json& cache) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  // Written beside and renamed over: concurrent runs never read a half-written cache.
  const auto tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << cache.dump(2) << "\n";
    if (!out.good()) {
      std::fprintf(stderr, "tessel: could not write the GEMM peak cache %s\n", tmp.c_str());
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
}

}  // namespace

std::pair<double, std::string> gemm_peak(DType dtype, bool remeasure) {
  const int threads = omp_get_max_threads();
  const std::string key = fmt::format("{} | {} | threads {} | {}", cpu_model_name(), kernels::gemm_cpu_isa(), threads,
                                      dtype_name(dtype));
  const auto path = cache_file();
  nlohmann::json cache = read_cache(path);
  const nlohmann::json* entry = cache.contains(key) ? &cache[key] : nullptr;
  const std::string problem = entry ? entry_problem(*entry) : "no entry for " + key;
  if (!remeasure && problem.empty())
    return {(*entry)["gflops"].get<double>(),
            fmt::format("cached {} in {}; --remeasure-peak measures it again", date_of((*entry)["measured_at"].get<double>()),
                        path.string())};
  std::fprintf(stderr, "tessel: measuring the %s GEMM peak (%s)...\n", std::string(dtype_name(dtype)).c_str(),
               remeasure ? "--remeasure-peak" : problem.c_str());

  double best_trusted = 0, best_any = 0, one_thread = 0;
  std::string busy_reason;
  for (int attempt = 0, trusted = 0; attempt < kAttempts && trusted < kTrustedWanted; ++attempt) {
    const kernels::PeakMeasurement m = measure(dtype);
    const kernels::PeakVerdict v = kernels::judge_peak(m);
    best_any = std::max(best_any, m.all_threads);
    if (v.trusted) {
      ++trusted;
      if (m.all_threads > best_trusted) {
        best_trusted = m.all_threads;
        one_thread = m.one_thread;
      }
    } else {
      busy_reason = v.reason;
    }
  }
  if (best_trusted > 0) {
    cache[key] = {{"gflops", best_trusted},
                  {"one_thread_gflops", one_thread},
                  {"threads", threads},
                  {"measured_at", now_unix()},
                  {"date", date_of(now_unix())}};
    write_cache(path, cache);
    return {best_trusted, fmt::format("measured now, {} threads at {:.2f}x one thread; cached in {}", threads,
                                      best_trusted / one_thread, path.string())};
  }
  // Every attempt looked busy: an older verified entry beats a measurement known to be low.
  if (entry && well_formed(*entry))
    return {(*entry)["gflops"].get<double>(),
            fmt::format("cached {} in {}, kept: measuring again found the machine busy ({})",
                        date_of((*entry)["measured_at"].get<double>()), path.string(), busy_reason)};
  const std::string src = fmt::format(
      "PROVISIONAL, for this run only: the machine looks busy ({}); not cached, so MFU reads too high; run "
      "again with --remeasure-peak on an idle machine",
      busy_reason);
  std::fprintf(stderr, "tessel: GEMM peak %.1f GFLOP/s is %s\n", best_any, src.c_str());
  return {best_any, src};
}

}  // namespace tessel::app
